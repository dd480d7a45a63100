"""Canonical prompts and sidecars: alignment with the tokens, old log-probs, invariants."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agentenvs.replay.query import DroppedCut, build_query, raw_query
from agentenvs.replay.sidecar import (
    PrefixSidecar,
    canonical_messages,
    compute_sidecars,
    sidecar_violations,
)
from agentenvs.replay.tokens import ChatTemplateError, render_chat
from agentenvs.replay.validate import validate_queries


@pytest.fixture(scope="module")
def validated_rows(expert_trajectory, with_unparsed_turn) -> list[dict]:
    trajs = [
        expert_trajectory("TextCraft-v0", "agentgym/421"),
        with_unparsed_turn(expert_trajectory("TextCraft-v0", "agentgym/140"), 1),
    ]
    queries = []
    for i, traj in enumerate(trajs):
        queries.append(raw_query(traj, i))
        made = [build_query(traj, i, t, "all") for t in range(len(traj.steps))]
        queries += [q for q in made if not isinstance(q, DroppedCut)]
    return [{**q.to_row(), **r.to_row()} for q, r in validate_queries(queries)]


@pytest.fixture(scope="module")
def samples(validated_rows, tiny_lm, scorer) -> list[dict]:
    return compute_sidecars(validated_rows, tiny_lm[1], scorer)


def test_every_invariant_holds(samples) -> None:
    assert len(samples) > 10
    for s in samples:
        span = s["assistant_prefix_span"]
        b, e = span["start"], span["end"]
        assert s["sidecar_violations"] == []
        assert len(s["prefix_mask"]) == len(s["assistant_prefix_old_log_probs"]) == e - b
        assert s["prefix_token_count"] == sum(s["prefix_mask"])
        assert 0 < b <= e <= s["prompt_length"] == len(s["prompt_token_ids"])
        if s["prefix_turns"] > 0:
            assert s["prefix_token_count"] > 0
        else:
            assert b == e == s["prompt_length"] and s["prefix_token_count"] == 0


def test_prompt_is_the_chat_template_of_the_canonical_messages(samples, tiny_lm) -> None:
    tokenizer = tiny_lm[1]
    for s in samples:
        text = tokenizer.apply_chat_template(
            s["prompt_messages"], tokenize=False, add_generation_prompt=True
        )
        assert tokenizer(text, add_special_tokens=False)["input_ids"] == s["prompt_token_ids"]
        assert text.endswith("<|im_start|>assistant\n")
        assert s["prompt_messages"][-1]["role"] == "user"
        assert s["prompt_messages"][-1]["content"] == s["replayed_observation"]


def test_mask_covers_exactly_the_assistant_tokens_of_the_prefix(samples, tiny_lm) -> None:
    tokenizer = tiny_lm[1]
    for s in samples:
        b = s["assistant_prefix_span"]["start"]
        ids, mask = s["prompt_token_ids"], s["prefix_mask"]
        runs, current = [], []
        for j, m in enumerate(mask):
            if m:
                current.append(ids[b + j])
            elif current:
                runs.append(current)
                current = []
        if current:
            runs.append(current)
        assistant = [m["content"] for m in s["prompt_messages"] if m["role"] == "assistant"]
        assert [tokenizer.decode(r) for r in runs] == [a + "<|im_end|>" for a in assistant]
        # outside the mask, inside the span: only the user turns and chat headers
        outside = tokenizer.decode([ids[b + j] for j, m in enumerate(mask) if not m])
        assert "Think:" not in outside


def test_old_log_probs_equal_a_recomputation_on_the_canonical_prompt(samples, tiny_lm) -> None:
    model = tiny_lm[0]
    for s in samples[:6] + samples[-4:]:
        b, e = s["assistant_prefix_span"]["start"], s["assistant_prefix_span"]["end"]
        ids = torch.tensor([s["prompt_token_ids"]])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[0].double(), dim=-1)
        expected = [logp[u - 1, ids[0, u]].item() for u in range(b, e)]
        np.testing.assert_allclose(s["assistant_prefix_old_log_probs"], expected, atol=1e-4)


def test_sidecars_do_not_depend_on_batching(validated_rows, samples, tiny_lm, scorer) -> None:
    for row, together in list(zip(validated_rows, samples, strict=True))[::5]:
        alone = compute_sidecars([row], tiny_lm[1], scorer)[0]
        assert alone["prompt_token_ids"] == together["prompt_token_ids"]
        np.testing.assert_allclose(
            alone["assistant_prefix_old_log_probs"],
            together["assistant_prefix_old_log_probs"],
            atol=1e-5,
        )


def test_the_prompt_ends_at_the_replayed_observation() -> None:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "Obs: Total:  5"}]
    out, replaced = canonical_messages(messages, "Total:  5", "Total: 5")
    assert (
        replaced
        and out[-1]["content"] == "Obs: Total: 5"
        and messages[-1]["content"] != out[-1]["content"]
    )
    assert canonical_messages(messages, "absent", "Total: 5") == (messages, False)
    assert canonical_messages(messages, "Total:  5", None) == (messages, False)
    with pytest.raises(ValueError, match="end with the cut-state user message"):
        canonical_messages(messages[:1], "x", "y")


def test_violations_are_reported() -> None:
    good = PrefixSidecar(3, 7, [1, 1, 0, 1], [-0.5, -1.0, -2.0, -0.1], 3)
    assert sidecar_violations(good, 10, 2, 2) == []
    cases = {
        "not inside the prompt": (PrefixSidecar(3, 12, [1] * 9, [-1.0] * 9, 9), 2),
        "prefix_mask has": (PrefixSidecar(3, 7, [1, 1, 1], [-1.0] * 4, 3), 2),
        "old_log_probs has": (PrefixSidecar(3, 7, [1, 0, 0, 1], [-1.0] * 3, 2), 2),
        "!= sum(prefix_mask)": (PrefixSidecar(3, 7, [1, 0, 0, 1], [-1.0] * 4, 3), 2),
        "not finite": (PrefixSidecar(3, 7, [1, 0, 0, 1], [-1.0, float("nan"), -1.0, 0.5], 2), 2),
        "values other than 0 and 1": (PrefixSidecar(3, 7, [1, 2, 0, 1], [-1.0] * 4, 4), 2),
        "assistant turns, the query": (good, 3),
        "prefix_token_count 0": (PrefixSidecar(3, 3, [], [], 0), 2),
        "raw (no-prefix) row": (good, 0),
        "start and end on assistant": (PrefixSidecar(3, 7, [0, 1, 1, 1], [-1.0] * 4, 3), 2),
    }
    for words, (sidecar, turns) in cases.items():
        spans = turns if words != "assistant turns, the query" else 2
        problems = sidecar_violations(sidecar, 10, turns, spans)
        assert any(words in p for p in problems), (words, problems)


def test_round_trip_and_raw_sidecar() -> None:
    s = PrefixSidecar(3, 5, [1, 1], [-0.1, -0.2], 2)
    assert PrefixSidecar.from_row(s.to_row()) == s
    assert set(s.to_row()) == {
        "assistant_prefix_span",
        "prefix_mask",
        "assistant_prefix_old_log_probs",
        "prefix_token_count",
    }


def test_spans_of_a_rendered_trajectory(tiny_lm, expert_trajectory) -> None:
    tokenizer = tiny_lm[1]
    traj = expert_trajectory("TextCraft-v0", "agentgym/140")
    rendered = render_chat(tokenizer, traj.messages)
    assert len(rendered.spans) == len(traj.steps)
    for span, message in zip(
        rendered.spans, [m for m in traj.messages if m["role"] == "assistant"], strict=True
    ):
        assert tokenizer.decode(rendered.token_ids[span.start : span.end]) == (
            message["content"] + "<|im_end|>"
        )
        before = tokenizer.decode(rendered.token_ids[: span.start])
        assert before.endswith("<|im_start|>assistant\n")
    assert len(rendered.assistant_positions()) == len(rendered.assistant_turns())


def test_a_template_that_rewrites_earlier_turns_spans_what_it_renders(tiny_lm) -> None:
    """Like Qwen3's template, which drops the <think> part of earlier assistant turns."""
    tokenizer = tiny_lm[1]
    original = tokenizer.chat_template
    strip = "message['content'].split('</think>')[-1].lstrip('\\n')"
    try:
        tokenizer.chat_template = original.replace("message['content']", strip)
        messages = [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "<think>plan</think>\n<action>up</action>"},
            {"role": "user", "content": "ok"},
        ]
        rendered = render_chat(tokenizer, messages, add_generation_prompt=True)
        (span,) = rendered.spans
        ids = rendered.token_ids[span.start : span.end]
        assert tokenizer.decode(ids) == "<action>up</action><|im_end|>"
    finally:
        tokenizer.chat_template = original


def test_a_template_that_is_not_prefix_consistent_is_an_error(tiny_lm) -> None:
    tokenizer = tiny_lm[1]
    original = tokenizer.chat_template
    try:
        tokenizer.chat_template = "{{ messages | length }}" + original
        with pytest.raises(ChatTemplateError, match="differently depending on what follows"):
            render_chat(
                tokenizer,
                [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "think"}],
            )
    finally:
        tokenizer.chat_template = original
