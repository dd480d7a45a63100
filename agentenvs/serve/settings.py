"""The server's choices and defaults, apart from the web libraries: ``agentenvs serve --help``
shows them on an install without the ``serve`` extra."""

from __future__ import annotations

__all__ = ["APIS", "DEFAULT_IDLE_TIMEOUT", "DEFAULT_MAX_SESSIONS"]

APIS = ("agentgym", "openenv")
"""The client protocols a server speaks (``--api``)."""
DEFAULT_MAX_SESSIONS = 4096
"""Open sessions per worker; more get 429."""
DEFAULT_IDLE_TIMEOUT = 3600.0
"""Seconds without a request after which a session closes."""
