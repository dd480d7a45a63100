"""Replay validation: does a cut-state query's prefix lead the environment where the teacher was?

For each query (Prefix-GRPO §3.1.0.2, appendix 6.2.0.2; docs/architecture.md, "Validation"): start
the environment at the trajectory's task id, apply the prefix actions, compare the replayed cut
observation with the recorded one through ``env.match``, then probe one step with the teacher's next
action and compare again. The status, by the first rule that applies:

1. an exception anywhere (unknown task, the episode ending early, an environment error): ``error``;
2. the cut observation has no shared field with the replayed one, or it is harness feedback the
   environment never produced (an unparsed teacher reply): ``unverifiable``;
3. the cut observations differ on a shared field: ``mismatch``;
4. the probe's observations differ on a shared field: ``mismatch``;
5. the probe's observations share no field: ``unverifiable``;
6. otherwise (including "no next action to probe"): ``validated``.

A raw (no-prefix) query replays nothing: it is ``validated`` when the task's reset observation is
the recorded one (exact text after whitespace normalisation), else ``mismatch``.

``env.match`` is the environment's own comparison (TextCraft: structured fields; an environment
without fields: the whole text after whitespace normalisation), so this module works for every
registered environment through the generic :class:`agentenvs.core.TextEnv` contract.

Snapshot reuse: :class:`TrajectoryReplayer` validates the queries of one trajectory shallowest
first along one walk — the prefix of the deepest cut is replayed once, each cut's state is kept as
a :class:`~agentenvs.core.Snapshot`, and a query that cannot continue the walk (after an error, or
a prefix that leaves it) restores the deepest snapshot on its path instead of replaying from reset.
Queries of one trajectory that cut at the same turn (two strategies agreeing) are validated once.

Remote servers (``env_workers``, ``--env-workers http://HOST:PORT[,...]``): the same
:class:`TrajectoryReplayer` walks each trajectory on an
:class:`~agentenvs.agents.envworkers.http_env.HttpEnv` (a session on an ``agentenvs serve``
server, stepped, snapshotted and restored over the native routes; ``match`` is a local
environment's), so the rows are the same as in process. Trajectory ``i`` starts on server
``i mod N``; N trajectories are in flight at a time (N servers); results come back in the input
order. Every server must answer its health check for the first query's environment at start
(else :class:`~agentenvs.agents.envworkers.pool.EnvWorkerError` naming it and how to start
one). A server that dies mid-run is dropped: the trajectories it held are validated again from
their start on the next live server; with none left, ``EnvWorkerError``. Servers started with
``--auth-token`` get that token on every request: ``auth_token``, else the environment variable
``AGENTENVS_AUTH_TOKEN``; a 401 stops the run with one
:class:`~agentenvs.agents.envworkers.http_transport.AuthError` saying how to pass it.
"""

from __future__ import annotations

import concurrent.futures as cf
import enum
import json
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from agentenvs.agents.envworkers.pool import DEFAULT_ENV_TIMEOUT_S
from agentenvs.core import (
    EpisodeOverError,
    MatchResult,
    MatchStatus,
    Snapshot,
    TextEnv,
    match_text,
)
from agentenvs.replay.query import CutQuery

__all__ = [
    "EnvPool",
    "ServerEnvs",
    "ReplayStats",
    "TrajectoryReplayer",
    "ValidationResult",
    "ValidationStatus",
    "validate_queries",
]


class ValidationStatus(str, enum.Enum):
    """The outcome of replay validation; only ``validated`` queries are admitted to training."""

    VALIDATED = "validated"
    MISMATCH = "mismatch"
    UNVERIFIABLE = "unverifiable"
    ERROR = "error"


def _match_dict(result: MatchResult | None) -> dict[str, Any] | None:
    if result is None:
        return None
    return {
        "status": result.status.value,
        "shared": list(result.shared),
        "differing": {k: [_jsonable(e), _jsonable(a)] for k, (e, a) in result.differing.items()},
    }


def _jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return repr(value)


@dataclass(frozen=True)
class ValidationResult:
    """A query's validation: status, a one-line reason, both comparisons, the replayed text.

    ``replayed_observation`` is what the environment showed at the cut (None on error); the
    canonical prompt ends with it.
    """

    status: ValidationStatus
    reason: str
    cut_match: MatchResult | None = None
    probe_match: MatchResult | None = None
    replayed_observation: str | None = None

    def to_row(self) -> dict[str, Any]:
        """The keys a ``replay.validated`` row adds to its query row."""
        return {
            "status": self.status.value,
            "reason": self.reason,
            "cut_match": _match_dict(self.cut_match),
            "probe_match": _match_dict(self.probe_match),
            "replayed_observation": self.replayed_observation,
        }


@dataclass
class ReplayStats:
    """Environment work done: resets, steps, snapshots taken and restored, queries, reused."""

    resets: int = 0
    steps: int = 0
    snapshots: int = 0
    restores: int = 0
    queries: int = 0
    reused_results: int = 0

    def add(self, other: ReplayStats) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


class EnvPool:
    """One environment instance per (env id, max turns, keywords), made on first use and
    reused."""

    def __init__(self) -> None:
        self._envs: dict[tuple[str, int | None, str], TextEnv] = {}

    def get(
        self, env_id: str, max_turns: int | None = None, env_kwargs: dict[str, Any] | None = None
    ) -> TextEnv:
        key = (env_id, max_turns, json.dumps(env_kwargs or {}, sort_keys=True, default=str))
        if key not in self._envs:
            from agentenvs import make

            kwargs = dict(env_kwargs or {})
            if max_turns is not None:
                kwargs["max_turns"] = max_turns
            self._envs[key] = make(env_id, **kwargs)
        return self._envs[key]


def _same_check(query: CutQuery) -> tuple[Any, ...]:
    """Queries with equal keys get the same result (two strategies choosing the same cut)."""
    return (
        query.env_id,
        query.task_id,
        tuple(query.prefix_actions),
        query.cut_observation,
        query.cut_from_env,
        query.probe_action,
        query.probe_observation,
    )


@dataclass
class _Walk:
    """Where the environment is: the task and the actions applied since reset (None: unknown)."""

    task_id: str | None = None
    actions: list[str] | None = None
    snapshots: dict[int, tuple[tuple[str, ...], Snapshot]] = field(default_factory=dict)


class TrajectoryReplayer:
    """Validates queries of one trajectory at a time (see the module docstring).

    ``reuse_snapshots=False`` replays every query's prefix from reset (the baseline of the speed
    benchmark); results are the same either way.
    """

    def __init__(self, env: TextEnv, *, reuse_snapshots: bool = True) -> None:
        self.env = env
        self.reuse_snapshots = reuse_snapshots
        self.stats = ReplayStats()
        self._walk = _Walk()

    def validate_trajectory(self, queries: Iterable[CutQuery]) -> list[ValidationResult]:
        """Validate queries of one trajectory; results in the input order."""
        queries = list(queries)
        self._walk = _Walk()
        order = sorted(range(len(queries)), key=lambda i: queries[i].prefix_turns)
        results: list[ValidationResult | None] = [None] * len(queries)
        done: dict[tuple[Any, ...], ValidationResult] = {}
        for i in order:
            query = queries[i]
            self.stats.queries += 1
            key = _same_check(query)
            if key in done:
                self.stats.reused_results += 1
                results[i] = done[key]
                continue
            results[i] = done[key] = self.validate(query)
        return results  # type: ignore[return-value]

    def validate(self, query: CutQuery) -> ValidationResult:
        """One query's status (rules in the module docstring); never raises for env errors."""
        try:
            replayed = self._reach(query.task_id, query.prefix_actions)
            if query.is_raw:
                return self._validate_raw(query, replayed)
            cut = self.env.match(query.cut_observation, replayed)
            if not query.cut_from_env:
                return ValidationResult(
                    ValidationStatus.UNVERIFIABLE,
                    "the cut observation is harness feedback on an unparsed reply",
                    cut,
                    None,
                    replayed,
                )
            if cut.status is MatchStatus.UNVERIFIABLE:
                return ValidationResult(
                    ValidationStatus.UNVERIFIABLE, "cut: no shared fields", cut, None, replayed
                )
            if cut.status is MatchStatus.MISMATCH:
                return ValidationResult(
                    ValidationStatus.MISMATCH,
                    f"cut differs on {sorted(cut.differing)}",
                    cut,
                    None,
                    replayed,
                )
            if query.probe_action is None:
                return ValidationResult(
                    ValidationStatus.VALIDATED,
                    "cut matches; no next action to probe",
                    cut,
                    None,
                    replayed,
                )
            probe = self.env.match(query.probe_observation or "", self._probe(query.probe_action))
        except Exception as exc:  # any failure of the replay is the 'error' status, with its text
            self._walk = _Walk(snapshots=self._walk.snapshots, task_id=self._walk.task_id)
            return ValidationResult(ValidationStatus.ERROR, f"{type(exc).__name__}: {exc}")
        if probe.status is MatchStatus.MISMATCH:
            status, reason = (
                ValidationStatus.MISMATCH,
                f"probe differs on {sorted(probe.differing)}",
            )
        elif probe.status is MatchStatus.UNVERIFIABLE:
            status, reason = ValidationStatus.UNVERIFIABLE, "probe: no shared fields"
        else:
            status, reason = ValidationStatus.VALIDATED, "cut and probe match"
        return ValidationResult(status, reason, cut, probe, replayed)

    def _validate_raw(self, query: CutQuery, replayed: str) -> ValidationResult:
        """A raw query has no prefix to replay: its prompt is the task's reset observation,
        which must be the recorded one (exact text after whitespace normalisation)."""
        same = match_text(query.cut_observation, replayed)
        if same.status is MatchStatus.MATCH:
            return ValidationResult(
                ValidationStatus.VALIDATED,
                "raw query: the reset observation is the recorded one",
                same,
                None,
                replayed,
            )
        return ValidationResult(
            ValidationStatus.MISMATCH,
            "raw query: the reset observation differs from the recorded one",
            same,
            None,
            replayed,
        )

    # ----- moving the environment -------------------------------------------------------

    def _reach(self, task_id: str, actions: list[str]) -> str:
        """Bring the environment to the state after ``actions``; returns its observation."""
        walk = self._walk
        n = len(actions)
        if not self.reuse_snapshots:
            walk.task_id, walk.actions = None, None
        if walk.task_id != task_id:
            walk.snapshots.clear()
        current = walk.actions
        if not (
            current is not None
            and walk.task_id == task_id
            and len(current) <= n
            and current == actions[: len(current)]
        ):
            current = self._restore_or_reset(task_id, actions)
        for action in actions[len(current) :]:
            self._step(action)
        walk.task_id, walk.actions = task_id, list(actions)
        if self.reuse_snapshots and n not in walk.snapshots:
            walk.snapshots[n] = (tuple(actions), self.env.snapshot())
            self.stats.snapshots += 1
        return self.env.observation

    def _restore_or_reset(self, task_id: str, actions: list[str]) -> list[str]:
        walk = self._walk
        usable = [
            k
            for k, (path, _) in walk.snapshots.items()
            if k <= len(actions) and path == tuple(actions[:k])
        ]
        self._walk.actions = None  # unknown until the restore or reset succeeds
        if usable:
            path, snapshot = walk.snapshots[max(usable)]
            self.env.restore(snapshot)
            self.stats.restores += 1
            return list(path)
        self.env.reset(options={"task_id": task_id})
        self.stats.resets += 1
        return []

    def _step(self, action: str) -> str:
        if self.env.done:
            raise EpisodeOverError(
                f"the episode ended at turn {self.env.turn}, before the action {action!r}"
            )
        observation = self.env.step(action)[0]
        self.stats.steps += 1
        return observation

    def _probe(self, action: str) -> str:
        walk = self._walk
        observation = self._step(action)
        if walk.actions is not None:
            walk.actions.append(action)
        return observation


def validate_queries(
    queries: Iterable[CutQuery],
    *,
    pool: EnvPool | None = None,
    reuse_snapshots: bool = True,
    stats: ReplayStats | None = None,
    env_workers: Sequence[str] | None = None,
    env_timeout: float | None = DEFAULT_ENV_TIMEOUT_S,
    auth_token: str | None = None,
) -> Iterator[tuple[CutQuery, ValidationResult]]:
    """Validate a stream of queries, one trajectory (consecutive equal ``replay_key``) at a time.

    Yields ``(query, result)`` in the input order. An environment that cannot be made (an id
    that is not registered, a missing optional dependency) gives ``error`` for its queries.
    ``stats``, if given, accumulates the environment work done. ``env_workers``: server URLs
    (``http://HOST:PORT``) to replay on instead of in process (module docstring), each request
    given ``env_timeout`` seconds (None: for ever) and carrying ``auth_token`` (None: the
    environment variable ``AGENTENVS_AUTH_TOKEN`` when set).
    """
    if env_workers:
        yield from _validate_on_servers(
            queries, env_workers, reuse_snapshots, stats, env_timeout, auth_token
        )
        return
    pool = pool or EnvPool()
    for _, group in groupby(queries, key=lambda q: q.replay_key):
        group = list(group)
        first = group[0]
        try:
            env = pool.get(first.env_id, first.max_turns, first.env_kwargs)
        except Exception as exc:
            failure = ValidationResult(
                ValidationStatus.ERROR, f"cannot make {first.env_id}: {type(exc).__name__}: {exc}"
            )
            for query in group:
                yield query, failure
            continue
        replayer = TrajectoryReplayer(env, reuse_snapshots=reuse_snapshots)
        results = replayer.validate_trajectory(group)
        if stats is not None:
            stats.add(replayer.stats)
        yield from zip(group, results, strict=True)


class ServerEnvs:
    """Environments in sessions on ``agentenvs serve`` servers, for replay validation.

    One :class:`~agentenvs.agents.envworkers.http_env.HttpEnv` per (server, environment keywords,
    thread), made on first use; a dead server is left out from then on. ``close`` closes every
    session. ``timeout_s`` (None: for ever) bounds each request; a server that misses it is dead.
    ``auth_token``: the servers' bearer token (None: ``AGENTENVS_AUTH_TOKEN`` when set).
    """

    def __init__(
        self,
        urls: Sequence[str],
        start_timeout_s: float = 30.0,
        timeout_s: float | None = DEFAULT_ENV_TIMEOUT_S,
        auth_token: str | None = None,
    ) -> None:
        from agentenvs.agents.envworkers.http_transport import (
            auth_headers,
            import_httpx,
            normalize_server_url,
            resolve_auth_token,
        )

        urls = [normalize_server_url(u) for u in urls]
        if not urls:
            raise ValueError("--env-workers needs at least one server URL")
        if len(set(urls)) != len(urls):
            raise ValueError(f"a server is listed twice in {urls}")
        self.urls = urls
        self.start_timeout_s = start_timeout_s
        self.timeout_s = timeout_s
        self._httpx = import_httpx()
        self._client = self._httpx.Client(
            timeout=self._httpx.Timeout(None, connect=start_timeout_s),
            headers=auth_headers(resolve_auth_token(auth_token)),
        )
        self._thread = threading.local()
        self._lock = threading.Lock()
        self._made: list[Any] = []
        self.dead: dict[str, str] = {}  # url -> why

    def check(self, env_id: str) -> None:
        """Every server answers its health check and serves ``env_id`` (else EnvWorkerError)."""
        from agentenvs.agents.envworkers.http_transport import check_health

        for url in self.urls:
            check_health(self._client, self._httpx, url, env_id, self.start_timeout_s)

    def validate_trajectory(
        self, index: int, group: list[CutQuery], reuse_snapshots: bool
    ) -> tuple[list[ValidationResult], ReplayStats]:
        """The results of one trajectory's queries, on server ``index % servers`` or, if that
        one is dead or dies, the next live one."""
        from agentenvs.agents.envworkers.http_env import ServerLost
        from agentenvs.agents.envworkers.pool import EnvWorkerError

        first = group[0]
        pool = getattr(self._thread, "pool", None)
        if pool is None:
            pool = self._thread.pool = EnvPool()
            self._thread.envs = {}
        try:
            local = pool.get(first.env_id, first.max_turns, first.env_kwargs)
        except Exception as exc:
            failure = ValidationResult(
                ValidationStatus.ERROR, f"cannot make {first.env_id}: {type(exc).__name__}: {exc}"
            )
            return [failure] * len(group), ReplayStats()
        kwargs = dict(first.env_kwargs or {})
        if first.max_turns is not None:
            kwargs["max_turns"] = first.max_turns
        n = len(self.urls)
        for k in range(n):
            url = self.urls[(index + k) % n]
            if url in self.dead:
                continue
            key = (url, first.env_id, json.dumps(kwargs, sort_keys=True, default=str))
            env = self._thread.envs.get(key)
            try:
                if env is None:
                    env = self._make(url, first.env_id, kwargs, local)
                    self._thread.envs[key] = env
            except ServerLost as lost:
                self.dead.setdefault(url, str(lost))
                continue
            replayer = TrajectoryReplayer(env, reuse_snapshots=reuse_snapshots)
            results = replayer.validate_trajectory(group)
            if env.lost is None:
                return results, replayer.stats
            self.dead.setdefault(url, env.lost)  # validated again on the next live server
            self._thread.envs.pop(key, None)
        raise EnvWorkerError(
            f"no agentenvs server is left to validate {first.env_id} {first.task_id} on: "
            + "; ".join(self.dead.values())
        )

    def _make(self, url: str, env_id: str, kwargs: dict[str, Any], local: TextEnv) -> Any:
        from agentenvs.agents.envworkers.http_env import HttpEnv

        env = HttpEnv(url, env_id, kwargs, local, self._client, self._httpx, self.timeout_s)
        with self._lock:
            self._made.append(env)
        return env

    def close(self) -> None:
        for env in self._made:
            env.close()
        self._client.close()


def _validate_on_servers(
    queries: Iterable[CutQuery],
    urls: Sequence[str],
    reuse_snapshots: bool,
    stats: ReplayStats | None,
    timeout_s: float | None,
    auth_token: str | None = None,
) -> Iterator[tuple[CutQuery, ValidationResult]]:
    """:func:`validate_queries` on remote servers (module docstring)."""
    servers = ServerEnvs(urls, timeout_s=timeout_s, auth_token=auth_token)
    groups = (list(g) for _, g in groupby(queries, key=lambda q: q.replay_key))
    pending: deque[tuple[list[CutQuery], cf.Future]] = deque()
    executor = cf.ThreadPoolExecutor(len(servers.urls), thread_name_prefix="agentenvs-validate")

    def finish_one() -> Iterator[tuple[CutQuery, ValidationResult]]:
        group, future = pending.popleft()
        results, work = future.result()
        if stats is not None:
            stats.add(work)
        yield from zip(group, results, strict=True)

    try:
        for index, group in enumerate(groups):
            if index == 0:
                servers.check(group[0].env_id)
            pending.append(
                (group, executor.submit(servers.validate_trajectory, index, group, reuse_snapshots))
            )
            if len(pending) > 2 * len(servers.urls):
                yield from finish_one()
        while pending:
            yield from finish_one()
    finally:
        for _, future in pending:
            future.cancel()
        executor.shutdown(wait=True)
        servers.close()
