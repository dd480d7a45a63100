"""Fixtures of the integration tests: a tiny tool-calling model (no hub).

:func:`tool_model` builds the tiny Qwen3-architecture model of :mod:`agentenvs.agents.tiny_model`
with TRL's own Qwen2.5 chat template (tool calls as ``<tool_call>{json}</tool_call>``, which TRL
knows how to parse) and teaches it, in a few dozen SFT steps on one Sokoban task's prompt, to answer
with one ``act`` tool call carrying one of the four moves (about evenly). On that task one move
solves the puzzle, so sampled episodes earn different rewards and GRPO has a signal in two steps.
The model and the engine tests that use it play without a benchmark protocol (``protocol=None``:
Sokoban's own prompt and ``<action>`` reply format, the setup these tests were written for);
``test_protocol_episode.py`` checks the protocols.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

MOVES = ("up", "down", "left", "right")
TASK = "seed/15"  # "right" solves it at once (reward 10.9), the other moves earn -0.1


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tool_call_message(action: str) -> dict:
    call = {"type": "function", "function": {"name": "act", "arguments": {"action": action}}}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


def sokoban_prompt() -> list[dict]:
    from agentenvs.integrations.trl import environment_factory, train_dataset

    row = train_dataset("Sokoban-v0", limit=1, protocol=None)[0]  # no system turn
    env = environment_factory("Sokoban-v0", protocol=None)()
    first = env.reset(task_id=TASK)
    return [*row["prompt"][:-1], {"role": "user", "content": first}]


@pytest.fixture(scope="session")
def tool_model(tmp_path_factory) -> Path:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    path = build_tool_model(tmp_path_factory.mktemp("tool_model"))
    torch.set_num_threads(threads)
    return path


@pytest.fixture(scope="session")
def reply_model(tmp_path_factory) -> Path:
    """The same tiny model taught to reply ``<action>MOVE</action>`` (Sokoban's reply format)
    to the task's first prompt, for agent loops that parse text replies."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    from agentenvs.agents.episode import TextEpisode

    replies = [{"role": "assistant", "content": f"<action>{m}</action>"} for m in MOVES]
    prompt = TextEpisode("Sokoban-v0", protocol=None).start(TASK)
    path = build_tool_model(tmp_path_factory.mktemp("reply_model"), replies, prompt)
    torch.set_num_threads(threads)
    return path


def build_tool_model(
    out: Path, replies: list[dict] | None = None, prompt: list[dict] | None = None
) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import qwen2_5_chat_template

    from agentenvs.agents.tiny_model import TinyModelSpec, build_tiny_model

    prompt = prompt or sokoban_prompt()
    tok = AutoTokenizer.from_pretrained(
        build_tiny_model(out / "base", TinyModelSpec(vocab_size=300))
    )
    tok.chat_template = qwen2_5_chat_template
    replies = replies or [tool_call_message(m) for m in MOVES]
    examples = [[*prompt, reply] for reply in replies]
    corpus = [tok.apply_chat_template(e, tokenize=False) for e in examples] * 4
    # the fixed parts of the tool call are one token each, so the model learns them at once
    pieces = ['<tool_call>\n{"name": "act", "arguments": {"action": "', '"}}\n</tool_call>']
    spec = TinyModelSpec(vocab_size=400)
    path = build_tiny_model(out / "model", spec, corpus=corpus, added_tokens=pieces)
    tok = AutoTokenizer.from_pretrained(path)
    tok.chat_template = qwen2_5_chat_template
    model = AutoModelForCausalLM.from_pretrained(path)
    _memorise(model, tok, prompt, examples)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _memorise(model, tok, prompt, examples, steps: int = 60) -> None:
    """Cross-entropy on the assistant tool call (and its end token) of each example."""

    def ids_of(messages, **kw):
        return list(
            tok.apply_chat_template(messages, tokenize=True, return_dict=True, **kw)["input_ids"]
        )

    start = len(ids_of(prompt, add_generation_prompt=True))
    rows = [ids_of(e) for e in examples]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tok.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        labels[i, start : len(r)] = torch.tensor(r[start:])
    attention = (labels != -100) | (torch.arange(width) < start)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
    torch.manual_seed(0)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=ids, attention_mask=attention.long(), labels=labels).loss
        optim.zero_grad()
        loss.backward()
        optim.step()
    model.eval()
