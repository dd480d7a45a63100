"""Canonical prompts and their prefix sidecars (Prefix-GRPO §3.2, appendix 6.2.0.3-6.2.0.4, 6.3).

The canonical prompt of a validated query is ``system + prefix history + cut-state observation``
(the teacher's messages up to and including the user message after the cut), ending at the
*replayed* observation: where the environment's text differs from the recorded one (a match on
fields, or after whitespace normalisation), the replayed text replaces the recorded one in that
last user message. It is rendered with the tokenizer's chat template with the generation prompt
(``<|im_start|>assistant\\n``), exactly as a rollout would start from it.

The sidecar is computed on those final tokens, never carried over from the trajectory:

* ``assistant_prefix_span`` ``{start, end}``: from the first assistant token of the prefix to one
  past the end-of-turn token of its last assistant turn (prompt-token coordinates, ``[b, e)``);
* ``prefix_mask``: length ``e - b``, 1 exactly on assistant tokens (content through
  ``<|im_end|>``), 0 on the user turns and chat headers inside the span;
* ``assistant_prefix_old_log_probs``: length ``e - b``, element ``j`` is the SFT model's
  ``log p(token[b + j] | token[< b + j])`` (dense over the span, mask 0 positions included);
* ``prefix_token_count`` = ``sum(prefix_mask)``.

A raw (no-prefix) query has an empty span at the end of the prompt and a count of 0, and so does
a query whose prompt holds no teacher turns (a template-style prompt, see :mod:`replay.query`;
``prompt_prefix_turns`` says how many teacher turns the prompt holds). Invariants
(:func:`sidecar_violations`) are checked on every row and violations are written into the row
(``sidecar_violations``) and counted, never silently dropped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentenvs.replay.tokens import RenderedChat, render_chat

__all__ = [
    "PrefixSidecar",
    "canonical_messages",
    "compute_sidecars",
    "prefix_sidecar",
    "sidecar_violations",
]


@dataclass(frozen=True)
class PrefixSidecar:
    """The prompt-space prefix annotations of one sample (field names as in the paper's code)."""

    start: int
    end: int
    mask: list[int]
    old_log_probs: list[float]
    token_count: int

    def to_row(self) -> dict[str, Any]:
        return {
            "assistant_prefix_span": {"start": self.start, "end": self.end},
            "prefix_mask": self.mask,
            "assistant_prefix_old_log_probs": self.old_log_probs,
            "prefix_token_count": self.token_count,
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> PrefixSidecar:
        span = row["assistant_prefix_span"]
        return cls(
            int(span["start"]),
            int(span["end"]),
            list(row["prefix_mask"]),
            list(row["assistant_prefix_old_log_probs"]),
            int(row["prefix_token_count"]),
        )


def canonical_messages(
    messages: Sequence[dict[str, str]],
    cut_observation: str,
    replayed_observation: str | None,
) -> tuple[list[dict[str, str]], bool]:
    """The prompt messages ending at the replayed cut observation; and whether text was replaced.

    ``messages`` ends with the recorded cut-state user message. If the replayed text differs and
    the recorded observation occurs in that message exactly once, it is replaced.
    """
    out = [dict(m) for m in messages]
    if not out or out[-1].get("role") != "user":
        raise ValueError("a query's prompt must end with the cut-state user message")
    if replayed_observation is None or replayed_observation == cut_observation:
        return out, False
    content = out[-1]["content"]
    if cut_observation and content.count(cut_observation) == 1:
        out[-1]["content"] = content.replace(cut_observation, replayed_observation)
        return out, True
    return out, False


def prefix_sidecar(rendered: RenderedChat, log_probs: Sequence[float]) -> PrefixSidecar:
    """The sidecar of a rendered canonical prompt, given the log-probs at its span positions."""
    if not rendered.spans:
        end = len(rendered.token_ids)
        return PrefixSidecar(end, end, [], [], 0)
    start, end = rendered.spans[0].start, rendered.spans[-1].end
    mask = [0] * (end - start)
    for span in rendered.spans:
        for u in range(span.start, span.end):
            mask[u - start] = 1
    return PrefixSidecar(start, end, mask, [float(x) for x in log_probs], sum(mask))


def sidecar_violations(
    sidecar: PrefixSidecar, prompt_length: int, prefix_turns: int, n_spans: int
) -> list[str]:
    """Every broken invariant of one sample's sidecar, in words (empty: all hold).

    ``prefix_turns``: the teacher assistant turns the prompt messages hold; ``n_spans``: the
    assistant spans found in its tokens. A row with ``prefix_turns > 0`` is a prefix row.
    """
    problems = []
    width = sidecar.end - sidecar.start
    if not 0 <= sidecar.start <= sidecar.end <= prompt_length:
        problems.append(
            f"span [{sidecar.start}, {sidecar.end}) is not inside the prompt "
            f"of {prompt_length} tokens"
        )
    if len(sidecar.mask) != width:
        problems.append(f"prefix_mask has {len(sidecar.mask)} entries, span width is {width}")
    if len(sidecar.old_log_probs) != width:
        problems.append(
            f"assistant_prefix_old_log_probs has {len(sidecar.old_log_probs)} entries, "
            f"span width is {width}"
        )
    if any(m not in (0, 1) for m in sidecar.mask):
        problems.append("prefix_mask has values other than 0 and 1")
    if sidecar.token_count != sum(sidecar.mask):
        problems.append(
            f"prefix_token_count {sidecar.token_count} != sum(prefix_mask) {sum(sidecar.mask)}"
        )
    if any(not math.isfinite(x) or x > 1e-6 for x in sidecar.old_log_probs):
        problems.append("an old log-prob is not finite or is positive")
    if n_spans != prefix_turns:
        problems.append(
            f"the canonical prompt has {n_spans} assistant turns, the query {prefix_turns}"
        )
    if prefix_turns > 0:
        if sidecar.token_count <= 0:
            problems.append("a prefix row has prefix_token_count 0")
        if sidecar.start < 1:
            problems.append("the span starts at token 0, which has no old log-prob")
        if sidecar.mask and (sidecar.mask[0] != 1 or sidecar.mask[-1] != 1):
            problems.append("the span does not start and end on assistant tokens")
    elif sidecar.token_count != 0 or width != 0:
        problems.append("a raw (no-prefix) row has a non-empty prefix span")
    return problems


def compute_sidecars(
    rows: Sequence[dict[str, Any]], tokenizer: Any, scorer: Any
) -> list[dict[str, Any]]:
    """Sample rows (``replay.sample`` without the schema tag) for validated query rows.

    Each row needs ``messages``, ``cut_observation``, ``replayed_observation`` and
    ``prefix_turns`` (a ``replay.validated`` row has them). One batched forward pass for all. A
    row whose canonical prompt cannot be built (a prompt that does not end with the cut-state
    user message, a chat template that cannot be followed) is returned with an empty sidecar
    and the reason in ``sidecar_violations``.
    """
    built: list[tuple[list[dict[str, str]], bool, RenderedChat] | str] = []
    for row in rows:
        try:
            messages, replaced = canonical_messages(
                row["messages"], row["cut_observation"], row.get("replayed_observation")
            )
            built.append(
                (messages, replaced, render_chat(tokenizer, messages, add_generation_prompt=True))
            )
        except ValueError as exc:  # ChatTemplateError is one
            built.append(f"cannot build the canonical prompt: {exc}")
    good = [b for b in built if not isinstance(b, str)]
    spans = [list(range(r.spans[0].start, r.spans[-1].end)) if r.spans else [] for *_, r in good]
    stats = iter(scorer.score([r.token_ids for *_, r in good], spans))
    samples = []
    for row, item in zip(rows, built, strict=True):
        sample = {k: v for k, v in row.items() if k not in _REPLACED_KEYS}
        if isinstance(item, str):
            sample.update(
                prompt_messages=row.get("messages"),
                observation_replaced=False,
                prompt_prefix_turns=0,
                prompt_token_ids=[],
                prompt_length=0,
                **PrefixSidecar(0, 0, [], [], 0).to_row(),
                sidecar_violations=[item],
            )
            samples.append(sample)
            continue
        messages, replaced, rendered = item
        sidecar = prefix_sidecar(rendered, next(stats).logprob.tolist())
        in_prompt = sum(1 for m in messages if m.get("role") == "assistant")
        sample.update(
            prompt_messages=messages,
            observation_replaced=replaced,
            prompt_prefix_turns=in_prompt,
            prompt_token_ids=rendered.token_ids,
            prompt_length=len(rendered.token_ids),
            **sidecar.to_row(),
            sidecar_violations=sidecar_violations(
                sidecar, len(rendered.token_ids), in_prompt, len(rendered.spans)
            ),
        )
        samples.append(sample)
    return samples


# keys of a validated row that the sample row supersedes
_REPLACED_KEYS = frozenset({"schema", "schema_version", "messages"})
