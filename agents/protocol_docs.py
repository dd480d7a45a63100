"""The Markdown table of the benchmark protocols (``docs/protocols.md``): every setting of every
protocol and environment with where it was read (:mod:`agentenvs.agents.protocols`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentenvs.agents.protocols import PROTOCOLS, EnvProtocol, Sampling

__all__ = ["protocols_markdown"]


def _kw(kwargs: Mapping[str, Any]) -> str:
    return ", ".join(f"`{k}={v!r}`" for k, v in kwargs.items()) or "none"


def _samp(s: Sampling) -> str:
    return f"T={s.temperature:g}, top_p={s.top_p:g}, {s.max_new_tokens} tokens"


# (source key, row label, the value as shown) in the table's order
_ROWS: tuple[tuple[str, str, Any], ...] = (
    ("env_kwargs", "env keywords", lambda s: _kw(s.env_kwargs)),
    ("prompt", "prompt", lambda s: f"`{s.prompt}`"),
    ("admissible", "admissible actions", lambda s: s.admissible),
    ("parser", "parser", lambda s: f"`{s.parser}`"),
    ("unparseable", "unparseable reply", lambda s: s.unparseable),
    ("max_turns.eval", "turns (eval)", lambda s: str(s.turns("eval"))),
    ("max_turns.train", "turns (train)", lambda s: str(s.turns("train"))),
    ("history", "history", lambda s: "all" if s.history is None else str(s.history)),
    ("sampling.eval", "sampling (eval)", lambda s: _samp(s.sampling_for("eval"))),
    ("sampling.train", "sampling (train)", lambda s: _samp(s.sampling_for("train"))),
    ("invalid_penalty", "invalid penalty", lambda s: f"{s.invalid_penalty:g}"),
)


def _setup_table(env_id: str, setup: EnvProtocol) -> list[str]:
    lines = [f"#### {env_id}", "", "| setting | value | source |", "|---|---|---|"]
    for key, label, value in _ROWS:
        source = setup.sources.get(key, "").replace("|", "\\|")
        lines.append(f"| {label} | {value(setup)} | {source} |")
    return lines


def protocols_markdown() -> str:
    """The settings table of every protocol and environment, each setting with its source
    (the table ``docs/protocols.md`` shows; a test keeps the two equal)."""
    lines = []
    for protocol in PROTOCOLS.values():
        lines += [f"### `{protocol.name}`: {protocol.title}", ""]
        for env_id, setup in protocol.envs.items():
            lines += [*_setup_table(env_id, setup), ""]
    return "\n".join(lines).rstrip() + "\n"
