"""Requests to ``agentenvs serve`` servers, shared by the http pool and :class:`HttpEnv`: server
URLs, the start-up health check, the JSON answers sorted into what they mean, the threads the
requests run on, and the keep-alive connections the pool's requests use (:class:`KeepAlive`:
``http.client``, one connection per thread and server; a turn's batch costs the client little
more than its JSON).

Every request has a deadline. An answer is one of: the JSON body (2xx); :class:`_EnvError`, a
4xx about the request (unknown task, episode over, a bad field); :class:`_ServerGone`, a dead
server (connection refused or reset, a 5xx, no answer in time) or a forgotten session (404,
410); :class:`_Refused`, an answer that is not an agentenvs server's.
"""

from __future__ import annotations

import concurrent.futures as cf
import http.client
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
    "DEFAULT_START_TIMEOUT_S",
    "GONE_STATUSES",
    "DaemonThreads",
    "KeepAlive",
    "answer_json",
    "check_health",
    "normalize_server_url",
    "post_json",
    "step_tuple",
    "variant_kwargs",
]

API_PREFIX = "/agentenvs/v1"
DEFAULT_START_TIMEOUT_S = 30.0
GONE_STATUSES = (404, 410)  # the server no longer has the session: its environment is lost


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


def answer_json(httpx: Any, env_id: str, url: str, route: str, send: Any) -> dict[str, Any]:
    """The JSON answer of ``send()`` (an httpx request to ``url``'s ``route``), sorted as the
    module docstring says."""
    try:
        response = send()
    except httpx.TimeoutException as exc:
        raise _ServerGone(f"gave no answer to /{route} in time ({type(exc).__name__})") from None
    except httpx.TransportError as exc:
        raise _ServerGone(f"is unreachable ({type(exc).__name__}: {exc})") from None
    return sort_answer(env_id, url, route, response.status_code, response.content)


def post_json(
    connections: KeepAlive,
    env_id: str,
    url: str,
    route: str,
    content: bytes,
    timeout: float | None,
) -> dict[str, Any]:
    """POST ``content`` (JSON) to ``url``'s ``route`` over ``connections``, waiting at most
    ``timeout`` seconds for each part of the answer (None: for ever); the answer sorted as the
    module docstring says."""
    try:
        status, body = connections.post(url, f"{API_PREFIX}/{route}", content, timeout)
    except TimeoutError as exc:
        raise _ServerGone(f"gave no answer to /{route} in time ({type(exc).__name__})") from None
    except (OSError, http.client.HTTPException) as exc:
        raise _ServerGone(f"is unreachable ({type(exc).__name__}: {exc})") from None
    return sort_answer(env_id, url, route, status, body)


def sort_answer(env_id: str, url: str, route: str, status: int, content: bytes) -> dict[str, Any]:
    """The JSON body of an answer with ``status``, or the exception it stands for."""
    import orjson

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


class KeepAlive:
    """POST requests over keep-alive HTTP/1.1 connections of the standard library's
    ``http.client``, one per thread and server: a thread's requests to a server reuse its
    connection (the pool's requests run on its daemon threads). A connection the server closed
    while it was idle (uvicorn closes idle ones after its keep-alive timeout) is noticed before
    it is used again, and replaced; a request is never sent twice."""

    _HEADERS = {"content-type": "application/json"}

    def __init__(self, connect_timeout: float) -> None:
        self.connect_timeout = connect_timeout
        self._local = threading.local()
        self._all: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def post(self, url: str, path: str, content: bytes, timeout: float | None) -> tuple[int, bytes]:
        """(status, body) of ``POST url+path``; the socket's own errors (``TimeoutError``, other
        ``OSError``) and ``http.client``'s go to the caller, the connection closed."""
        conn = self._connection(url)
        try:
            if conn.sock is None:
                conn.connect()  # within connect_timeout
                conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.sock.settimeout(timeout)
            conn.request("POST", path, content, self._HEADERS)
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
    """The server's health answer, checked: same env id and agentenvs version."""
    from agentenvs import __version__

    how = f"start one with `{serve_command(env_id, url)}` (or fix the URL)"
    try:
        response = client.get(f"{url}{API_PREFIX}/health", timeout=timeout)
    except httpx.TransportError as exc:
        raise EnvWorkerError(
            f"no agentenvs server answers at {url} ({type(exc).__name__}: {exc}): {how}"
        ) from None
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
