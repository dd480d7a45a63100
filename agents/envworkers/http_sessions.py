"""The sessions of an http pool's slots on its servers, and the requests that use them.

:class:`ServerSessions` keeps which session on which server holds each slot's episode, makes one
on a slot's first use of a server (with the run's environment keywords), makes a new one when a
session expired between episodes, and sends every pool request but the health checks over
keep-alive connections (:class:`~agentenvs.agents.envworkers.http_transport.KeepAlive`), with
the deadline ``step_timeout_s`` per operation the request carries and the run's bearer token.
``requests`` counts them by route.

Every request to a server carries an ``X-Agentenvs-Affinity`` header
(:data:`agentenvs.serve.proxy.AFFINITY_HEADER`) with a key of this pool for that server, random
per pool: behind one ``agentenvs serve --workers N`` address, HAProxy makes every new session of
the key on one worker, so that the sessions a ``step_batch`` (``reset_batch``) carries together
live where the batch goes (its first session's worker). Many pools spread over the workers by
their keys; one pool's sessions on one address share one worker (give it each worker's URL,
``--proxy none``, to spread one pool over them). A plain server ignores the header.
"""

from __future__ import annotations

import secrets
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from agentenvs.agents.envworkers.http_transport import (
    KeepAlive,
    _EnvError,
    _Refused,
    _ServerGone,
    post_json,
)
from agentenvs.agents.envworkers.pool import EnvWorkerError
from agentenvs.serve.proxy import AFFINITY_HEADER

__all__ = ["ServerSessions"]


class ServerSessions:
    """Slot -> (server, session id), and the requests to the servers.

    ``create_kwargs``: the environment keywords of every session's create body. ``servers``: the
    server each worker uses now (the pool's list, kept up to date by it), ``worker_of(slot)``:
    the worker of a slot (a session made on a server its worker left meanwhile is not kept).
    ``connect_timeout``: seconds to open a connection; ``auth_token``: the bearer token sent with
    every request (None: none).
    """

    def __init__(
        self,
        env_id: str,
        create_kwargs: dict[str, Any],
        servers: list[str],
        worker_of: Callable[[int], int],
        *,
        step_timeout_s: float | None,
        connect_timeout: float,
        auth_token: str | None = None,
    ) -> None:
        import orjson

        self.env_id = env_id
        self.create_kwargs = create_kwargs
        self.step_timeout_s = step_timeout_s
        self.connections = KeepAlive(connect_timeout, auth_token)
        self.requests: Counter[str] = Counter()  # route -> requests sent
        self._dumps = orjson.dumps
        self._counting = threading.Lock()
        self._servers = servers
        self._worker_of = worker_of
        self._held: dict[int, tuple[str, str]] = {}  # slot -> (server, session id)
        self._affinity: dict[str, dict[str, str]] = {}  # server -> this pool's affinity header

    def affinity(self, url: str) -> dict[str, str]:
        """The affinity header of this pool's requests to ``url`` (its key made on first use)."""
        with self._counting:
            header = self._affinity.get(url)
            if header is None:
                header = self._affinity[url] = {AFFINITY_HEADER: secrets.token_hex(8)}
            return header

    def on(self, url: str, slot: int) -> str:
        """The slot's session on ``url``; a dead worker (:class:`_ServerGone`) if it has none
        there (its episode was not reset there)."""
        held = self._held.get(slot)
        if held is None or held[0] != url:
            raise _ServerGone(f"has no session for slot {slot} (its episode was not reset)")
        return held[1]

    def on_or_new(self, url: str, slot: int) -> str:
        """The slot's session on ``url``, made now if it has none there."""
        held = self._held.get(slot)
        if held is None or held[0] != url:
            held = self.hold(url, slot)
        return held[1]

    def forget(self, slot: int) -> None:
        """The slot's session died with its server: a new one is made on its next use."""
        self._held.pop(slot, None)

    def take(self, url: str, keep: Callable[[int], bool]) -> list[str]:
        """Forget the sessions on ``url`` of the slots ``keep`` selects; their ids."""
        slots = [s for s, (server, _) in self._held.items() if server == url and keep(s)]
        return [self._held.pop(slot)[1] for slot in slots]

    def call(
        self,
        url: str,
        slot: int,
        route: str,
        body: dict[str, Any],
        create: bool = True,
        operations: int = 1,
    ) -> dict[str, Any]:
        """``route`` for the slot's session on ``url`` (made on first use when ``create``), a
        request of ``operations`` environment operations."""
        held = self._held.get(slot)
        if held is None or held[0] != url:
            if not create:
                raise _ServerGone(f"has no session for slot {slot} (its episode was not reset)")
            held = self.hold(url, slot)
        try:
            return self.post(url, route, {**body, "session": held[1]}, operations)
        except _ServerGone as gone:
            if not (create and gone.session_lost):
                raise
        # a session that expired between episodes: a new one for this reset
        return self.post(url, route, {**body, "session": self.hold(url, slot)[1]}, operations)

    def hold(self, url: str, slot: int) -> tuple[str, str]:
        """A new session on ``url`` for ``slot``, kept unless the slot's worker has moved off
        ``url`` meanwhile (a request that outlived its deadline must not take the slot back)."""
        held = (url, self._new_session(url))
        worker = self._worker_of(slot)
        if self._servers[worker] != url:
            raise _ServerGone(f"was left by worker {worker} during this request")
        self._held[slot] = held
        return held

    def close_slot(self, slot: int) -> None:
        """Close the slot's session, if any (best effort: the server may be gone)."""
        held = self._held.pop(slot, None)
        if held is not None:
            try:
                self.post(held[0], "close", {"session": held[1]})
            except (_ServerGone, _EnvError, _Refused):
                pass  # the server or the session is gone already

    def post(
        self, url: str, route: str, body: dict[str, Any], operations: int = 1
    ) -> dict[str, Any]:
        """``body`` to ``url``'s ``route``, a request of ``operations`` environment operations
        (its deadline: ``step_timeout_s`` each)."""
        content = self._dumps(body)
        deadline = None if self.step_timeout_s is None else self.step_timeout_s * max(1, operations)
        headers = self.affinity(url)
        with self._counting:
            self.requests[route] += 1
        return post_json(self.connections, self.env_id, url, route, content, deadline, headers)

    def check_server(self, url: str, variant: dict[str, Any]) -> None:
        """One session with this run's environment keywords, closed at once: its variant must
        be ``variant``, the one they make here (else EnvWorkerError)."""
        try:
            body = self.post(url, "sessions", {"env_kwargs": self.create_kwargs})
        except (_ServerGone, _Refused, _EnvError) as exc:
            raise EnvWorkerError(
                f"agentenvs server {url} cannot make {self.env_id} with {self.create_kwargs}: {exc}"
            ) from None
        try:
            self.post(url, "close", {"session": body["session"]})
        except (_ServerGone, _EnvError):
            pass
        if body.get("variant") != variant:
            raise EnvWorkerError(
                f"agentenvs server {url} makes {self.env_id} with {self.create_kwargs} as "
                f"variant {body.get('variant')}, this client as {variant}: the same agentenvs "
                "installation is needed on both sides"
            )

    def close(self) -> None:
        """Close the connections (a request still running on one fails)."""
        self.connections.close()

    def _new_session(self, url: str) -> str:
        try:
            body = self.post(url, "sessions", {"env_kwargs": self.create_kwargs})
        except _EnvError as exc:
            if exc.status == 429:
                raise _Refused(
                    f"agentenvs server {url} has no free session ({exc}); this run keeps one "
                    "session per episode in flight: start the server with a larger "
                    "--max-sessions, add servers, or lower --max-active"
                ) from None
            raise _Refused(
                f"agentenvs server {url} cannot make {self.env_id} with {self.create_kwargs}: {exc}"
            ) from None
        return str(body["session"])
