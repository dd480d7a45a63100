"""``agentenvs play``: plain-text help, and one expert hint per turn under ``--hint``/``:auto``."""

from __future__ import annotations

import io

from agentenvs.agents.play import HELP, PlaySession
from agentenvs.expert import make_expert
from agentenvs.registration import make


def _session(show_hint: bool) -> tuple[PlaySession, io.StringIO]:
    out = io.StringIO()
    session = PlaySession(make("TextCraft-v0"), make_expert("TextCraft-v0"), out, show_hint)
    session.start("adapt/0", None)
    return session, out


def test_help_is_plain_text() -> None:
    session, out = _session(show_hint=False)
    session.run(io.StringIO(":help\n:quit\n"))
    text = out.getvalue()
    assert HELP in text
    assert "``" not in text and ":auto [n]" in text


def test_auto_prints_one_hint_per_turn_with_and_without_hint_flag() -> None:
    for show_hint in (True, False):
        session, out = _session(show_hint)
        session.run(io.StringIO(":auto 3\n:quit\n"))
        lines = out.getvalue().splitlines()
        turns = [i for i, line in enumerate(lines) if "-- turn " in line]
        assert len(turns) == 3
        # between two consecutive turn lines there is exactly one expert line
        bounds = [0, *turns, len(lines)]
        hints = [
            sum(line.startswith("[expert: ") for line in lines[a:b])
            for a, b in zip(bounds, bounds[1:], strict=False)
        ]
        # under --hint the hint of the state after the 3rd turn is shown too
        assert hints == ([1, 1, 1, 1] if show_hint else [0, 1, 1, 0]), (show_hint, hints)
