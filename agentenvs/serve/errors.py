"""The errors a server answers with: each a 4xx status, a short type and a message with its fix.

Every route raises :class:`ServeError` (or lets one of the environment's typed errors through,
which :func:`error_for` maps), and the app turns it into
``{"error": {"type": ..., "message": ...}}`` with its status. Nothing a client sends reaches the
client as a 500.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentenvs.core import (
    EpisodeOverError,
    ResetNeededError,
    SnapshotError,
    UnknownSplitError,
    UnknownTaskError,
)

__all__ = ["ServeError", "error_for", "malformed", "internal_error"]


class ServeError(Exception):
    """A client error: ``status`` (4xx), ``type`` (a stable short name) and a message."""

    def __init__(self, status: int, type_: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.message = message

    def to_json(self) -> dict[str, dict[str, str]]:
        return {"error": {"type": self.type, "message": self.message}}


def unknown_session(session: object) -> ServeError:
    return ServeError(
        404,
        "unknown_session",
        f"no session {session!r} on this server (never created, closed, or created on another "
        "server or worker); create one with POST /agentenvs/v1/sessions",
    )


def expired_session(session: object, idle_timeout: float | None) -> ServeError:
    return ServeError(
        410,
        "session_expired",
        f"session {session!r} was closed after {idle_timeout:g} s without a request "
        "(--idle-timeout); create a new one, or restore its last snapshot",
    )


def session_limit(max_sessions: int) -> ServeError:
    return ServeError(
        429,
        "session_limit",
        f"this server holds its maximum of {max_sessions} sessions (--max-sessions "
        f"{max_sessions}); close finished sessions, wait for idle ones to expire "
        "(--idle-timeout), or serve with more --workers or --max-sessions",
    )


def action_too_long(length: int, limit: int) -> ServeError:
    return ServeError(
        413,
        "action_too_long",
        f"the action has {length} characters; this environment accepts at most {limit}",
    )


def malformed(problems: Sequence[Mapping[str, Any]], where: Sequence[object] = ()) -> ServeError:
    """A 422 ``bad_request`` listing pydantic's ``problems`` (``loc: msg``), each location
    prefixed with ``where`` (a batch item's position, e.g. ``("steps", 3)``)."""
    text = "; ".join(
        f"{'.'.join(str(p) for p in (*where, *e.get('loc', ())))}: {e.get('msg', '')}"
        for e in problems
    )
    return ServeError(422, "bad_request", f"malformed request: {text}")


def internal_error(exc: BaseException) -> ServeError:
    """The 500 of an environment exception that is no client error (a bug or a crash)."""
    return ServeError(500, "internal_error", f"{type(exc).__name__}: {exc}")


def error_for(exc: Exception) -> ServeError | None:
    """The client error an environment exception stands for, or None for a server fault."""
    if isinstance(exc, ServeError):
        return exc
    if isinstance(exc, (UnknownTaskError, UnknownSplitError)):
        return ServeError(
            400, "unknown_task" if isinstance(exc, UnknownTaskError) else "unknown_split", str(exc)
        )
    if isinstance(exc, EpisodeOverError):
        return ServeError(409, "episode_over", str(exc))
    if isinstance(exc, ResetNeededError):
        return ServeError(409, "reset_needed", f"{exc} (POST /agentenvs/v1/reset first)")
    if isinstance(exc, SnapshotError):
        return ServeError(409, "snapshot_mismatch", str(exc))
    return None
