"""Closest-name hints for unknown-name errors (Gymnasium's "Did you mean" habit)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["did_you_mean"]


def did_you_mean(name: str, choices: Iterable[str], prefix: str = "") -> str:
    """The hint an unknown-name error ends with: ``" Did you mean 'x'?"`` for the closest of
    ``choices`` (shown after ``prefix``, e.g. a setting's section), or ``""`` when none is close."""
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" Did you mean {prefix}{close[0]!r}?" if close else ""
