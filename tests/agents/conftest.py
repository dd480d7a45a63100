"""Fixtures of the agents tests: the tiny local Qwen3 model (built once per session) and helpers."""

from __future__ import annotations

import importlib

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny random Qwen3 model with a locally trained tokenizer and ChatML template."""
    from agentenvs.agents.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def tiny_policy(tiny_model_dir):
    """The tiny model on the transformers backend (CPU, float32)."""
    from agentenvs.agents.backends.transformers_backend import TransformersPolicy

    policy = TransformersPolicy(str(tiny_model_dir), device="cpu", dtype="float32")
    yield policy
    policy.close()


def registered_envs() -> list[str]:
    """The registered environment ids whose module imports here (others are skipped)."""
    from agentenvs.registration import ENVIRONMENTS, env_class

    ok = []
    for env_id in ENVIRONMENTS:
        try:
            env_class(env_id)
        except Exception:
            continue
        ok.append(env_id)
    return ok


def has_expert(env_id: str) -> bool:
    from agentenvs.expert import EXPERTS

    if env_id not in EXPERTS:
        return False
    module = EXPERTS[env_id].partition(":")[0]
    try:
        importlib.import_module(module)
    except Exception:
        return False
    return True


def cut_spec(
    env_id: str,
    task_id: str,
    prefix_actions,
    group_id: str,
    sample_index: int = 0,
    max_turns: int | None = None,
    **fields,
):
    """An :class:`agentenvs.agents.rollout.EpisodeSpec` that starts after ``prefix_actions``: the
    conversation a policy replying those actions would have had (every turn kept), and the
    observation the environment reached as the recorded cut observation."""
    from agentenvs.agents.prompts import Conversation, format_reply
    from agentenvs.agents.rollout import EpisodeSpec
    from agentenvs.registration import make

    env = make(env_id, max_turns=max_turns)
    try:
        observation, info = env.reset(options={"task_id": task_id})
        conversation = Conversation(env_id, None)
        conversation.start(observation, info)
        for action in prefix_actions:
            conversation.add_reply(format_reply("a teacher step", action, env_id), action)
            observation, _, _, _, info = env.step(action)
            conversation.add_observation(observation, info)
    finally:
        env.close()
    settings = {
        "prefix_actions": tuple(prefix_actions),
        "start_messages": conversation.messages,
        "cut_observation": observation,
        **fields,
    }
    return EpisodeSpec(task_id, group_id, sample_index, **settings)


SYSTEM = {"role": "system", "content": "You are an agent in a text environment. " * 4}
CONVERSATIONS = [
    [SYSTEM, {"role": "user", "content": "Goal: craft stick."}],
    [SYSTEM, {"role": "user", "content": "Goal: craft oak planks from oak logs, please."}],
    [SYSTEM, {"role": "user", "content": "Inventory: [oak planks] (4)"}],
]
"""Three chat prompts sharing a system message (the backend tests' batch)."""


def logprob_gap(outs_a, outs_b) -> float:
    """The largest gap between the log-probs of two lists of completions, token by token (over
    the shorter reply where lengths differ)."""
    return max(
        abs(x - y)
        for a, b in zip(outs_a, outs_b, strict=True)
        for x, y in zip(a.logprobs, b.logprobs, strict=False)
    )


def teacher_forced_diff(policy, conversations, outs) -> float:
    """The largest gap between a completion's log-probs and those of a teacher-forced forward
    pass of ``policy.model`` over prompt + completion."""
    import torch

    worst = 0.0
    for conversation, out in zip(conversations, outs, strict=True):
        prompt = policy.prompt_ids(conversation)
        with torch.no_grad():
            logits = policy.model(torch.tensor([prompt + out.token_ids])).logits[0].float()
        start = len(prompt) - 1
        forced = torch.log_softmax(logits[start : start + len(out.token_ids)], -1)
        forced = forced.gather(1, torch.tensor(out.token_ids)[:, None])[:, 0]
        worst = max(worst, (forced - torch.tensor(out.logprobs)).abs().max().item())
    return worst
