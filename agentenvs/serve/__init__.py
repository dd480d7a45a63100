"""``agentenvs serve``: our environments as HTTP services.

``build_app(env_id, api)`` returns the ASGI app (FastAPI) that serves one environment id through
AgentGym's routes (``api="agentgym"``, a drop-in for AgentGym's servers) or OpenEnv's
(``api="openenv"``, OpenEnv's server types), both with the native routes
``/agentenvs/v1/...`` (sessions, snapshot/restore, replay, task listing, health). See
docs/serving.md.

The web libraries are an extra: ``pip install 'agentenvs[serve]'``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["build_app", "require_serve_deps"]

_DEPS = ("fastapi", "uvicorn", "orjson")


def require_serve_deps(*extra: str) -> None:
    """Raise :class:`~agentenvs.cli_errors.MissingExtraError` (an ImportError naming the
    ``serve`` extra) when a serving dependency is missing."""
    from agentenvs.cli_errors import require_extra

    require_extra("serve", *_DEPS, *extra)


def build_app(env_id: str, api: str = "agentgym", **kwargs: Any) -> Any:
    """The ASGI app serving ``env_id`` through ``api`` (:func:`agentenvs.serve.app.build_app`)."""
    require_serve_deps(*(("openenv",) if api == "openenv" else ()))
    from agentenvs.serve.app import build_app as _build

    return _build(env_id, api, **kwargs)
