"""Rendering a conversation with the tokenizer's chat template and locating its assistant tokens.

Both the cut scorer (entropy over a whole teacher trajectory) and the sidecar (prefix span and
mask over a canonical prompt) need the same thing: the token ids of a rendered conversation and,
for every assistant message, the token span from the first token of its content through its
end-of-turn token (``<|im_end|>`` in ChatML) — the "assistant tokens" of Prefix-GRPO
(docs/architecture.md, "Prefix-GRPO settings": the span after ``<|im_start|>assistant`` through
``<|im_end|>``).

The spans come from character offsets, not from re-tokenising pieces: the whole text is tokenised
once (so token boundaries are exactly those a trainer sees), and each assistant turn starts where
the rendering of the messages before it plus the generation prompt (the assistant header) ends.
This works for any chat template that renders earlier messages the same way whatever follows
(ChatML, Qwen2.5, Qwen3, Llama 3); a template that does not is a :class:`ChatTemplateError`.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AssistantSpan",
    "ChatTemplateError",
    "RenderedChat",
    "end_of_turn_id",
    "render_chat",
]

# Tried in order for the end-of-turn token; the tokenizer's eos token is the fallback.
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>")


class ChatTemplateError(ValueError):
    """The chat template renders a conversation in a way the span finder cannot follow."""


@dataclass(frozen=True)
class AssistantSpan:
    """Token span ``[start, end)`` of one assistant message: its content and end-of-turn token.

    ``turn`` is the message's index among the assistant messages, ``message_index`` its index
    in the message list.
    """

    turn: int
    message_index: int
    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class RenderedChat:
    """A conversation rendered and tokenised, with its assistant spans in order."""

    text: str
    token_ids: list[int]
    spans: tuple[AssistantSpan, ...]

    def assistant_positions(self) -> list[int]:
        """Every assistant token position, in order."""
        return [u for span in self.spans for u in range(span.start, span.end)]

    def assistant_turns(self) -> list[int]:
        """The assistant turn of each position of :meth:`assistant_positions`."""
        return [span.turn for span in self.spans for _ in range(span.start, span.end)]


def end_of_turn_id(tokenizer: Any) -> int:
    """The id of the token that closes a chat turn (``<|im_end|>`` for ChatML)."""
    vocab = tokenizer.get_vocab()
    for token in END_OF_TURN_TOKENS:
        if token in vocab:
            return int(vocab[token])
    if tokenizer.eos_token_id is None:
        raise ChatTemplateError(
            "the tokenizer has no end-of-turn token: none of "
            f"{list(END_OF_TURN_TOKENS)} and no eos token"
        )
    return int(tokenizer.eos_token_id)


def _template(tokenizer: Any, messages: Sequence[dict[str, str]], generation: bool) -> str:
    if not messages:
        return ""
    text = tokenizer.apply_chat_template(
        list(messages), tokenize=False, add_generation_prompt=generation
    )
    if not isinstance(text, str):
        raise ChatTemplateError("apply_chat_template(tokenize=False) did not return a string")
    return text


def render_chat(
    tokenizer: Any,
    messages: Sequence[dict[str, str]],
    *,
    add_generation_prompt: bool = False,
) -> RenderedChat:
    """Render ``messages`` with the tokenizer's chat template and find every assistant span.

    A span starts right after the assistant header (the text the template adds for a generation
    prompt) and ends with the first end-of-turn token after it, so it covers what the template
    renders for that turn even where the template rewrites the content (Qwen3 drops the
    ``<think>`` part of earlier turns). Raises :class:`ChatTemplateError` if the template renders
    earlier messages differently depending on what follows, or no end-of-turn token closes a turn.
    """
    text = _template(tokenizer, messages, add_generation_prompt)
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    token_ids = list(encoding["input_ids"])
    ends = [end for _, end in encoding["offset_mapping"]]
    eot = end_of_turn_id(tokenizer)
    spans = []
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        char_start = _turn_start(tokenizer, messages, index, text)
        # the first token that ends after the header (one straddling it belongs to the span)
        start = bisect.bisect_right(ends, char_start)
        eot_at = next((u for u in range(start, len(token_ids)) if token_ids[u] == eot), None)
        if eot_at is None:
            raise ChatTemplateError(
                f"no end-of-turn token (id {eot}) closes assistant message {index}"
            )
        spans.append(AssistantSpan(len(spans), index, start, eot_at + 1))
    return RenderedChat(text, token_ids, tuple(spans))


def _turn_start(tokenizer: Any, messages: Sequence[dict[str, str]], index: int, text: str) -> int:
    """Character offset in ``text`` where assistant message ``index``'s content starts."""
    before = _template(tokenizer, messages[:index], False)
    if not text.startswith(before):
        raise ChatTemplateError(
            "the chat template renders earlier messages differently depending on what follows "
            f"(message {index}); spans cannot be located in this template"
        )
    if index > 0:
        header = _template(tokenizer, messages[:index], True)
        if text.startswith(header) and len(header) > len(before):
            return len(header)
    # no usable generation prompt: the content itself, copied verbatim after the earlier messages
    at = text.find(_content(messages[index]), len(before))
    if at < 0:
        raise ChatTemplateError(
            f"cannot find where assistant message {index} starts: the template has no "
            "generation prompt and does not copy the content verbatim"
        )
    return at


def _content(message: dict[str, str]) -> str:
    return str(message.get("content", ""))
