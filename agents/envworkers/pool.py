"""The environment-worker pool interface, the in-process pool, and fault-tolerant remote pools.

A pool holds one environment per *slot* (an episode in flight) and applies batched operations
to them: ``reset`` a list of ``(slot, task id)`` (or ``(slot, task id, prefix actions, cut
observation)`` to start at a replayed cut state), ``step`` a list of ``(slot, action)``, ``act``
(let a scripted policy choose, next to the environment) and ``end`` (forget a scripted policy's
episode memory). Each returns one result per item: the Gymnasium value, or an
:class:`~agentenvs.agents.envworkers.host.EnvFailure` for that item only.

:class:`RemotePool` is the base of the pools whose environments live in other processes (local
processes, Ray actors). Slot ``s`` lives in worker ``s % workers``; a batch goes to every worker
at once and they run in parallel. It adds episode-level fault isolation:

* every slot keeps the log of the operations of its current episode (reset, then every step and
  scripted ``act``) with each result (fingerprinted only when a replay is checked against it);
* when a worker dies (its process exits, its actor is killed, its node goes away, or it gives no
  answer within ``step_timeout_s`` per item and is killed), the pool starts a replacement and
  **retries** each episode that lived there once: it replays the episode's log on the new worker,
  one slot at a time, checks that every replayed result has the original fingerprint (so the
  episode continues exactly where it was, scripted policies' memory included), then applies the
  operation that was in flight. The episode's :meth:`RemotePool.release` notes say so;
* an episode whose worker dies a second time, whose replay kills the new worker, or whose replay
  does not reproduce it, is lost: that operation and any later one on it return an
  ``EnvFailure(worker_lost=True)`` (the rollout ends the episode with ``error`` set) and the
  other episodes go on.

Environment exceptions are not retried: they are deterministic, so a retry would raise again.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agentenvs.agents.envworkers.host import EnvFailure, EnvHost, result_digest, slot_of

__all__ = [
    "DEFAULT_ENV_TIMEOUT_S",
    "EnvWorkerError",
    "EnvWorkerPool",
    "InProcessPool",
    "RemotePool",
    "WorkerDied",
]

DEFAULT_ENV_TIMEOUT_S = 60.0
"""Seconds one environment operation may take on a remote worker (a request or batch of n
operations: n times that) before the worker counts as hung. The slowest operations measured
here, an ALFWorld first reset and a 50-action cut-start replay on a loaded two-core machine,
took 3.5 and about 5 s: a tenfold margin, and a hung worker is given up within a minute or two
(the http pool asks a busy server's health check every period)."""


class EnvWorkerError(RuntimeError):
    """The pool cannot run at all (no worker can be started); the message says why."""


class WorkerDied(Exception):
    """Raised by a remote pool's transport when a worker is gone (the message says how)."""


class EnvWorkerPool(ABC):
    """Environments for batched rollouts (see the module docstring).

    ``env_seconds`` sums the wall time of ``reset`` and ``step`` batches; ``restarts`` counts
    workers replaced after dying. Use as a context manager or call :meth:`close`.
    """

    kind: ClassVar[str] = ""

    def __init__(
        self, env_id: str, env_kwargs: dict[str, Any] | None, env_factory: str | None
    ) -> None:
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.env_factory = env_factory
        self.env_seconds = 0.0
        self.restarts = 0

    @property
    def workers(self) -> int:
        """How many workers step environments in parallel (0: this process)."""
        return 0

    def reset(self, items: Sequence[tuple]) -> list[Any]:
        """``env.reset(options={"task_id": t})`` for every ``(slot, t)``; for every ``(slot, t,
        prefix_actions, cut_observation)``, that reset and a replay of the prefix actions,
        checked against ``cut_observation`` when not None (:func:`~agentenvs.agents.envworkers.host.
        start_at_cut`)."""
        return self._timed("reset", items)

    def step(self, items: Sequence[tuple[int, str]]) -> list[Any]:
        """``env.step(action)`` for every ``(slot, action)``."""
        return self._timed("step", items)

    def act(self, policy: Any, items: Sequence[tuple[int, str]]) -> list[Any]:
        """``policy.act(env, key)`` for every ``(slot, episode key)`` (a scripted policy)."""
        return self._run("act", [(self._policy_ref(policy), slot, key) for slot, key in items])

    def end(self, policy: Any, items: Sequence[tuple[int, str]]) -> None:
        """``policy.end_episode(key)`` for every ``(slot, episode key)``."""
        self._run("end", [(self._policy_ref(policy), slot, key) for slot, key in items])

    def release(self, slot: int) -> list[str]:
        """The episode of ``slot`` is over: forget it; returns notes on the worker failures it
        survived (empty where none)."""
        return []

    def drop(self, slots: Sequence[int]) -> None:
        """Close the environments of ``slots``: the next reset of each makes a new one (an
        environment that failed is never reused). Call after :meth:`release`."""
        self._run("drop", [(slot,) for slot in slots])

    def check_compatible(self, env_id: str, env_kwargs: dict[str, Any]) -> None:
        """Raise ValueError unless this pool makes ``env_id`` with ``env_kwargs``."""
        if (env_id, dict(env_kwargs)) != (self.env_id, self.env_kwargs):
            raise ValueError(
                f"this {self.kind} pool makes {self.env_id} with {self.env_kwargs}, but the "
                f"rollout needs {env_id} with {dict(env_kwargs)}; make a pool with those "
                "(agentenvs.agents.envworkers.make_env_pool) or let run_rollouts make one"
            )

    @abstractmethod
    def close(self) -> None:
        """Stop the workers and close the environments (idempotent)."""

    def __enter__(self) -> EnvWorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env_id!r}, workers={self.workers})"

    @abstractmethod
    def _run(self, op: str, items: Sequence[tuple]) -> list[Any]:
        """Apply ``op`` to ``items``; one result per item, in order."""

    def _policy_ref(self, policy: Any) -> Any:
        return policy

    def _timed(self, op: str, items: Sequence[tuple]) -> list[Any]:
        start = time.perf_counter()
        try:
            return self._run(op, items)
        finally:
            self.env_seconds += time.perf_counter() - start


class InProcessPool(EnvWorkerPool):
    """Every slot's environment in this process: the fastest for microsecond environments
    (TextCraft, Sokoban, BabyAI). An exception is an :class:`EnvFailure`, nothing is retried."""

    kind = "inprocess"

    def __init__(
        self,
        env_id: str,
        env_kwargs: dict[str, Any] | None = None,
        *,
        env_factory: str | None = None,
    ) -> None:
        super().__init__(env_id, env_kwargs, env_factory)
        self._host = EnvHost(env_id, self.env_kwargs, env_factory)

    def env(self, slot: int) -> Any:
        """The live environment of ``slot``."""
        return self._host.env(slot)

    def close(self) -> None:
        self._host.close()

    def _run(self, op: str, items: Sequence[tuple]) -> list[Any]:
        return self._host.run(op, items)


@dataclass
class _EpisodeLog:
    """The operations of one slot's current episode and their results' fingerprints."""

    operations: list[tuple[str, tuple]]
    results: list[Any]
    retried: bool = False
    lost: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def turn(self) -> int:
        return sum(1 for op, _ in self.operations if op == "step")


class RemotePool(EnvWorkerPool):
    """Slots spread over worker processes, with fault isolation (see the module docstring).

    Subclasses provide the transport: :meth:`_start_worker`, :meth:`_submit`, :meth:`_collect`,
    :meth:`_stop_worker`. Scripted policies are sent by their spec string and built once per
    worker. ``step_timeout_s`` (None: wait forever; the subclasses' default
    :data:`DEFAULT_ENV_TIMEOUT_S`) bounds the wait for a batch of n items to n times that; a
    worker that takes longer is killed and treated as dead.
    """

    def __init__(
        self,
        env_id: str,
        workers: int,
        env_kwargs: dict[str, Any] | None,
        env_factory: str | None,
        step_timeout_s: float | None,
    ) -> None:
        super().__init__(env_id, env_kwargs, env_factory)
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if step_timeout_s is not None and step_timeout_s <= 0:
            raise ValueError(f"step_timeout_s must be > 0 or None, got {step_timeout_s}")
        self._workers = workers
        self.step_timeout_s = step_timeout_s
        self._logs: dict[int, _EpisodeLog] = {}
        self._closed = False

    @property
    def workers(self) -> int:
        return self._workers

    def worker_of(self, slot: int) -> int:
        """The index of the worker that hosts ``slot``."""
        return slot % self._workers

    def release(self, slot: int) -> list[str]:
        log = self._logs.pop(slot, None)
        return list(log.notes) if log is not None else []

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for index in range(self._workers):
            self._stop_worker(index, kill=False)
        self._logs.clear()

    # ----- the transport (subclasses) -------------------------------------------------------

    @abstractmethod
    def _start_worker(self, index: int) -> None:
        """Start worker ``index`` (again, after it died)."""

    @abstractmethod
    def _submit(self, index: int, op: str, items: list[tuple]) -> Any:
        """Send a batch to worker ``index``; returns a ticket for :meth:`_collect`."""

    @abstractmethod
    def _collect(self, index: int, ticket: Any, timeout: float | None) -> list[Any]:
        """The answers of a submitted batch; raises :class:`WorkerDied`."""

    @abstractmethod
    def _stop_worker(self, index: int, kill: bool) -> None:
        """Stop worker ``index`` (``kill``: at once, it is dead or hung)."""

    # ----- batches -------------------------------------------------------------------------------

    def _policy_ref(self, policy: Any) -> Any:
        return getattr(policy, "spec", policy)

    def _run(self, op: str, items: Sequence[tuple]) -> list[Any]:
        if self._closed:
            raise EnvWorkerError(f"{self!r} is closed")
        results: list[Any] = [None] * len(items)
        by_worker: dict[int, list[int]] = {}
        for i, item in enumerate(items):
            log = self._logs.get(slot_of(op, item))
            if op != "reset" and log is not None and log.lost is not None:
                results[i] = EnvFailure(log.lost, worker_lost=True)
                continue
            by_worker.setdefault(self.worker_of(slot_of(op, item)), []).append(i)
        tickets: dict[int, Any] = {}
        dead: dict[int, str] = {}
        for index, positions in by_worker.items():
            try:
                tickets[index] = self._submit(index, op, [items[i] for i in positions])
            except WorkerDied as died:
                dead[index] = str(died)
        for index, positions in by_worker.items():
            if index in dead:
                continue
            try:
                answers = self._collect(index, tickets[index], self._timeout(len(positions)))
            except WorkerDied as died:
                dead[index] = str(died)
                continue
            for i, answer in zip(positions, answers, strict=True):
                results[i] = answer
                self._record(op, items[i], answer)
        for index in sorted(dead):
            pending = {slot_of(op, items[i]): i for i in by_worker[index]}
            self._recover(index, dead[index], op, items, pending, results)
        return results

    def _timeout(self, n_operations: int) -> float | None:
        return None if self.step_timeout_s is None else self.step_timeout_s * max(1, n_operations)

    def _record(self, op: str, item: tuple, result: Any) -> None:
        slot = slot_of(op, item)
        if op == "reset":
            self._logs[slot] = _EpisodeLog([(op, item)], [result])
        elif op not in ("end", "drop") and slot in self._logs:
            self._logs[slot].operations.append((op, item))
            self._logs[slot].results.append(result)

    # ----- recovery -------------------------------------------------------------------------------

    def _recover(
        self,
        index: int,
        reason: str,
        op: str,
        items: Sequence[tuple],
        pending: dict[int, int],
        results: list[Any],
    ) -> None:
        """Replace dead worker ``index`` and retry (once) every episode it hosted, one at a time,
        so that a replay that kills the new worker is charged to its own episode only."""
        self._replace(index)
        hosted = {s for s, log in self._logs.items() if self.worker_of(s) == index and not log.lost}
        ending = set(pending) if op in ("end", "drop") else set()  # over: nothing to restore
        todo = deque(sorted((hosted | set(pending)) - ending))
        on_new_worker: list[int] = []
        retried_now: set[int] = set()
        while todo:
            slot = todo.popleft()
            position = pending.get(slot)
            log = self._logs.get(slot)
            fresh = position is not None and op == "reset"
            if not fresh and slot not in retried_now and log is not None and log.retried:
                self._lose(slot, f"{reason}; it had been retried once already", position, results)
                continue
            operations = [] if fresh or log is None else list(log.operations)
            if position is not None:
                operations.append((op, items[position]))
            retried_now.add(slot)
            try:
                answers = self._replay(index, operations)
            except WorkerDied as again:
                self._lose(slot, f"{reason}; its retry failed too: {again}", position, results)
                self._replace(index)
                todo.extendleft(reversed(on_new_worker))  # their state died with the worker
                on_new_worker.clear()
                continue
            if self._accept(slot, reason, fresh, operations, answers, position, results):
                pending.pop(slot, None)
                on_new_worker.append(slot)

    def _replay(self, index: int, operations: list[tuple[str, tuple]]) -> list[Any]:
        ticket = self._submit(index, "replay", [(operations,)])
        answers = self._collect(index, ticket, self._timeout(len(operations)))[0]
        if isinstance(answers, EnvFailure):  # the replay itself could not run
            raise WorkerDied(answers.error)
        return answers

    def _accept(
        self,
        slot: int,
        reason: str,
        fresh: bool,
        operations: list[tuple[str, tuple]],
        answers: list[Any],
        position: int | None,
        results: list[Any],
    ) -> bool:
        """Check a replay against the original fingerprints; answer the operation in flight."""
        if fresh:
            self._record("reset", operations[0][1], answers[0])
            log = self._logs[slot]
            log.retried = True
            log.notes.append(f"{reason} during its reset; the reset was retried on a new worker")
            results[position] = answers[0]
            return True
        log = self._logs.get(slot)
        if log is not None:
            known = len(log.results)
            replayed = [result_digest(a) for a in answers[:known]]
            if replayed != [result_digest(r) for r in log.results]:
                why = (
                    f"{reason}; replaying its {known} operations on a new worker gave different "
                    "results (is the environment deterministic?)"
                )
                self._lose(slot, why, position, results)
                return False
            if not log.retried:
                log.retried = True
                log.notes.append(
                    f"{reason} at turn {log.turn}; the episode was restored on a new worker by "
                    f"replaying its {log.turn} steps"
                )
        if position is not None:
            results[position] = answers[-1]
            self._record(operations[-1][0], operations[-1][1], answers[-1])
        return True

    def _lose(self, slot: int, why: str, position: int | None, results: list[Any]) -> None:
        log = self._logs.get(slot)
        if log is None:
            log = self._logs[slot] = _EpisodeLog([], [])
        log.lost = f"environment lost: {why}"
        log.notes.append(log.lost)
        if position is not None:
            results[position] = EnvFailure(log.lost, worker_lost=True)

    def _replace(self, index: int) -> None:
        self._stop_worker(index, kill=True)
        try:
            self._start_worker(index)
        except Exception as exc:  # an EnvWorkerError keeps its kind (an http AuthError)
            error = type(exc) if isinstance(exc, EnvWorkerError) else EnvWorkerError
            raise error(
                f"could not start a replacement for environment worker {index}: {exc}"
            ) from exc
        self.restarts += 1
