"""The session store: one environment instance per client episode.

A :class:`SessionStore` owns every live :class:`Session` of one server process. It hands out ids,
refuses a new session past ``max_sessions`` (429), closes sessions idle longer than
``idle_timeout`` seconds (410 for a request that names one afterwards) and keeps, per session, the
episode's action log since reset (what a snapshot token replays on a server without the key).

Thread safety: the routes of ``--api agentgym`` and the native routes are ``async`` and never
await while they touch an environment, so on the event loop a session is used by one request at a
time; each session also carries a lock for the routes that run environments in a thread pool
(OpenEnv's server).
"""

from __future__ import annotations

import inspect
import itertools
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentenvs.core import TextEnv
from agentenvs.registration import build_env, env_class
from agentenvs.serve.errors import ServeError, expired_session, session_limit, unknown_session

__all__ = ["CLIENT_FORBIDDEN_KWARGS", "Session", "SessionStore", "check_env_kwargs"]

# Constructor keywords a client may not set: they name server-side paths or objects.
CLIENT_FORBIDDEN_KWARGS: frozenset[str] = frozenset(
    {"data_dir", "cache_dir", "catalog", "render_mode"}
)
# How many expired ids are remembered (for a 410 instead of a 404); the oldest are forgotten.
EXPIRED_MEMORY = 100_000


@dataclass
class Session:
    """One client's environment and what the server keeps about its episode."""

    id: str
    env: TextEnv
    env_kwargs: dict[str, Any]
    last_used: float
    actions: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    extra: dict[str, Any] = field(default_factory=dict)  # per-API state (e.g. AgentGym's)
    envelope: dict[str, Any] | None = field(default=None, repr=False)  # set by the service

    @property
    def variant(self) -> dict[str, Any]:
        return self.env.variant


def check_env_kwargs(env_id: str, env_kwargs: Any) -> dict[str, Any]:
    """``env_kwargs`` from a client, checked against the environment's constructor (422 if bad)."""
    if env_kwargs is None:
        return {}
    if not isinstance(env_kwargs, Mapping):
        raise ServeError(422, "bad_env_kwargs", "env_kwargs must be a JSON object")
    params = inspect.signature(env_class(env_id).__init__).parameters
    allowed = sorted(n for n in params if n != "self" and n not in CLIENT_FORBIDDEN_KWARGS)
    bad = sorted(k for k in env_kwargs if k not in allowed)
    if bad:
        raise ServeError(
            422, "bad_env_kwargs", f"{env_id} does not take {bad} from a client; it takes {allowed}"
        )
    return dict(env_kwargs)


class SessionStore:
    """Every live session of one server process (see the module docstring)."""

    def __init__(
        self,
        env_id: str,
        *,
        default_kwargs: Mapping[str, Any] | None = None,
        max_sessions: int = 4096,
        idle_timeout: float | None = 3600.0,
        id_prefix: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {max_sessions}")
        if idle_timeout is not None and idle_timeout <= 0:
            raise ValueError(f"idle_timeout must be positive (or None), got {idle_timeout}")
        self.env_id = env_id
        self.default_kwargs = dict(default_kwargs or {})
        self.max_sessions = max_sessions
        self.idle_timeout = idle_timeout
        self.id_prefix = id_prefix
        self._clock = clock
        self._sessions: dict[str, Session] = {}
        self._expired: OrderedDict[str, None] = OrderedDict()
        self._mutex = threading.Lock()
        self._counter = itertools.count()
        self.created = 0
        self.closed = 0
        self.expired = 0

    # ----- lifecycle ---------------------------------------------------------------------------

    def make_env(
        self, env_kwargs: Mapping[str, Any] | None = None
    ) -> tuple[TextEnv, dict[str, Any]]:
        """A new environment with the server's defaults overridden by ``env_kwargs``."""
        kwargs = {**self.default_kwargs, **check_env_kwargs(self.env_id, env_kwargs)}
        try:
            env = build_env(self.env_id, **kwargs)
        except Exception as exc:  # any keyword the constructor refuses, however it refuses it
            raise ServeError(422, "bad_env_kwargs", f"{self.env_id}({kwargs}): {exc}") from exc
        return env, kwargs

    def create(
        self, env_kwargs: Mapping[str, Any] | None = None, session_id: str | None = None
    ) -> Session:
        """A new session (429 when ``max_sessions`` are open even after closing idle ones)."""
        if len(self._sessions) >= self.max_sessions:
            self.sweep()
            if len(self._sessions) >= self.max_sessions:
                raise session_limit(self.max_sessions)
        env, kwargs = self.make_env(env_kwargs)
        sid = session_id if session_id is not None else self.new_id()
        session = Session(sid, env, kwargs, self._clock())
        with self._mutex:
            if len(self._sessions) >= self.max_sessions:  # a concurrent create won the last slot
                env.close()
                raise session_limit(self.max_sessions)
            self._sessions[sid] = session
        self.created += 1
        return session

    def new_id(self) -> str:
        return f"{self.id_prefix}{uuid.uuid4().hex}"

    def next_int(self) -> int:
        """A process-unique counter (AgentGym's integer ids)."""
        return next(self._counter)

    def get(self, session_id: Any) -> Session:
        """The live session ``session_id`` (404 unknown, 410 expired); marks it used now."""
        session = self._sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None:
            if isinstance(session_id, str) and session_id in self._expired:
                raise expired_session(session_id, self.idle_timeout or 0.0)
            raise unknown_session(session_id)
        now = self._clock()
        if self.idle_timeout is not None and now - session.last_used > self.idle_timeout:
            self._expire(session)
            raise expired_session(session_id, self.idle_timeout)
        session.last_used = now
        return session

    def close(self, session_id: Any) -> None:
        session = self.get(session_id)
        with self._mutex:
            self._sessions.pop(session.id, None)
        self.closed += 1
        _close_env(session.env)

    def sweep(self) -> int:
        """Close every session idle longer than ``idle_timeout``; returns how many."""
        if self.idle_timeout is None:
            return 0
        cutoff = self._clock() - self.idle_timeout
        idle = [s for s in list(self._sessions.values()) if s.last_used < cutoff]
        for session in idle:
            self._expire(session)
        return len(idle)

    def close_all(self) -> None:
        with self._mutex:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for session in sessions:
            _close_env(session.env)

    def _expire(self, session: Session) -> None:
        with self._mutex:
            if self._sessions.pop(session.id, None) is None:
                return
            self._expired[session.id] = None
            while len(self._expired) > EXPIRED_MEMORY:
                self._expired.popitem(last=False)
        self.expired += 1
        _close_env(session.env)

    # ----- read-outs ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self) -> Iterator[Session]:
        return iter(list(self._sessions.values()))


def _close_env(env: TextEnv) -> None:
    try:
        env.close()
    except Exception:  # a failing close must not keep the session (or the server) alive
        pass
