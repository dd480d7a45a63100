"""``agentenvs serve ENV --api mcp``: the MCP tools over streamable HTTP (the ASGI app).

:func:`build_mcp_app` serves :func:`agentenvs.serve.mcp.mcp_server` at ``/mcp`` through the MCP
SDK's ``StreamableHTTPSessionManager`` (stateful: one MCP session per ``Mcp-Session-Id``, each
holding one environment session), plus ``GET /agentenvs/v1/health``. ``max_sessions`` bounds both
the MCP sessions (past it the SDK answers 503) and the environment sessions; ``idle_timeout``
closes an MCP session with no request in flight for that long (the SDK's own timeout; its
environment session closes with it) and, through the store's sweeper, an environment session
not used for that long. With ``auth_token`` every request needs ``Authorization: Bearer
<token>`` (401 otherwise). A request whose ``Origin`` header names another host than this
machine's loopback names is refused (403), as the MCP specification asks of servers, against
DNS rebinding from a web page.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import anyio
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agentenvs.serve.guard import Guard
from agentenvs.serve.mcp import make_service, mcp_server
from agentenvs.serve.native import PREFIX as NATIVE_PREFIX
from agentenvs.serve.service import EnvService
from agentenvs.serve.sessions import SessionStore
from agentenvs.serve.settings import DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_SESSIONS

__all__ = ["HEALTH_PATH", "MCP_PATH", "build_mcp_app"]

MCP_PATH = "/mcp"
HEALTH_PATH = "/agentenvs/v1/health"
MAX_MCP_BODY_BYTES = 4 * 1024 * 1024
"""The largest MCP request body read by default (the SDK's default; ``--max-body-bytes`` sets
it): a step's action is at most 10 kB."""
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


class _QuietClosedStream(logging.Filter):
    """Drops the SDK's traceback for a session's GET stream closed by the session's own end
    (``anyio.ClosedResourceError`` in its standalone SSE writer: every client DELETE logs it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        closed = record.exc_info is not None and isinstance(
            record.exc_info[1], anyio.ClosedResourceError
        )
        return not (closed and record.getMessage() == "Error in standalone SSE writer")


_SDK_TRANSPORT_LOG = logging.getLogger("mcp.server.streamable_http")
if not any(isinstance(f, _QuietClosedStream) for f in _SDK_TRANSPORT_LOG.filters):
    _SDK_TRANSPORT_LOG.addFilter(_QuietClosedStream())


class _OriginCheck:
    """ASGI middleware: a request whose ``Origin`` is not a loopback origin gets 403."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            origin = dict(scope.get("headers", ())).get(b"origin")
            text = origin.decode("latin-1") if origin is not None else None
            if text is not None and urlsplit(text).hostname not in LOOPBACK_HOSTS:
                body = json.dumps(
                    {
                        "error": {
                            "type": "forbidden_origin",
                            "message": f"requests from the web origin {text!r} are refused",
                        }
                    }
                ).encode()
                headers = [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ]
                await send({"type": "http.response.start", "status": 403, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


class _McpEndpoint:
    """The ASGI endpoint of ``/mcp``: hands each request to the session manager."""

    def __init__(self, manager: StreamableHTTPSessionManager) -> None:
        self.manager = manager

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.manager.handle_request(scope, receive, send)


def build_mcp_app(
    env_id: str,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
    snapshot_key: str | bytes | None = None,
    worker: int = 0,
    workers: int = 1,
    auth_token: str | None = None,
    max_body_bytes: int = MAX_MCP_BODY_BYTES,
) -> Any:
    """The ASGI app of ``agentenvs serve env_id --api mcp`` (keywords as
    :func:`agentenvs.serve.app.build_app`'s). Outermost,
    :class:`~agentenvs.serve.guard.Guard` (the access token and the body cap of every API),
    then the Origin check."""
    service = make_service(
        env_id,
        env_kwargs=env_kwargs,
        max_sessions=max_sessions,
        idle_timeout=idle_timeout,
        snapshot_key=snapshot_key,
        worker=worker,
        workers=workers,
    )
    server = mcp_server(service)
    manager = StreamableHTTPSessionManager(
        app=server,
        session_idle_timeout=idle_timeout,
        max_sessions=max_sessions,
        max_request_body_size=max_body_bytes,
    )

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        sweeper = asyncio.create_task(_sweep_forever(service.store)) if idle_timeout else None
        try:
            async with manager.run():
                yield
        finally:
            if sweeper is not None:
                sweeper.cancel()
            service.store.close_all()

    async def health(_: Request) -> JSONResponse:
        return JSONResponse({**service.health(), **service.envelope()})

    app = Starlette(
        routes=[
            Route(MCP_PATH, endpoint=_McpEndpoint(manager), methods=["GET", "POST", "DELETE"]),
            Route(HEALTH_PATH, endpoint=health, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    app.state.service = service
    app.state.mcp_server = server
    return Guard(
        _OriginCheck(app),
        max_body_bytes=max_body_bytes,
        auth_token=auth_token or None,
        native_prefix=NATIVE_PREFIX,
        envelope=service.envelope,
    )


async def _sweep_forever(store: SessionStore) -> None:
    assert store.idle_timeout is not None
    period = min(max(store.idle_timeout / 4, 0.05), 30.0)
    while True:
        await asyncio.sleep(period)
        store.sweep()


def service_of(app: Any) -> EnvService:
    """The :class:`EnvService` behind an app of :func:`build_mcp_app` (tests read its store)."""
    return app.app.app.state.service
