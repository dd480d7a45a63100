"""The native routes, ``/agentenvs/v1/...``: sessions, reset/step and their batches,
snapshot/restore, replay, task listing and health (docs/serving.md, "Native routes"). Mounted on
every ``--api``.

Every response carries ``env_id``, ``version`` and ``variant``; every error is
``{"error": {"type", "message"}}`` with a 4xx status (see :mod:`agentenvs.serve.errors`).

``step_batch`` and ``reset_batch`` run many sessions' steps (resets) in one request, in order:
each result is what ``step`` (``reset``) answers for that item, with its HTTP status in
``status``; an item's error (malformed, unknown session, episode over, the environment's crash)
stands in its place and the other items still run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from agentenvs.serve.errors import ServeError, error_for, internal_error, malformed
from agentenvs.serve.service import EnvService, dumps
from agentenvs.serve.sessions import Session

__all__ = ["MAX_BATCH_ITEMS", "PREFIX", "add_native_routes", "native_router"]

PREFIX = "/agentenvs/v1"
MAX_SEED = 2**63 - 1
MAX_BATCH_ITEMS = 4096
"""Items per ``step_batch`` / ``reset_batch``: one for each session of a full server (the
default ``--max-sessions``). A batch runs to its end before the server answers anything else,
so it is bounded like one turn of every episode a server can hold."""
YIELD_EVERY_S = 0.05
"""How long a batch runs before it lets other requests in: short against any client timeout,
long against the loop's turn (microseconds), so a batch of fast steps never yields."""
log = logging.getLogger("agentenvs.serve")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreateBody(_Body):
    env_kwargs: dict[str, Any] | None = None


class ResetBody(_Body):
    session: StrictStr
    task_id: StrictStr | None = None
    seed: StrictInt | None = Field(default=None, ge=0, le=MAX_SEED)


class StepBody(_Body):
    session: StrictStr
    action: StrictStr


class SessionBody(_Body):
    session: StrictStr


class StepBatchBody(_Body):
    steps: list[Any] = Field(max_length=MAX_BATCH_ITEMS)  # each item checked on its own


class ResetBatchBody(_Body):
    resets: list[Any] = Field(max_length=MAX_BATCH_ITEMS)  # each item checked on its own


class RestoreBody(_Body):
    snapshot: StrictStr
    session: StrictStr | None = None


class ReplayBody(_Body):
    task_id: StrictStr
    actions: list[StrictStr]
    session: StrictStr | None = None
    env_kwargs: dict[str, Any] | None = None


def _step_json(result: Any) -> dict[str, Any]:
    observation, reward, terminated, truncated, info = result
    return {"observation": observation, "reward": reward, "terminated": terminated,
            "truncated": truncated, "info": info}


def _reset_json(result: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    observation, info = result
    return {"observation": observation, "info": info}


def _step_item(raw: Any) -> tuple[Any, ...]:
    """A step item's (session, action). A plain object of two strings passes without pydantic
    (every turn's path); anything else goes through :class:`StepBody`, which says what is
    wrong or accepts it."""
    if type(raw) is dict and len(raw) == 2:
        session, action = raw.get("session"), raw.get("action")
        if type(session) is str and type(action) is str:
            return session, action
    body = StepBody.model_validate(raw)
    return body.session, body.action


def _reset_item(raw: Any) -> tuple[Any, ...]:
    """A reset item's (session, task id, seed), checked by :class:`ResetBody`."""
    body = ResetBody.model_validate(raw)
    return body.session, body.task_id, body.seed


async def _run_batch(
    service: EnvService,
    items: list[Any],
    parse: Callable[[Any], tuple[Any, ...]],
    field: str,
    operation: Callable[..., dict[str, Any]],
) -> list[dict[str, Any]]:
    """``operation(session, *rest)`` for every item, ``(session id, *rest) = parse(item)``, in
    order: each result is the single route's answer with its HTTP ``status``; an item's error is
    the route's error answer in its place (see the module docstring). Every
    :data:`YIELD_EVERY_S` the batch lets the server answer other requests (its health check: a
    client tells a long batch from a hung server by asking it)."""
    get = service.store.get
    envelope = service.envelope
    clock = time.monotonic
    due = clock() + YIELD_EVERY_S
    results = []
    for index, raw in enumerate(items):
        if clock() > due:
            await asyncio.sleep(0)
            due = clock() + YIELD_EVERY_S
        try:
            session_id, *rest = parse(raw)
            session = get(session_id)
            payload = operation(session, *rest)
        except Exception as exc:  # this item's error only; the batch goes on
            error = _item_error(exc, (field, index))
            results.append({"status": error.status, **error.to_json(), **envelope()})
            continue
        payload["status"] = 200
        payload.update(envelope(session))
        results.append(payload)
    return results


def _item_error(exc: Exception, where: tuple[str, int]) -> ServeError:
    if isinstance(exc, ValidationError):
        return malformed(exc.errors(), where)
    mapped = error_for(exc)
    if mapped is not None:
        return mapped
    log.exception("internal error in %s item %d", *where)
    return internal_error(exc)


def native_router(service: EnvService) -> APIRouter:
    """The native routes over ``service``, as a router (to include elsewhere)."""
    router = APIRouter()
    add_native_routes(router, service)
    return router


def add_native_routes(router: Any, service: EnvService) -> None:
    """Add the native routes to ``router`` (a FastAPI app or APIRouter). Added to the app itself
    rather than included as a router, they cost FastAPI one route match, not two."""
    store = service.store

    def reply(payload: dict[str, Any], session: Session | None = None) -> Response:
        payload.update(service.envelope(session))
        return Response(dumps(payload), media_type="application/json")

    @router.get(PREFIX + "/health")
    async def health() -> Response:
        return reply(service.health())

    @router.get(PREFIX + "/tasks")
    async def tasks(split: str, family: str | None = None) -> Response:
        return reply(service.tasks(split, family))

    @router.post(PREFIX + "/sessions")
    async def create(body: CreateBody) -> Response:
        session = store.create(body.env_kwargs)
        return reply({"session": session.id}, session)

    @router.post(PREFIX + "/reset")
    async def reset(body: ResetBody) -> Response:
        session = store.get(body.session)
        observation, info = service.reset(session, body.task_id, body.seed)
        return reply({"observation": observation, "info": info}, session)

    @router.post(PREFIX + "/step")
    async def step(body: StepBody) -> Response:
        session = store.get(body.session)
        return reply(_step_json(service.step(session, body.action)), session)

    @router.post(PREFIX + "/step_batch")
    async def step_batch(body: StepBatchBody) -> Response:
        results = await _run_batch(
            service, body.steps, _step_item, "steps",
            lambda session, action: _step_json(service.step(session, action)),
        )
        return reply({"results": results})

    @router.post(PREFIX + "/reset_batch")
    async def reset_batch(body: ResetBatchBody) -> Response:
        results = await _run_batch(
            service, body.resets, _reset_item, "resets",
            lambda session, task_id, seed: _reset_json(service.reset(session, task_id, seed)),
        )
        return reply({"results": results})

    @router.post(PREFIX + "/snapshot")
    async def snapshot(body: SessionBody) -> Response:
        session = store.get(body.session)
        return reply({"snapshot": service.snapshot(session)}, session)

    @router.post(PREFIX + "/restore")
    async def restore(body: RestoreBody) -> Response:
        session, observation, info = service.restore(body.snapshot, body.session)
        return reply({"session": session.id, "observation": observation, "info": info}, session)

    @router.post(PREFIX + "/replay")
    async def replay(body: ReplayBody) -> Response:
        session, result = service.replay(body.task_id, body.actions, body.session, body.env_kwargs)
        return reply(
            {
                "session": session.id,
                "reset": {"observation": result.observation, "info": result.info},
                "steps": [_step_json(s) for s in result.steps],
            },
            session,
        )

    @router.post(PREFIX + "/close")
    async def close(body: SessionBody) -> Response:
        session = store.get(body.session)
        store.close(session.id)
        return reply({"closed": True}, session)
