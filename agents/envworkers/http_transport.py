"""Requests to ``agentenvs serve`` servers, shared by the http pool and :class:`HttpEnv`: server
URLs, the start-up health check, the JSON answers sorted into what they mean, the threads the
requests run on, and the keep-alive connections the pool's requests use (:class:`KeepAlive`:
``http.client``, one connection per thread and server; a turn's batch costs the client little
more than its JSON).

Every request has a deadline. An answer is one of: the JSON body (2xx); :class:`_EnvError`, a
4xx about the request (unknown task, episode over, a bad field); :class:`_ServerGone`, a dead
server (connection refused or reset, a 5xx, no answer in time) or a forgotten session (404,
410); :class:`_Refused`, an answer that is not an agentenvs server's; :class:`AuthError`, a 401
(the server wants a bearer token this client did not send, or another one): one clear error
that stops the run, never retried.

Every request carries ``Authorization: Bearer <token>`` when the client has a token: its
``auth_token`` option, else the environment variable :data:`AUTH_TOKEN_ENV` when set
(:func:`resolve_auth_token`), the token ``agentenvs serve --auth-token`` checks.
"""

from __future__ import annotations

import concurrent.futures as cf
import http.client
import os
import select
import socket
import threading
from collections import deque
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from agentenvs.agents.envworkers.pool import EnvWorkerError

__all__ = [
    "API_PREFIX",
    "AUTH_TOKEN_ENV",
    "AuthError",
    "DEFAULT_START_TIMEOUT_S",
    "GONE_STATUSES",
    "DaemonThreads",
    "KeepAlive",
    "answer_json",
    "auth_headers",
    "check_health",
    "normalize_server_url",
    "post_json",
    "resolve_auth_token",
    "step_tuple",
    "variant_kwargs",
]

API_PREFIX = "/agentenvs/v1"
DEFAULT_START_TIMEOUT_S = 30.0
GONE_STATUSES = (404, 410)  # the server no longer has the session: its environment is lost
AUTH_TOKEN_ENV = "AGENTENVS_AUTH_TOKEN"  # the shared bearer token, when no auth_token is given


class AuthError(EnvWorkerError):
    """A server answered 401: the bearer token is missing or wrong (the message says how to
    pass it). Never retried: every later request would be refused the same way."""


def resolve_auth_token(token: str | None = None) -> str | None:
    """The bearer token to send: ``token``, or (None) :data:`AUTH_TOKEN_ENV` when set; an empty
    one means none. ValueError for a token that cannot be a header value."""
    if token is None:
        token = os.environ.get(AUTH_TOKEN_ENV)
    token = (token or "").strip()
    if not token:
        return None
    if not token.isascii() or not token.isprintable() or any(c.isspace() for c in token):
        raise ValueError(
            "an auth token must be printable ASCII without spaces (it is sent as "
            "'Authorization: Bearer <token>')"
        )
    return token


def auth_headers(token: str | None) -> dict[str, str]:
    """The request headers that carry ``token`` (none without one)."""
    return {} if token is None else {"authorization": f"Bearer {token}"}


def unauthorized(url: str, route: str, token_sent: bool, detail: str = "") -> AuthError:
    """The error of a 401 answer of ``url``'s ``route``."""
    why = (
        "the token this client sent is not the server's"
        if token_sent
        else "this client sent no token and the server requires one"
    )
    said = f" ({detail})" if detail else ""
    return AuthError(
        f"agentenvs server {url} refused {route} with 401 Unauthorized{said}: {why}. Pass the "
        f"token the server was started with (agentenvs serve --auth-token): set {AUTH_TOKEN_ENV}"
        "=TOKEN in this client's environment (every command line reads it), or give it as "
        "auth_token= to the pool"
    )


class _ServerGone(Exception):
    """A request found its server dead, or without the session (the message says which)."""

    def __init__(self, message: str, session_lost: bool = False) -> None:
        super().__init__(message)
        self.session_lost = session_lost


class _Refused(Exception):
    """The server answered with an error that is not the environment's (e.g. no free session)."""


class _EnvError(Exception):
    """A 4xx answer about the request (unknown task, episode over, bad field)."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.status = status
        self.kind = kind
        self.message = message


def normalize_server_url(text: str) -> str:
    """``http(s)://HOST[:PORT]`` without a trailing slash; ValueError for anything else."""
    url = text.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{text!r} is not a server URL (http://HOST:PORT)")
    if parts.path or parts.query or parts.fragment:
        raise ValueError(f"{text!r}: give the server's root, http://HOST:PORT, without a path")
    try:
        parts.port  # noqa: B018 (raises for a malformed port)
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None
    return url


def serve_command(env_id: str, url: str) -> str:
    """The command that starts a server of ``env_id`` where ``url`` points."""
    port = urlsplit(url).port or 8000
    return f"agentenvs serve {env_id} --api agentgym --port {port}"


def import_httpx() -> Any:
    """The ``httpx`` module, or one EnvWorkerError naming the extra that installs it."""
    try:
        import httpx
        import orjson  # noqa: F401 (the answers' decoder)
    except ImportError as exc:
        raise EnvWorkerError(
            f"environments on remote servers need {exc.name}: pip install 'agentenvs[serve]'"
        ) from exc
    return httpx


def answer_json(
    httpx: Any, env_id: str, url: str, route: str, send: Any, token_sent: bool = False
) -> dict[str, Any]:
    """The JSON answer of ``send()`` (an httpx request to ``url``'s ``route``, with a bearer
    token if ``token_sent``), sorted as the module docstring says."""
    try:
        response = send()
    except httpx.TimeoutException as exc:
        raise _ServerGone(f"gave no answer to /{route} in time ({type(exc).__name__})") from None
    except httpx.TransportError as exc:
        raise _ServerGone(f"is unreachable ({type(exc).__name__}: {exc})") from None
    return sort_answer(env_id, url, route, response.status_code, response.content, token_sent)


def post_json(
    connections: KeepAlive,
    env_id: str,
    url: str,
    route: str,
    content: bytes,
    timeout: float | None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """POST ``content`` (JSON) to ``url``'s ``route`` over ``connections`` (with ``headers``
    besides the connections' own), waiting at most ``timeout`` seconds for each part of the
    answer (None: for ever); the answer sorted as the module docstring says."""
    try:
        status, body = connections.post(url, f"{API_PREFIX}/{route}", content, timeout, headers)
    except TimeoutError as exc:
        raise _ServerGone(f"gave no answer to /{route} in time ({type(exc).__name__})") from None
    except (OSError, http.client.HTTPException) as exc:
        raise _ServerGone(f"is unreachable ({type(exc).__name__}: {exc})") from None
    return sort_answer(env_id, url, route, status, body, connections.auth_token is not None)


def sort_answer(
    env_id: str, url: str, route: str, status: int, content: bytes, token_sent: bool = False
) -> dict[str, Any]:
    """The JSON body of an answer with ``status``, or the exception it stands for."""
    import orjson

    if status == 401:
        raise unauthorized(url, f"/{route}", token_sent, _error_message(content))
    if status >= 500:
        raise _ServerGone(f"failed: /{route} answered {status}")
    try:
        payload = orjson.loads(content)
    except orjson.JSONDecodeError:
        raise _Refused(
            f"{url} answered /{route} with {status} and no JSON: is it an "
            f"agentenvs server? Start one with `{serve_command(env_id, url)}`"
        ) from None
    if status >= 400:
        raise item_error(status, payload, route)
    return payload


def _error_message(content: bytes) -> str:
    """The ``error.message`` of an error answer in either API's format, else ""."""
    import orjson

    try:
        payload = orjson.loads(content)
    except orjson.JSONDecodeError:
        return ""
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        return str(error.get("message", ""))
    return str(error or (payload.get("detail", "") if isinstance(payload, dict) else ""))


class KeepAlive:
    """POST requests over keep-alive HTTP/1.1 connections of the standard library's
    ``http.client``, one per thread and server: a thread's requests to a server reuse its
    connection (the pool's requests run on its daemon threads). A connection the server closed
    while it was idle (uvicorn closes idle ones after its keep-alive timeout) is noticed before
    it is used again, and replaced; a request is never sent twice. ``auth_token``: the bearer
    token every request carries (None: none)."""

    def __init__(self, connect_timeout: float, auth_token: str | None = None) -> None:
        self.connect_timeout = connect_timeout
        self.auth_token = auth_token
        self._headers = {"content-type": "application/json", **auth_headers(auth_token)}
        self._local = threading.local()
        self._all: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def post(
        self,
        url: str,
        path: str,
        content: bytes,
        timeout: float | None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        """(status, body) of ``POST url+path`` (with ``headers`` besides the connections' own);
        the socket's own errors (``TimeoutError``, other ``OSError``) and ``http.client``'s go
        to the caller, the connection closed."""
        conn = self._connection(url)
        try:
            if conn.sock is None:
                conn.connect()  # within connect_timeout
                conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.sock.settimeout(timeout)
            conn.request("POST", path, content, {**self._headers, **(headers or {})})
            response = conn.getresponse()
            body = response.read()
        except BaseException:
            conn.close()
            raise
        if response.will_close:
            conn.close()
        return response.status, body

    def close(self) -> None:
        """Close every connection (a request still running on one fails)."""
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()

    def _connection(self, url: str) -> http.client.HTTPConnection:
        conns: dict[str, http.client.HTTPConnection] | None = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        conn = conns.get(url)
        if conn is None:
            parts = urlsplit(url)
            kind = (
                http.client.HTTPSConnection
                if parts.scheme == "https"
                else http.client.HTTPConnection
            )
            conn = conns[url] = kind(parts.hostname, parts.port, timeout=self.connect_timeout)
            with self._lock:
                self._all.append(conn)
        elif conn.sock is not None and select.select([conn.sock], [], [], 0)[0]:
            conn.close()  # readable while idle: the server closed it (or sent what none asked)
        return conn


def item_error(status: int, payload: Any, route: str) -> Exception:
    """The exception of a 4xx answer ``payload`` (a whole answer, or one batch item's)."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict):
        error = {"type": "HTTPError", "message": str(payload)}
    kind, message = str(error.get("type")), str(error.get("message"))
    if status in GONE_STATUSES and route != "sessions":
        return _ServerGone(f"lost the session ({status} {kind}: {message})", session_lost=True)
    return _EnvError(status, kind, message)


def variant_kwargs(env_id: str, variant: dict[str, Any]) -> dict[str, Any]:
    """The keywords of ``variant`` that ``env_id``'s constructor takes: pinned in a session's
    create body, so that a server whose API defaults others makes the same environment."""
    import inspect

    from agentenvs.registration import env_class

    params = inspect.signature(env_class(env_id).__init__).parameters
    return {k: v for k, v in variant.items() if k in params}


def check_health(
    client: Any, httpx: Any, url: str, env_id: str, timeout: float = DEFAULT_START_TIMEOUT_S
) -> dict[str, Any]:
    """The server's health answer, checked: same env id and agentenvs version. ``client``
    carries the run's bearer token in its headers, if any (a 401 is :class:`AuthError`)."""
    from agentenvs import __version__

    how = f"start one with `{serve_command(env_id, url)}` (or fix the URL)"
    try:
        response = client.get(f"{url}{API_PREFIX}/health", timeout=timeout)
    except httpx.TransportError as exc:
        raise EnvWorkerError(
            f"no agentenvs server answers at {url} ({type(exc).__name__}: {exc}): {how}"
        ) from None
    if response.status_code == 401:
        token_sent = "authorization" in getattr(client, "headers", {})
        detail = _error_message(response.content)
        raise unauthorized(url, f"GET {API_PREFIX}/health", token_sent, detail)
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code != 200 or not isinstance(body, dict) or "env_id" not in body:
        raise EnvWorkerError(
            f"{url} is not an agentenvs server (GET {API_PREFIX}/health answered "
            f"{response.status_code}): {how}"
        )
    if body["env_id"] != env_id:
        raise EnvWorkerError(
            f"{url} serves {body['env_id']}, this run needs {env_id}: start "
            f"`{serve_command(env_id, url)}` (or list the servers of {env_id})"
        )
    if body.get("version") != __version__:
        raise EnvWorkerError(
            f"{url} runs agentenvs {body.get('version')}, this client {__version__}: both "
            "sides need the same version (the same environments, the same results); "
            "upgrade one of them"
        )
    return body


class DaemonThreads:
    """A thread pool of daemon threads (at most ``max_threads``), for requests.

    ``concurrent.futures.ThreadPoolExecutor`` joins its threads when the interpreter exits, so
    one request stuck on a hung server would hold the process until its deadline; a daemon
    thread does not, and :meth:`shutdown` never waits for one.
    """

    def __init__(self, max_threads: int, name: str) -> None:
        self._max = max_threads
        self._name = name
        self._jobs: deque[tuple[cf.Future, Callable[..., Any], tuple] | None] = deque()
        self._ready = threading.Condition()
        self._threads = 0
        self._idle = 0

    def submit(self, fn: Callable[..., Any], *args: Any) -> cf.Future:
        future: cf.Future = cf.Future()
        with self._ready:
            self._jobs.append((future, fn, args))
            if len(self._jobs) > self._idle and self._threads < self._max:
                self._threads += 1
                threading.Thread(
                    target=self._work, name=f"{self._name}-{self._threads}", daemon=True
                ).start()
            self._ready.notify()
        return future

    def shutdown(self) -> None:
        """Cancel the jobs not started; idle threads end, busy ones when their request does."""
        with self._ready:
            for job in self._jobs:
                if job is not None:
                    job[0].cancel()
            self._jobs.clear()
            self._jobs.extend([None] * self._threads)
            self._ready.notify_all()

    def _work(self) -> None:
        while True:
            with self._ready:
                self._idle += 1
                while not self._jobs:
                    self._ready.wait()
                self._idle -= 1
                job = self._jobs.popleft()
                if job is None:
                    self._threads -= 1
                    return
            future, fn, args = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # the caller's future carries it
                future.set_exception(exc)


def step_tuple(answer: dict[str, Any]) -> tuple:
    """Gymnasium's step tuple of a ``/step`` answer."""
    return (
        answer["observation"],
        answer["reward"],
        answer["terminated"],
        answer["truncated"],
        answer["info"],
    )
