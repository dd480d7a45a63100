"""The server's choices and defaults, apart from the web libraries: ``agentenvs serve --help``
shows them on an install without the ``serve`` extra."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "APIS",
    "AUTH_TOKEN_ENV",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_SESSIONS",
    "MAX_BODY_BYTES",
    "ServeSettings",
]

APIS = ("agentgym", "openenv")
"""The client protocols a server speaks (``--api``)."""
DEFAULT_MAX_SESSIONS = 4096
"""Open sessions per worker; more get 429."""
DEFAULT_IDLE_TIMEOUT = 3600.0
"""Seconds without a request after which a session closes."""
MAX_BODY_BYTES = 64 * 1024 * 1024
"""The largest request body a server reads; a larger one gets 413."""
AUTH_TOKEN_ENV = "AGENTENVS_AUTH_TOKEN"
"""The environment variable ``agentenvs serve`` reads the access token from (``--auth-token``)."""


@dataclass(frozen=True)
class ServeSettings:
    """What one server process was started with (``app.state.settings``)."""

    env_id: str
    api: str
    max_sessions: int = DEFAULT_MAX_SESSIONS
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT
    max_body_bytes: int = MAX_BODY_BYTES
    auth_token: str | None = None
    """When set, every route of every API requires ``Authorization: Bearer <auth_token>``."""
    worker: int = 0
    workers: int = 1
