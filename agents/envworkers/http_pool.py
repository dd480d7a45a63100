"""Environments on remote ``agentenvs serve`` servers (``http://HOST:PORT[,http://HOST2:PORT]``).

Each listed server is one worker of a :class:`~agentenvs.agents.envworkers.pool.RemotePool`: slot
``s`` (an episode in flight) lives in a session on worker ``s % servers`` for the whole episode
(sticky), so the episodes spread over the list. The pool speaks the server's native routes
(``/agentenvs/v1/...``, docs/serving.md): a session per slot, made with the rollout's environment
keywords (the protocol's variant and the turn budget) in its create body and reused by the
slot's later episodes. A batch of steps (resets) is one ``step_batch`` (``reset_batch``) request
per server, its items in order; a cut start is one ``replay`` request (a task id and an action
list), and runs beside the batch. ``requests`` counts the requests by route.

Every request has a deadline: ``step_timeout_s`` (default
:data:`~agentenvs.agents.envworkers.pool.DEFAULT_ENV_TIMEOUT_S`) per operation it carries. While a
batch runs, the pool asks the server's health check every ``step_timeout_s``: a server working
through a long batch answers it (the batch lets it through), a hung one does not and is left at
once, however many operations its request holds.

A server that dies (its connection is refused or reset, it answers 5xx, it has forgotten a
session, or it misses a deadline or a health check) is a dead worker: the pool
moves that worker to the next server of the list that answers its health check, and retries
each episode that lived there once, exactly, by replaying the episode's reset and steps there in
one ``replay`` request and checking every result against the original one (the
:class:`~agentenvs.agents.envworkers.pool.RemotePool` contract). Episodes already finished are
never touched. With no server left, the run stops with
:class:`~agentenvs.agents.envworkers.pool.EnvWorkerError` (an evaluation's finished episodes are
already in its file). Environment errors (an unknown task, a cut that is not reached, an
exception of the environment on the server) are the item's
:class:`~agentenvs.agents.envworkers.host.EnvFailure`, as in process.

Scripted policies that act from state (the expert, the random agent) act on a local mirror of
each episode: the pool replays the episode's reset and steps into an environment of this
process before each ``act`` and checks the mirror reaches the server's observations (the
server's environment object does not travel over HTTP). The mirror costs one local step per
step; language-model policies need no mirror.

At start every server must answer ``GET /agentenvs/v1/health`` and serve the same environment
id with the same agentenvs version as this client, and the environment keywords must make the
same variant there as here; otherwise :class:`EnvWorkerError` names the server, what differs and
how to start a matching one (``agentenvs serve ENV_ID --api agentgym --port P``).

A server started with ``--auth-token`` wants that token on every request: the pool sends
``Authorization: Bearer <token>`` from its ``auth_token`` option, else from the environment
variable ``AGENTENVS_AUTH_TOKEN``; a 401 stops the run at once with
:class:`~agentenvs.agents.envworkers.http_transport.AuthError`, saying how to pass the token.

The parts: the sessions and requests (:mod:`.http_sessions`), the operations on one server
(:mod:`.http_operations`), the scripted policies' mirrors (:mod:`.http_mirror`); this module
moves workers between servers and watches their health.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from agentenvs.agents.envworkers.host import EnvFailure
from agentenvs.agents.envworkers.http_mirror import Mirrors
from agentenvs.agents.envworkers.http_operations import ServerOperations, plain_reset
from agentenvs.agents.envworkers.http_sessions import ServerSessions
from agentenvs.agents.envworkers.http_transport import (
    API_PREFIX,
    DEFAULT_START_TIMEOUT_S,
    AuthError,
    DaemonThreads,
    _Refused,
    _ServerGone,
    auth_headers,
    check_health,
    import_httpx,
    normalize_server_url,
    resolve_auth_token,
    variant_kwargs,
)
from agentenvs.agents.envworkers.pool import (
    DEFAULT_ENV_TIMEOUT_S,
    EnvWorkerError,
    RemotePool,
    WorkerDied,
)

__all__ = ["HttpPool"]


class HttpPool(RemotePool):
    """Environments in sessions on ``agentenvs serve`` servers (see the module docstring).

    ``urls``: the servers (``http://HOST:PORT``), one worker each. ``step_timeout_s`` (None: wait
    forever) bounds each request to that many seconds per operation and is the period of the
    health checks during a batch; ``start_timeout_s`` the health checks at start.
    ``auth_token``: the bearer token of servers started with ``--auth-token`` (None: the
    environment variable ``AGENTENVS_AUTH_TOKEN`` when set; ``""``: none).
    """

    kind = "http"

    def __init__(
        self,
        env_id: str,
        urls: Sequence[str],
        env_kwargs: dict[str, Any] | None = None,
        *,
        step_timeout_s: float | None = DEFAULT_ENV_TIMEOUT_S,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        auth_token: str | None = None,
    ) -> None:
        urls = [normalize_server_url(u) for u in urls]
        if not urls:
            raise ValueError("an http pool needs at least one server URL")
        if len(set(urls)) != len(urls):
            raise ValueError(f"a server is listed twice in {urls}")
        token = resolve_auth_token(auth_token)
        super().__init__(env_id, len(urls), env_kwargs, None, step_timeout_s)
        self.urls = urls
        self.start_timeout_s = start_timeout_s
        httpx = import_httpx()
        self._httpx = httpx
        self._variant = self._local_variant()
        # the server's API may default other variant keywords (AgentGym's ALFWorld): pin the
        # ones this client makes, so that the server makes the same environment as here
        create = {**variant_kwargs(self.env_id, self._variant), **self.env_kwargs}
        self._client = httpx.Client(  # health checks and closing sessions at the end
            timeout=httpx.Timeout(step_timeout_s, connect=start_timeout_s),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
            headers=auth_headers(token),
        )
        self._threads = DaemonThreads(64 * len(urls), "agentenvs-http-env")
        self._server: list[str] = list(urls)  # worker index -> the server it uses now
        # scripted policies' mirrors and cut-state matching (a slot's environment on first use)
        self._mirrors = Mirrors(self.env_id, self.env_kwargs)
        self._sessions = ServerSessions(
            self.env_id,
            create,
            self._server,
            self.worker_of,
            step_timeout_s=step_timeout_s,
            connect_timeout=start_timeout_s,
            auth_token=token,
        )
        self._operations = ServerOperations(self._sessions, self._mirrors)
        try:
            for url in urls:
                check_health(self._client, httpx, url, self.env_id, start_timeout_s)
                self._sessions.check_server(url, self._variant)
        except BaseException:
            self._close_transport()
            raise

    @property
    def servers(self) -> list[str]:
        """The server each worker uses now, by index (a dead one's worker has moved on)."""
        return list(self._server)

    @property
    def requests(self) -> Counter[str]:
        """Requests sent to the servers, by route (health checks and closing at the end not
        counted)."""
        return self._sessions.requests

    def __repr__(self) -> str:
        return f"HttpPool({self.env_id!r}, servers={self._server})"

    # ----- scripted policies act on local mirrors ------------------------------------------

    def act(self, policy: Any, items: Sequence[tuple[int, str]]) -> list[Any]:
        ref = self._policy_ref(policy)
        results: list[Any] = []
        for slot, key in items:
            log = self._logs.get(slot)
            if log is not None and log.lost is not None:
                results.append(EnvFailure(log.lost, worker_lost=True))
                continue
            operations = None if log is None else log.operations
            where = lambda slot=slot: self._server[self.worker_of(slot)]  # noqa: E731
            problem = self._mirrors.sync(slot, operations, where)
            if problem is not None:
                results.append(EnvFailure(problem))
                continue
            results.append(self._mirrors.act(ref, slot, key))
        return results

    def end(self, policy: Any, items: Sequence[tuple[int, str]]) -> None:
        self._mirrors.end(self._policy_ref(policy), items)

    def release(self, slot: int) -> list[str]:
        self._mirrors.forget(slot)
        return super().release(slot)

    def close(self) -> None:
        if self._closed:
            return
        try:
            super().close()
        finally:
            self._close_transport()

    def _record(self, op: str, item: tuple, result: Any) -> None:
        super()._record(op, item, result)
        self._mirrors.record(op, item, result)

    # ----- the transport -----------------------------------------------------------------------

    def _start_worker(self, index: int) -> None:
        """Move worker ``index`` to the next server of the list that is healthy (its health
        check answered within ``step_timeout_s``, or ``start_timeout_s`` if that is shorter)."""
        n = len(self.urls)
        start = self.urls.index(self._server[index]) + 1
        timeout = min(self.start_timeout_s, self.step_timeout_s or self.start_timeout_s)
        problems = []
        for k in range(n):
            url = self.urls[(start + k) % n]
            try:
                check_health(self._client, self._httpx, url, self.env_id, timeout)
            except AuthError:
                raise
            except EnvWorkerError as exc:
                problems.append(str(exc))
                continue
            self._server[index] = url
            return
        raise EnvWorkerError("no server is left: " + "; ".join(problems))

    def _submit(self, index: int, op: str, items: list[tuple]) -> Any:
        """A ticket: (positions, future of their results) pairs. Steps and plain resets go in
        one batch request; every other item (a cut start, a drop) in a request of its own."""
        url = self._server[index]
        run = self._operations
        batched = [i for i, item in enumerate(items) if op == "step" or plain_reset(op, item)]
        ticket = []
        if batched:
            batch = run.step_batch if op == "step" else run.reset_batch
            ticket.append((batched, self._threads.submit(batch, url, [items[i] for i in batched])))
        for i in sorted(set(range(len(items))) - set(batched)):
            ticket.append(([i], self._threads.submit(run.apply_one, url, op, items[i])))
        return ticket

    def _collect(self, index: int, ticket: Any, timeout: float | None) -> list[Any]:
        self._wait(index, [future for _, future in ticket], timeout)
        results: list[Any] = [None] * sum(len(positions) for positions, _ in ticket)
        for positions, future in ticket:
            try:
                answers = future.result()
            except _ServerGone as gone:
                raise WorkerDied(f"agentenvs server {self._server[index]} {gone}") from None
            except _Refused as refused:
                raise EnvWorkerError(str(refused)) from None
            for position, answer in zip(positions, answers, strict=True):
                results[position] = answer
        return results

    def _wait(self, index: int, futures: list[cf.Future], timeout: float | None) -> None:
        """Wait for the futures until ``timeout`` (None: for ever), asking the server's health
        check every ``step_timeout_s`` meanwhile; WorkerDied when either fails."""
        url = self._server[index]
        period = self.step_timeout_s
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            wait = period if left is None else left if period is None else min(period, left)
            _, waiting = cf.wait(futures, timeout=wait)
            if not waiting:
                return
            problem = None
            if deadline is not None and time.monotonic() >= deadline:
                problem = f"gave no answer within {timeout:g} s"
            else:
                assert period is not None
                try:
                    check_health(self._client, self._httpx, url, self.env_id, period)
                except AuthError:
                    raise
                except EnvWorkerError as exc:
                    problem = f"gave no answer within {period:g} s, nor to its health check ({exc})"
            if problem is not None:
                for future in waiting:
                    future.cancel()
                raise WorkerDied(f"agentenvs server {url} (worker {index}) {problem}")

    def _stop_worker(self, index: int, kill: bool) -> None:
        url = self._server[index]
        sessions = self._sessions.take(url, lambda slot: self.worker_of(slot) == index)
        if kill:  # a dead server's sessions died with it
            return
        for session in sessions:  # a clean close
            try:
                self._client.post(
                    f"{url}{API_PREFIX}/close", json={"session": session}, timeout=5.0
                )
            except Exception:  # best effort: the server may be gone already
                pass

    def _close_transport(self) -> None:
        self._threads.shutdown()  # a request stuck on a hung server ends with its deadline
        self._sessions.close()
        self._client.close()
        self._mirrors.close()

    # ----- start-up checks -----------------------------------------------------------------------

    def _local_variant(self) -> dict[str, Any]:
        from agentenvs.registration import build_env

        env = build_env(self.env_id, **self.env_kwargs)
        try:
            return dict(env.variant)
        finally:
            env.close()
