"""The native routes, ``/agentenvs/v1/...``: sessions, reset/step, snapshot/restore, replay,
task listing and health (docs/serving.md, "Native routes"). Mounted on every ``--api``.

Every response carries ``env_id``, ``version`` and ``variant``; every error is
``{"error": {"type", "message"}}`` with a 4xx status (see :mod:`agentenvs.serve.errors`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from agentenvs.serve.service import EnvService, dumps
from agentenvs.serve.sessions import Session

__all__ = ["PREFIX", "add_native_routes", "native_router"]

PREFIX = "/agentenvs/v1"
MAX_SEED = 2**63 - 1


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
