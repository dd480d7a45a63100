"""The ASGI app of ``agentenvs serve``: one environment id, one API, one session store.

:func:`build_app` assembles the routes of the chosen API (AgentGym's or OpenEnv's) and the native
routes over one :class:`~agentenvs.serve.service.EnvService`, and installs the error handling that
turns every client mistake into a JSON 4xx (never a 500): unknown routes and methods, malformed
JSON, fields of the wrong type, and the environment's own typed errors. Ahead of every route,
:class:`~agentenvs.serve.guard.Guard` refuses requests without the access token and oversized
bodies.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentenvs import __version__
from agentenvs.registration import ENVIRONMENTS
from agentenvs.serve.errors import ServeError, error_for, internal_error, malformed
from agentenvs.serve.guard import Guard
from agentenvs.serve.native import PREFIX as NATIVE_PREFIX
from agentenvs.serve.native import BatchFastPath, add_native_routes
from agentenvs.serve.service import EnvService, dumps
from agentenvs.serve.sessions import SessionStore
from agentenvs.serve.settings import (
    APIS,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_SESSIONS,
    MAX_BODY_BYTES,
    ServeSettings,
)
from agentenvs.serve.tokens import server_key

__all__ = [
    "APIS",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_SESSIONS",
    "MAX_BODY_BYTES",
    "build_app",
    "default_kwargs",
]

log = logging.getLogger("agentenvs.serve")

# The environment keywords each API serves by default. AgentGym's servers play AgentGym's variant
# of each game (BabyAI's rules="agentgym" and TextCraft's agentgym/<idx> tasks are already the
# environments' defaults); OpenEnv clients get the environments' own defaults.
# AgentGym's servers set no turn budget (the client's max_rounds does), so AgentGym's API plays
# with a budget no client reaches.
AGENTGYM_MAX_TURNS = 1000
_AGENTGYM_DEFAULTS: dict[str, dict[str, Any]] = {
    "TextCraft-v0": {"max_turns": AGENTGYM_MAX_TURNS},
    "ALFWorld-v0": {"game_version": "agentgym", "max_turns": AGENTGYM_MAX_TURNS},
    "BabyAI-Text-v0": {"rules": "agentgym", "max_turns": AGENTGYM_MAX_TURNS},
    "WebShop-v0": {"max_turns": AGENTGYM_MAX_TURNS},
}


def default_kwargs(env_id: str, api: str) -> dict[str, Any]:
    """The environment keywords ``api`` serves ``env_id`` with when the client names none."""
    return dict(_AGENTGYM_DEFAULTS.get(env_id, {})) if api == "agentgym" else {}


def _error_response(
    status: int, type_: str, message: str, service: EnvService, path: str = NATIVE_PREFIX
) -> Response:
    """A native route's error ``{"error": {"type", "message"}, env_id, version, variant}``;
    elsewhere (AgentGym's routes) AgentGym's ``{"error": "<message>"}`` plus ``error_type``."""
    if path.startswith(NATIVE_PREFIX):
        payload: dict[str, Any] = {"error": {"type": type_, "message": message}}
        payload.update(service.envelope())
    else:
        payload = {"error": message, "error_type": type_}
    return Response(dumps(payload), status_code=status, media_type="application/json")


def build_app(
    env_id: str,
    api: str = "agentgym",
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
    snapshot_key: str | bytes | None = None,
    worker: int = 0,
    workers: int = 1,
    max_body_bytes: int = MAX_BODY_BYTES,
    auth_token: str | None = None,
) -> Any:
    """The ASGI app serving ``env_id`` through ``api`` (``"agentgym"`` or ``"openenv"``) plus the
    native routes. ``env_kwargs`` override the API's default environment keywords; ``worker`` of
    ``workers`` (``agentenvs serve --workers``) tags the session ids this process hands out;
    ``auth_token`` (when set) is the bearer token every request must carry. The app's
    ``state.settings`` is the :class:`~agentenvs.serve.settings.ServeSettings` of these."""
    if env_id not in ENVIRONMENTS:
        raise ValueError(f"unknown environment id {env_id!r}; choose from {sorted(ENVIRONMENTS)}")
    if api not in APIS:
        raise ValueError(f"unknown api {api!r}; choose from {list(APIS)}")
    store = SessionStore(
        env_id,
        default_kwargs={**default_kwargs(env_id, api), **dict(env_kwargs or {})},
        max_sessions=max_sessions,
        idle_timeout=idle_timeout,
        id_prefix=f"w{worker}-" if workers > 1 else "",
    )
    service = EnvService(store, version=__version__, key=server_key(snapshot_key), api=api)

    if api == "openenv":
        from agentenvs.serve.openenv import openenv_app

        app = openenv_app(service)
        add_native_routes(app, service)
    else:
        from agentenvs.serve.agentgym import add_agentgym_routes

        app = FastAPI(title=f"agentenvs serve {env_id} (AgentGym API)", version=__version__)
        add_native_routes(app, service)
        add_agentgym_routes(app, service, worker, workers)
    app.state.service = service
    app.state.settings = ServeSettings(
        env_id=env_id,
        api=api,
        max_sessions=max_sessions,
        idle_timeout=idle_timeout,
        max_body_bytes=max_body_bytes,
        auth_token=auth_token or None,
        worker=worker,
        workers=workers,
    )
    # startup/shutdown hooks, not a lifespan: openenv's server registers its own hooks this way
    sweeper: list[asyncio.Task[None]] = []

    async def start_sweeper() -> None:
        if idle_timeout:
            sweeper.append(asyncio.create_task(_sweep_forever(store)))

    async def stop_sweeper() -> None:
        for task in sweeper:
            task.cancel()
        store.close_all()

    app.router.on_startup.append(start_sweeper)
    app.router.on_shutdown.append(stop_sweeper)
    _install_error_handlers(app, service)
    app.add_middleware(BatchFastPath, service=service)
    app.add_middleware(  # the outermost: before any route and before the body is read
        Guard,
        max_body_bytes=max_body_bytes,
        auth_token=auth_token or None,
        native_prefix=NATIVE_PREFIX,
        envelope=service.envelope,
    )
    return app


def _install_error_handlers(app: Any, service: EnvService) -> None:
    @app.exception_handler(ServeError)
    async def serve_error(request: Request, exc: ServeError) -> Response:
        return _error_response(exc.status, exc.type, exc.message, service, request.url.path)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> Response:
        error = malformed(exc.errors())
        return _error_response(error.status, error.type, error.message, service, request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return _error_response(
            exc.status_code, "http_error", str(exc.detail), service, request.url.path
        )

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        mapped = error_for(exc)
        if mapped is not None:
            return _error_response(
                mapped.status, mapped.type, mapped.message, service, request.url.path
            )
        log.exception("internal error on %s %s", request.method, request.url.path)
        error = internal_error(exc)
        return _error_response(error.status, error.type, error.message, service, request.url.path)


async def _sweep_forever(store: SessionStore) -> None:
    assert store.idle_timeout is not None
    period = min(max(store.idle_timeout / 4, 0.05), 30.0)
    while True:
        await asyncio.sleep(period)
        store.sweep()
