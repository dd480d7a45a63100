"""What a server does with a session, independent of the HTTP API that asks for it.

:class:`EnvService` wraps a :class:`~agentenvs.serve.sessions.SessionStore` with the episode
operations (reset, step, snapshot, restore, replay, task listing) that the native routes, the
AgentGym routes and the OpenEnv environment all call, so each rule (an action's length limit, the
action log a token replays, the 4xx an environment error becomes) lives here once.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from agentenvs.core import StepResult
from agentenvs.serve.errors import ServeError, action_too_long, error_for
from agentenvs.serve.sessions import Session, SessionStore
from agentenvs.serve.tokens import make_token, read_token

__all__ = ["MAX_REPLAY_ACTIONS", "EnvService", "dumps", "jsonable"]

MAX_REPLAY_ACTIONS = 100_000


def jsonable(value: Any) -> Any:
    """``json.dumps``'s fallback: tuples/sets as lists, numpy scalars as numbers, else ``str``."""
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    item = getattr(value, "item", None)
    if callable(item):
        return item()
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    return str(value)


# orjson's own forms of dataclasses and datetimes pass through ``jsonable`` instead, as in json
_ORJSON_OPTIONS = (
    orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
)


def dumps(payload: Any) -> bytes:
    """``payload`` as compact JSON (orjson; ``json`` for what orjson refuses, such as an
    integer past 64 bits); values JSON has no form for go through :func:`jsonable`."""
    try:
        return orjson.dumps(payload, default=jsonable, option=_ORJSON_OPTIONS)
    except orjson.JSONEncodeError:
        return json.dumps(payload, default=jsonable, separators=(",", ":")).encode()


def _reward(value: float) -> float:
    return float(value) if math.isfinite(value) else 0.0


class EnvService:
    """The episode operations of one server process over its session store."""

    def __init__(self, store: SessionStore, *, version: str, key: bytes, api: str) -> None:
        self.store = store
        self.env_id = store.env_id
        self.version = version
        self.key = key
        self.api = api
        self.ws_sessions: Callable[[], int] | None = None  # set by a WebSocket API
        self.template, _ = store.make_env()  # the default variant; answers task listings
        self.default_variant = self.template.variant
        self._envelope = {
            "env_id": self.env_id,
            "version": self.version,
            "variant": self.default_variant,
        }

    # ----- envelope ----------------------------------------------------------------------------

    def envelope(self, session: Session | None = None) -> dict[str, Any]:
        """``{env_id, version, variant}`` of every answer (the session's variant, else the
        default one): made once per session (a variant is fixed when its environment is made)
        and shared, so callers copy it into their payload and never change it."""
        if session is None:
            return self._envelope
        envelope = session.envelope
        if envelope is None:
            envelope = session.envelope = {
                "env_id": self.env_id,
                "version": self.version,
                "variant": session.variant,
            }
        return envelope

    # ----- operations --------------------------------------------------------------------------

    def reset(
        self, session: Session, task_id: str | None = None, seed: int | None = None
    ) -> tuple[str, dict[str, Any]]:
        options = {"task_id": task_id} if task_id is not None else None
        with session.lock:
            try:  # _guard, inline: every episode's start
                observation, info = session.env.reset(seed=seed, options=options)
            except Exception as exc:
                mapped = error_for(exc)
                if mapped is None:
                    raise
                raise mapped from exc
            session.actions = []
        return observation, info

    def step(self, session: Session, action: str) -> StepResult:
        env = session.env
        if len(action) > env.max_action_length:
            raise action_too_long(len(action), env.max_action_length)
        with session.lock:
            try:  # _guard, inline: this is every step's path
                observation, reward, terminated, truncated, info = env.step(action)
            except Exception as exc:
                mapped = error_for(exc)
                if mapped is None:
                    raise
                raise mapped from exc
            session.actions.append(action)
        return StepResult(observation, _reward(reward), terminated, truncated, info)

    def snapshot(self, session: Session) -> str:
        with session.lock:
            snap = _guard(session.env.snapshot)
            actions = list(session.actions)
        return make_token(
            self.key,
            version=self.version,
            env_kwargs=session.env_kwargs,
            variant=session.variant,
            actions=actions,
            snapshot=snap,
        )

    def restore(
        self, token: str, session_id: str | None = None
    ) -> tuple[Session, str, dict[str, Any]]:
        content = read_token(token, self.key)
        if content.env_id != self.env_id:
            raise ServeError(
                409,
                "snapshot_mismatch",
                f"a snapshot of {content.env_id} cannot be restored on a {self.env_id} server",
            )
        if content.version != self.version:
            raise ServeError(
                409,
                "snapshot_mismatch",
                f"a snapshot of agentenvs {content.version} cannot be restored on "
                f"agentenvs {self.version}; use a server of that version",
            )
        created = session_id is None
        session = self.store.create(content.env_kwargs) if created else self.store.get(session_id)
        try:
            if session.env_kwargs != content.env_kwargs or session.variant != content.variant:
                raise ServeError(
                    409,
                    "snapshot_mismatch",
                    f"the snapshot was taken with env_kwargs {content.env_kwargs} "
                    f"(variant {content.variant}); this session has "
                    f"{session.env_kwargs} (variant {session.variant})",
                )
            with session.lock:
                if content.snapshot is not None:
                    observation, info = _guard(lambda: session.env.restore(content.snapshot))
                else:
                    observation, info = self._replay_restore(
                        session, content.task_id, content.actions, content.turn
                    )
                session.actions = list(content.actions)
        except Exception:
            if created:
                self.store.close(session.id)
            raise
        return session, observation, info

    def _replay_restore(
        self, session: Session, task_id: str, actions: Sequence[str], turn: int
    ) -> tuple[str, dict[str, Any]]:
        try:
            result = _guard(lambda: session.env.replay(task_id, actions))
        except ServeError as exc:
            raise ServeError(
                409,
                "snapshot_mismatch",
                f"the snapshot's actions do not replay here: {exc.message}",
            ) from None
        if session.env.turn != turn:
            raise ServeError(
                409,
                "snapshot_mismatch",
                f"the snapshot's actions replay to turn {session.env.turn}, "
                f"the snapshot says {turn}",
            )
        return result.last_observation, (result.steps[-1].info if result.steps else result.info)

    def replay(
        self,
        task_id: str,
        actions: Sequence[str],
        session_id: str | None = None,
        env_kwargs: Mapping[str, Any] | None = None,
    ) -> tuple[Session, Any]:
        created = session_id is None
        if not created and env_kwargs is not None:
            raise ServeError(
                422,
                "bad_request",
                "give env_kwargs only without 'session' (a session keeps its own)",
            )
        if len(actions) > MAX_REPLAY_ACTIONS:
            raise ServeError(
                413,
                "too_many_actions",
                f"{len(actions)} actions; a replay takes at most {MAX_REPLAY_ACTIONS}",
            )
        for action in actions:
            if len(action) > self.template.max_action_length:
                raise action_too_long(len(action), self.template.max_action_length)
        session = self.store.create(env_kwargs) if created else self.store.get(session_id)
        try:
            with session.lock:
                result = _guard(lambda: session.env.replay(task_id, list(actions)))
                session.actions = list(actions)
        except Exception:
            if created:
                self.store.close(session.id)
            raise
        return session, result

    def tasks(self, split: str, family: str | None = None) -> dict[str, Any]:
        ids = _guard(lambda: self.template.task_ids(split))
        families = {t: self.template.family(t) for t in ids}
        if family is not None:
            ids = [t for t in ids if families[t] == family]
            families = {t: families[t] for t in ids}
        return {"split": split, "task_ids": ids, "families": families}

    def health(self) -> dict[str, Any]:
        """``status, sessions, max_sessions, api``; with OpenEnv's API also ``ws_sessions`` (live
        ``/ws`` sessions, which have their own ``max_sessions``)."""
        answer: dict[str, Any] = {
            "status": "ok",
            "sessions": len(self.store),
            "max_sessions": self.store.max_sessions,
            "api": self.api,
        }
        if self.ws_sessions is not None:
            answer["ws_sessions"] = self.ws_sessions()
        return answer


def _guard(call: Any) -> Any:
    """Run an environment call; its typed errors become :class:`ServeError` (4xx)."""
    try:
        return call()
    except Exception as exc:
        mapped = error_for(exc)
        if mapped is None:
            raise
        raise mapped from exc
