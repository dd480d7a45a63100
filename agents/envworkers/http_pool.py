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
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
import traceback
from collections import Counter
from collections.abc import Sequence
from typing import Any

from agentenvs.agents.envworkers.host import CutStateError, EnvFailure, EnvHost, slot_of
from agentenvs.agents.envworkers.http_transport import (
    API_PREFIX,
    DEFAULT_START_TIMEOUT_S,
    GONE_STATUSES,
    DaemonThreads,
    KeepAlive,
    _EnvError,
    _Refused,
    _ServerGone,
    check_health,
    import_httpx,
    item_error,
    normalize_server_url,
    post_json,
    step_tuple,
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
    ) -> None:
        urls = [normalize_server_url(u) for u in urls]
        if not urls:
            raise ValueError("an http pool needs at least one server URL")
        if len(set(urls)) != len(urls):
            raise ValueError(f"a server is listed twice in {urls}")
        super().__init__(env_id, len(urls), env_kwargs, None, step_timeout_s)
        self.urls = urls
        self.start_timeout_s = start_timeout_s
        httpx = import_httpx()
        import orjson

        self._httpx = httpx
        self._dumps = orjson.dumps
        self._client = httpx.Client(
            timeout=self._deadline(1),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
        )
        self._connections = KeepAlive(start_timeout_s)  # every request but health checks
        self._threads = DaemonThreads(64 * len(urls), "agentenvs-http-env")
        self.requests: Counter[str] = Counter()  # route -> requests sent
        self._counting = threading.Lock()
        self._server: list[str] = list(urls)  # worker index -> the server it uses now
        self._sessions: dict[int, tuple[str, str]] = {}  # slot -> (server, session id)
        # scripted policies' mirrors and cut-state matching (a slot's environment on first use)
        self._local = EnvHost(self.env_id, self.env_kwargs)
        self._seen: dict[int, list[Any]] = {}  # slot -> the server's results, log-aligned
        self._mirrored: dict[int, int] = {}  # slot -> log operations applied to its mirror
        try:
            self._variant = self._local_variant()
            # the server's API may default other variant keywords (AgentGym's ALFWorld): pin the
            # ones this client makes, so that the server makes the same environment as here
            self._create_kwargs = {**self._variant_kwargs(), **self.env_kwargs}
            for url in urls:
                self._check_server(url)
        except BaseException:
            self._close_transport()
            raise

    @property
    def servers(self) -> list[str]:
        """The server each worker uses now, by index (a dead one's worker has moved on)."""
        return list(self._server)

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
            problem = self._sync_mirror(slot)
            if problem is not None:
                results.append(EnvFailure(problem))
                continue
            results.append(self._local.run("act", [(ref, slot, key)])[0])
        return results

    def end(self, policy: Any, items: Sequence[tuple[int, str]]) -> None:
        ref = self._policy_ref(policy)
        self._local.run("end", [(ref, slot, key) for slot, key in items])

    def release(self, slot: int) -> list[str]:
        self._seen.pop(slot, None)
        self._mirrored.pop(slot, None)
        return super().release(slot)

    def close(self) -> None:
        if self._closed:
            return
        try:
            super().close()
        finally:
            self._close_transport()

    def _sync_mirror(self, slot: int) -> str | None:
        """Bring the slot's mirror to the server's state; a problem as text, else None."""
        log = self._logs.get(slot)
        if log is None:
            return f"slot {slot} has no episode (reset it first)"
        done = self._mirrored.get(slot, 0)
        operations = log.operations[done:]
        if not operations:
            return None
        answers = self._local.replay(operations)
        seen = [_comparable(result) for result in self._seen[slot][done:]]
        for n, (answer, expected) in enumerate(zip(answers, seen, strict=True), start=done):
            if isinstance(answer, EnvFailure) or _comparable(answer) != expected:
                self._mirrored.pop(slot, None)
                got = answer.error if isinstance(answer, EnvFailure) else repr(answer[0])
                return (
                    f"the local copy of the episode that the scripted policy acts on differs "
                    f"from the server's ({self._server[self.worker_of(slot)]}) after operation "
                    f"{n}: {got} here, {expected[0]!r} there (same agentenvs version and "
                    "environment data on both?)"
                )
        self._mirrored[slot] = done + len(operations)
        return None

    def _record(self, op: str, item: tuple, result: Any) -> None:
        super()._record(op, item, result)
        slot = slot_of(op, item)
        if op == "reset":
            self._seen[slot] = [result]
            self._mirrored.pop(slot, None)
        elif op == "step" and slot in self._seen:
            self._seen[slot].append(result)

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
        batched = [i for i, item in enumerate(items) if op == "step" or _plain_reset(op, item)]
        ticket = []
        if batched:
            run = self._step_batch if op == "step" else self._reset_batch
            ticket.append((batched, self._threads.submit(run, url, [items[i] for i in batched])))
        for i in sorted(set(range(len(items))) - set(batched)):
            ticket.append(([i], self._threads.submit(self._apply_one, url, op, items[i])))
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
                except EnvWorkerError as exc:
                    problem = f"gave no answer within {period:g} s, nor to its health check ({exc})"
            if problem is not None:
                for future in waiting:
                    future.cancel()
                raise WorkerDied(f"agentenvs server {url} (worker {index}) {problem}")

    def _stop_worker(self, index: int, kill: bool) -> None:
        url = self._server[index]
        slots = [s for s, (server, _) in self._sessions.items() if server == url]
        for slot in slots:
            if self.worker_of(slot) != index:
                continue
            _, session = self._sessions.pop(slot)
            if not kill:  # a clean close; a dead server's sessions died with it
                try:
                    self._client.post(
                        f"{url}{API_PREFIX}/close", json={"session": session}, timeout=5.0
                    )
                except Exception:  # best effort: the server may be gone already
                    pass

    def _close_transport(self) -> None:
        self._threads.shutdown()  # a request stuck on a hung server ends with its deadline
        self._connections.close()
        self._client.close()
        self._local.close()

    # ----- batches on one server ---------------------------------------------------------------

    def _step_batch(self, url: str, items: list[tuple]) -> list[Any]:
        """Every ``(slot, action)`` in one ``step_batch`` request; one result per item."""
        steps = []
        for slot, action in items:
            held = self._sessions.get(slot)
            if held is None or held[0] != url:
                raise _ServerGone(f"has no session for slot {slot} (its episode was not reset)")
            steps.append({"session": held[1], "action": action})
        answers = self._post(url, "step_batch", {"steps": steps}, len(items))["results"]
        return [
            step_tuple(a) if a["status"] == 200 else self._item_failure(url, "step_batch", a)
            for a in answers
        ]

    def _reset_batch(self, url: str, items: list[tuple]) -> list[Any]:
        """Every ``(slot, task id)`` in one ``reset_batch`` request (sessions made first where a
        slot has none on ``url``); one result per item."""
        resets = []
        for slot, task_id, *_ in items:
            held = self._sessions.get(slot)
            if held is None or held[0] != url:
                held = self._hold(url, slot)
            resets.append({"session": held[1], "task_id": task_id})
        answers = self._post(url, "reset_batch", {"resets": resets}, len(items))["results"]
        results: list[Any] = []
        for item, answer in zip(items, answers, strict=True):
            if answer["status"] == 200:
                results.append((answer["observation"], answer["info"]))
            elif answer["status"] in GONE_STATUSES:  # expired between episodes: a new session
                results.append(self._apply(url, "reset", item))
            else:
                results.append(self._item_failure(url, "reset_batch", answer))
        return results

    def _item_failure(self, url: str, route: str, answer: dict[str, Any]) -> EnvFailure:
        """A batch item's error: the environment's failure (a 4xx about it, or its exception on
        the server, a 500); a lost session is a dead worker, as for a single request."""
        status = int(answer["status"])
        if status >= 500:
            message = answer.get("error", {}).get("message", "")
            return EnvFailure(f"{message} (on agentenvs server {url})")
        error = item_error(status, answer, route)
        if isinstance(error, _ServerGone):
            raise error
        return EnvFailure(str(error))

    # ----- one operation on one server ---------------------------------------------------------

    def _apply_one(self, url: str, op: str, item: tuple) -> list[Any]:
        return [self._apply(url, op, item)]

    def _apply(self, url: str, op: str, item: tuple) -> Any:
        """Run one item; an environment error is its :class:`EnvFailure`."""
        try:
            if op == "replay":
                return self._replay_on(url, item[0])
            if op == "reset":
                return self._reset(url, *item)
            if op == "step":
                slot, action = item
                return self._step(url, slot, action)
            if op == "drop":
                return self._drop(url, item[0])
            raise ValueError(f"an http pool does not run {op!r} on its servers")
        except (_ServerGone, _Refused):
            raise
        except _EnvError as exc:  # the server's answer about the environment (unknown task...)
            return EnvFailure(str(exc))
        except Exception as exc:  # the environment's, as in process
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            return EnvFailure(detail)

    def _reset(
        self,
        url: str,
        slot: int,
        task_id: str,
        prefix_actions: Sequence[str] = (),
        cut_observation: str | None = None,
    ) -> tuple[str, dict[str, Any]]:
        if not prefix_actions and cut_observation is None:
            body = self._call_session(url, slot, "reset", {"task_id": task_id})
            return body["observation"], body["info"]
        actions = list(prefix_actions)
        body = self._call_session(
            url, slot, "replay", {"task_id": task_id, "actions": actions}, True, len(actions) + 1
        )
        steps = body["steps"]
        last = steps[-1] if steps else body["reset"]
        reached, info = last["observation"], last["info"]
        if cut_observation is not None and reached != cut_observation:
            if not self._local.env(slot).match(cut_observation, reached):
                raise CutStateError(
                    f"replaying {len(prefix_actions)} prefix actions of {task_id} reaches "
                    f"{reached!r}, not the recorded cut observation {cut_observation!r}"
                )
        if steps and (last["terminated"] or last["truncated"]):
            raise CutStateError(
                f"the episode of {task_id} is over at the cut (after {len(prefix_actions)} "
                "prefix actions): nothing is left to play"
            )
        return reached, info

    def _step(self, url: str, slot: int, action: str) -> tuple:
        return step_tuple(self._call_session(url, slot, "step", {"action": action}, False))

    def _replay_on(self, url: str, operations: list[tuple[str, tuple]]) -> list[Any]:
        """A slot's episode (its reset, then steps) on ``url``, in a new session; one result per
        operation. One ``replay`` request when it can run in one, else one request each."""
        op, item = operations[0]
        slot = slot_of(op, item)
        self._sessions.pop(slot, None)  # its session died with its old server
        if op != "reset" or any(o != "step" for o, _ in operations[1:]):
            return [self._apply(url, o, i) for o, i in operations]
        task_id = item[1]
        prefix = list(item[2]) if len(item) > 2 else []
        cut_observation = item[3] if len(item) > 3 else None
        actions = prefix + [i[1] for _, i in operations[1:]]
        try:
            body = self._call_session(
                url, slot, "replay", {"task_id": task_id, "actions": actions}, True, len(operations)
            )
        except _EnvError:  # an operation fails: find which, one request each
            return [self._apply(url, o, i) for o, i in operations]
        steps = body["steps"]
        if prefix:
            last = steps[len(prefix) - 1]
            reached = (last["observation"], last["info"])
            missed = cut_observation is not None and reached[0] != cut_observation
            if (missed and not self._local.env(slot).match(cut_observation, reached[0])) or (
                last["terminated"] or last["truncated"]
            ):  # the cut start fails: the per-operation path gives its error
                return [self._apply(url, o, i) for o, i in operations]
        else:
            reached = (body["reset"]["observation"], body["reset"]["info"])
        return [reached, *(step_tuple(step) for step in steps[len(prefix) :])]

    # ----- requests ------------------------------------------------------------------------------

    def _call_session(
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
        held = self._sessions.get(slot)
        if held is None or held[0] != url:
            if not create:
                raise _ServerGone(f"has no session for slot {slot} (its episode was not reset)")
            held = self._hold(url, slot)
        try:
            return self._post(url, route, {**body, "session": held[1]}, operations)
        except _ServerGone as gone:
            if not (create and gone.session_lost):
                raise
        # a session that expired between episodes: a new one for this reset
        return self._post(url, route, {**body, "session": self._hold(url, slot)[1]}, operations)

    def _hold(self, url: str, slot: int) -> tuple[str, str]:
        """A new session on ``url`` for ``slot``, kept unless the slot's worker has moved off
        ``url`` meanwhile (a request that outlived its deadline must not take the slot back)."""
        held = (url, self._new_session(url))
        if self._server[self.worker_of(slot)] != url:
            raise _ServerGone(f"was left by worker {self.worker_of(slot)} during this request")
        self._sessions[slot] = held
        return held

    def _new_session(self, url: str) -> str:
        try:
            body = self._post(url, "sessions", {"env_kwargs": self._create_kwargs})
        except _EnvError as exc:
            if exc.status == 429:
                raise _Refused(
                    f"agentenvs server {url} has no free session ({exc}); this run keeps one "
                    "session per episode in flight: start the server with a larger "
                    "--max-sessions, add servers, or lower --max-active"
                ) from None
            raise _Refused(
                f"agentenvs server {url} cannot make {self.env_id} with {self._create_kwargs}: "
                f"{exc}"
            ) from None
        return str(body["session"])

    def _post(
        self, url: str, route: str, body: dict[str, Any], operations: int = 1
    ) -> dict[str, Any]:
        """``body`` to ``url``'s ``route``, a request of ``operations`` environment operations
        (its deadline: ``step_timeout_s`` each)."""
        content = self._dumps(body)
        deadline = None if self.step_timeout_s is None else self.step_timeout_s * max(1, operations)
        with self._counting:
            self.requests[route] += 1
        return post_json(self._connections, self.env_id, url, route, content, deadline)

    def _deadline(self, operations: int) -> Any:
        """The httpx timeout of a request of ``operations`` operations."""
        total = None if self.step_timeout_s is None else self.step_timeout_s * max(1, operations)
        return self._httpx.Timeout(total, connect=self.start_timeout_s)

    def _drop(self, url: str, slot: int) -> None:
        """Close the slot's session (its next reset makes a new one) and forget its mirror."""
        self._local.run("drop", [(slot,)])
        held = self._sessions.pop(slot, None)
        if held is not None:
            try:
                self._post(held[0], "close", {"session": held[1]})
            except (_ServerGone, _EnvError, _Refused):
                pass  # the server or the session is gone already

    # ----- start-up checks -----------------------------------------------------------------------

    def _local_variant(self) -> dict[str, Any]:
        from agentenvs.registration import env_class

        env = env_class(self.env_id)(**self.env_kwargs)
        try:
            return dict(env.variant)
        finally:
            env.close()

    def _variant_kwargs(self) -> dict[str, Any]:
        """The variant's keywords that the environment's constructor takes."""
        return variant_kwargs(self.env_id, self._variant)

    def _check_health(self, url: str) -> dict[str, Any]:
        """The server's health answer, checked: same env id and agentenvs version."""
        return check_health(self._client, self._httpx, url, self.env_id, self.start_timeout_s)

    def _check_server(self, url: str) -> None:
        """Health, then one session with this run's environment keywords: its variant must be
        the one they make here."""
        self._check_health(url)
        try:
            body = self._post(url, "sessions", {"env_kwargs": self._create_kwargs})
        except (_ServerGone, _Refused, _EnvError) as exc:
            raise EnvWorkerError(
                f"agentenvs server {url} cannot make {self.env_id} with {self._create_kwargs}: "
                f"{exc}"
            ) from None
        try:
            self._post(url, "close", {"session": body["session"]})
        except (_ServerGone, _EnvError):
            pass
        variant = body.get("variant")
        if variant != self._variant:
            raise EnvWorkerError(
                f"agentenvs server {url} makes {self.env_id} with {self._create_kwargs} as variant "
                f"{variant}, this client as {self._variant}: the same agentenvs installation "
                "is needed on both sides"
            )


def _plain_reset(op: str, item: tuple) -> bool:
    """Whether ``item`` is a reset at the task's start (no cut state to replay)."""
    return op == "reset" and (len(item) == 2 or (not item[2] and item[3] is None))


def _comparable(result: Any) -> tuple:
    """What a mirror must reproduce of a server's result: observation, reward and flags."""
    if isinstance(result, EnvFailure):
        return ("failure",)
    if len(result) == 2:
        return (result[0],)
    return (result[0], float(result[1]), bool(result[2]), bool(result[3]))
