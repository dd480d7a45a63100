"""The outermost ASGI layer of ``agentenvs serve``: access and body size, before any route runs.

* **Access.** With an ``auth_token`` set (``--auth-token`` or ``$AGENTENVS_AUTH_TOKEN``), every
  HTTP request and every WebSocket handshake of every API must carry
  ``Authorization: Bearer <token>``; anything else gets a 401 in the API's own error form, and a
  WebSocket is refused at the handshake (an HTTP 401 with that body), before it is accepted.
* **Body size.** A body over ``max_body_bytes`` gets a 413 with ``Connection: close``. A declared
  ``Content-Length`` over the cap is refused before any byte of the body is read; a body without
  one (``Transfer-Encoding: chunked``) is read only up to the cap, and the connection is closed
  right after the 413, so the rest is never read.

Error forms (what each API's clients parse): native routes ``{"error": {"type", "message"}}``
with the envelope; AgentGym's routes and OpenEnv's HTTP routes ``{"error": "<message>",
"error_type": "<type>"}``; OpenEnv's WebSocket ``{"type": "error", "data": {"message", "code"}}``.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any

from starlette.websockets import WebSocketDisconnect

from agentenvs.serve.service import dumps

__all__ = ["Guard", "bearer_matches", "error_body", "replay_receive"]

Envelope = Callable[[], dict[str, Any]]


def bearer_matches(headers: Any, token: bytes) -> bool:
    """Whether ``headers`` (ASGI pairs) hold ``Authorization: Bearer <token>`` (constant-time)."""
    for name, value in headers:
        if name == b"authorization":
            scheme, _, given = value.partition(b" ")
            return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), token)
    return False


def error_body(
    scope: Any, native_prefix: str, envelope: Envelope, type_: str, message: str
) -> bytes:
    """The JSON error of ``type_`` in the form the client of ``scope``'s route parses."""
    path = scope.get("path", "")
    if path.startswith(native_prefix):
        return dumps({"error": {"type": type_, "message": message}, **envelope()})
    if scope["type"] == "websocket":
        return dumps({"type": "error", "data": {"message": message, "code": type_.upper()}})
    return dumps({"error": message, "error_type": type_})


class Guard:
    """ASGI middleware enforcing the access token and the body cap (see the module docstring).
    ``envelope`` gives the native answers' ``{env_id, version, variant}``."""

    def __init__(
        self,
        app: Any,
        *,
        max_body_bytes: int,
        auth_token: str | None,
        native_prefix: str,
        envelope: Envelope,
    ) -> None:
        self.app = app
        self.limit = max_body_bytes
        self.token = auth_token.encode() if auth_token else None
        self.prefix = native_prefix
        self.envelope = envelope

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if self.token is not None and not bearer_matches(scope.get("headers", ()), self.token):
            message = (
                "this server requires 'Authorization: Bearer <token>' on every request "
                "(the token given to agentenvs serve --auth-token or $AGENTENVS_AUTH_TOKEN)"
            )
            await self._refuse(scope, send, 401, "unauthorized", message)
            return
        if kind == "websocket":
            try:
                await self.app(scope, receive, send)
            except WebSocketDisconnect:
                pass  # the client left; openenv's handler closing the socket again is no fault
            return
        declared = _content_length(scope["headers"])
        if declared is not None:
            if declared < 0 or declared > self.limit:
                await self._too_large(scope, send)
                return
            await self.app(scope, receive, send)
            return
        body = await self._read_capped(receive)
        if body is None:
            await self._too_large(scope, send)
            return
        await self.app(scope, replay_receive(body, receive), send)

    async def _read_capped(self, receive: Any) -> bytes | None:
        """A body without Content-Length, read up to the cap; None past it (reading stops)."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks)  # the client left; the app sees the disconnect
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)

    async def _too_large(self, scope: Any, send: Any) -> None:
        message = (
            f"request bodies are limited to {self.limit} bytes; send less per request "
            "(split a batch into several)"
        )
        await self._refuse(scope, send, 413, "body_too_large", message)

    async def _refuse(self, scope: Any, send: Any, status: int, type_: str, message: str) -> None:
        body = error_body(scope, self.prefix, self.envelope, type_, message)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        if status == 401:
            headers.append((b"www-authenticate", b"Bearer"))
        if scope["type"] == "websocket":
            if "websocket.http.response" in scope.get("extensions", {}):
                await send(
                    {"type": "websocket.http.response.start", "status": status, "headers": headers}
                )
                await send({"type": "websocket.http.response.body", "body": body})
            else:  # a server without the denial extension: refuse the handshake (403)
                await send({"type": "websocket.close", "code": 1008})
            return
        headers.append((b"connection", b"close"))  # an unread body is never read
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _content_length(headers: Any) -> int | None:
    """The declared body length; -1 for a malformed one; None when none is declared."""
    for name, value in headers:
        if name == b"content-length":
            return int(value) if value.isdigit() else -1
    return None


def replay_receive(body: bytes, receive: Any) -> Callable[[], Any]:
    """An ASGI ``receive`` that hands over ``body`` (already read from ``receive``) once, and
    then what ``receive`` says (the client's disconnect)."""
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
