"""The benchmark's model and data: a small Qwen3-shaped model trained from scratch, with a
byte-level BPE tokenizer trained on the environment's own text, and the expert's episodes
(with a fixed short thought) as SFT data.

The environment's fixed instruction text (TextCraft's system prompt of about 2,000 characters,
sent with every prompt) is one added token of the tokenizer, so CPU time goes to the task text
rather than to re-reading a fixed instruction every turn; the model still sees it, as one symbol.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentenvs.agents.tiny_model import TinyModelSpec

__all__ = [
    "CHECK_MODEL",
    "SHORT_THOUGHT",
    "build_check_model",
    "build_env_model",
    "expert_trajectories",
    "renamed_copies",
    "textcraft_item_names",
]

SHORT_THOUGHT = "I take the next step."

CHECK_MODEL = TinyModelSpec(
    vocab_size=1024,
    hidden_size=128,
    intermediate_size=384,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=4096,
)
"""Shape of the benchmark's model (Qwen3 architecture, about 0.9M parameters)."""


def _textcraft_corpus(env_id: str, task_ids: Sequence[str]) -> list[str]:
    """TextCraft text to train the tokenizer on: observations, replies, feedback."""
    from agentenvs.agents.prompts import format_error_feedback, format_reply
    from agentenvs.registration import make

    env = make(env_id).unwrapped
    texts = []
    for task_id in task_ids:
        observation, _ = env.reset(options={"task_id": task_id})
        texts.append(observation)
        for line in observation.splitlines():
            if line.startswith("craft "):
                _, _, inputs = line.partition(" using ")
                texts.append(format_reply(SHORT_THOUGHT, line))
                for part in inputs.split(", "):
                    texts.append(format_reply(SHORT_THOUGHT, f"get {part}"))
                    texts.append(f"Got {part}")
    texts.append("<|im_start|>system\n<|im_start|>user\n<|im_start|>assistant\n")
    texts.append(format_error_feedback(env_id, "no [[ ... ]] action found"))
    texts.append("Inventory: You are not carrying anything. Could not find enough items to craft")
    return texts


def build_check_model(
    out_dir: str | Path,
    spec: TinyModelSpec = CHECK_MODEL,
    *,
    env_id: str = "TextCraft-v0",
    tokenizer_tasks: int = 200,
) -> Path:
    """Build (or reuse, if complete) the TextCraft model and tokenizer in ``out_dir``: the
    tokenizer is trained on the first ``tokenizer_tasks`` test tasks' text."""
    from agentenvs.agents.prompts import system_prompt
    from agentenvs.agents.tiny_model import build_tiny_model
    from agentenvs.registration import build_env

    tasks = build_env(env_id).task_ids("test")[:tokenizer_tasks]
    system = system_prompt(env_id)
    return build_tiny_model(
        out_dir,
        spec,
        corpus=_textcraft_corpus(env_id, tasks),
        added_tokens=[system] if system else [],
    )


def build_env_model(
    out_dir: str | Path,
    spec: TinyModelSpec,
    env_id: str,
    trajectories: Sequence[Any],
    *,
    words: Sequence[str] = (),
) -> Path:
    """Build (or reuse) a model for any environment: the tokenizer is trained on the messages
    of ``trajectories`` (the SFT data) and the error feedback; the system prompt, if any, is one
    added token, and so is each of ``words`` where it stands as a whole word (TextCraft's item
    names: :func:`textcraft_item_names`)."""
    from agentenvs.agents.prompts import format_error_feedback, system_prompt
    from agentenvs.agents.tiny_model import build_tiny_model

    corpus = [m["content"] for t in trajectories for m in t.messages]
    corpus += [format_error_feedback(env_id, "no action found"), "<|im_start|>user\n"] * 4
    system = system_prompt(env_id)
    users = [m["content"] for t in trajectories for m in t.messages if m["role"] == "user"]
    added = [system] if system else []
    added += [chunk for chunk in _fixed_chunks(users) if chunk not in added]
    return build_tiny_model(out_dir, spec, corpus=corpus, added_tokens=added, added_words=words)


def textcraft_item_names() -> list[str]:
    """Every item (and tag) name of TextCraft's recipe database, as observations write them.

    The environment's vocabulary, not a task: one token each in the benchmark's tokenizer, so
    that copying an item from a recipe is copying one token (as it is for a quantity), and the
    pool of names for :func:`renamed_copies`. A held-out task's goal and recipes still never
    occur in the SFT data."""
    from agentenvs.textcraft.crafting import default_tree, item_id_to_str

    return sorted({item_id_to_str(i) for i in default_tree().itemid_set})


def _fixed_chunks(texts: Sequence[str], *, at_least: int = 200) -> list[str]:
    """The common start and end of every text (a prompt template's fixed instructions), where
    at least ``at_least`` characters long, cut at a line break."""
    if not texts:
        return []
    head = os.path.commonprefix(list(texts))
    tail = os.path.commonprefix([t[::-1] for t in texts])[::-1]
    head = head[: head.rfind("\n") + 1]
    tail = tail[tail.find("\n") :] if "\n" in tail else ""
    return [c for c in (head, tail) if len(c) >= at_least]


def expert_trajectories(env_id: str, task_ids: Sequence[str], *, samples: int = 1) -> list[Any]:
    """The expert's episodes of ``task_ids`` (run through the rollout code, so the messages are
    exactly a model's prompt format), with every reply's thought replaced by ``SHORT_THOUGHT``."""
    from agentenvs.agents.prompts import format_reply
    from agentenvs.agents.registry import make_policy
    from agentenvs.agents.rollout import plan_episodes, run_rollouts

    trajs = run_rollouts(make_policy("expert"), env_id, plan_episodes(list(task_ids), samples))
    order = {t: i for i, t in enumerate(task_ids)}
    trajs.sort(key=lambda t: (order[t.task_id], t.sample_index))
    for traj in trajs:
        actions = iter(traj.steps)
        for message in traj.messages:
            if message["role"] == "assistant":
                step = next(actions)
                message["content"] = format_reply(SHORT_THOUGHT, step.action or "", env_id)
                step.completion = message["content"]
    return trajs


_RECIPE = re.compile(r"^craft \d+ (.+?) using (.+)$", re.M)


def _item_names(text: str) -> set[str]:
    names = set()
    for goal, inputs in _RECIPE.findall(text):
        names.add(goal)
        names.update(part.split(" ", 1)[1] for part in inputs.split(", ") if " " in part)
    return names


def renamed_copies(
    trajectories: Sequence[Any],
    copies: int,
    seed: int = 0,
    *,
    pool: Sequence[str] | None = None,
) -> list[Any]:
    """TextCraft only: ``copies`` copies of each trajectory with its item names consistently
    replaced by other names (``minecraft:`` ids too): names from ``pool``, or (None) other
    items' names of the same trajectories.

    The goal then no longer tells the actions: SFT must read the recipe in the observation and
    copy from it, which is what an unseen task needs (a small model trained from scratch on the
    real episodes alone memorises goal -> actions: docs/learning-check/README.md). The copies
    are text for SFT, not environment tasks.
    """
    import copy
    import random

    rng = random.Random(seed)
    names_of = [
        _item_names("\n".join(m["content"] for m in t.messages if m["role"] == "user"))
        for t in trajectories
    ]
    pool = sorted(set().union(*names_of) if pool is None else pool)
    out = []
    for traj, names in zip(trajectories, names_of, strict=True):
        ordered = sorted(names, key=lambda name: (-len(name), name))  # (not set order)
        for _ in range(copies):
            new = rng.sample(pool, len(ordered)) if len(pool) >= len(ordered) else ordered
            mapping = dict(zip(ordered, new, strict=True))
            for old, repl in list(mapping.items()):
                mapping["minecraft:" + old.replace(" ", "_")] = "minecraft:" + repl.replace(
                    " ", "_"
                )
            keys = sorted(mapping, key=len, reverse=True)
            pattern = re.compile(r"(?<![\w:])(" + "|".join(map(re.escape, keys)) + r")(?![\w])")
            twin = copy.deepcopy(traj)
            rename = functools.partial(pattern.sub, lambda m, table=mapping: table[m.group(1)])
            for message in twin.messages:
                if message["role"] != "system":
                    message["content"] = rename(message["content"])
            for step in twin.steps:
                if step.action:
                    step.action = rename(step.action)
            out.append(twin)
    return out
