"""AgentGym's HTTP routes, per environment: a drop-in for AgentGym's environment servers.

The routes, request bodies and response fields of ``agentenv-<env>/agentenv_<env>/server.py``
(WooooDyy/AgentGym, and the HappynessI/Prefix_GRPO fork's copy under ``envs/AgentGym/``) for
TextCraft, BabyAI, ALFWorld and WebShop, over our environments in their AgentGym variant. Every
route, with its source and the differences we keep on purpose, is listed in docs/serving.md;
the request sequences of AgentGym's clients and of the fork's interaction classes are recorded in
tests/serve/data/ and replayed by tests/serve/test_agentgym.py.

Ids are AgentGym's integers (``id`` or, for WebShop, ``env_idx``), one session each in the
session store. Where AgentGym answers 200 with ``{"error": "..."}`` (unknown id, finished
episode) or crashes (500), we answer a 4xx with ``{"error": "<message>", "error_type": ...}``: a
client that checks the ``error`` field and one that checks the status both see it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import BaseModel

from agentenvs.serve.errors import ServeError
from agentenvs.serve.service import EnvService, dumps
from agentenvs.serve.sessions import Session

__all__ = ["AGENTGYM_ENVS", "add_agentgym_routes"]


def _json(payload: Any) -> Response:
    return Response(dumps(payload), media_type="application/json")


class _AgentGym:
    """Shared plumbing: AgentGym's integer ids over the session store, the episode's running
    record (what ``/observation`` and ``/detail`` read back), and step/reset through the service."""

    def __init__(self, service: EnvService, worker: int, workers: int) -> None:
        self.service = service
        self.store = service.store
        self.worker = worker
        self.workers = workers

    def create(self) -> tuple[int, Session]:
        idx = self.store.next_int() * self.workers + self.worker
        session = self.store.create(session_id=str(idx))
        session.extra.update(observation="", reward=0.0, done=False, score=0.0, reset=False)
        return idx, session

    def get(self, idx: int) -> Session:
        try:
            return self.store.get(str(idx))
        except ServeError as exc:
            if exc.type == "unknown_session":  # AgentGym's words, with where to look
                raise ServeError(
                    404,
                    exc.type,
                    f"The id {idx} is not valid (never created, "
                    "closed, or created on another server or worker).",
                ) from None
            raise

    def reset(
        self, session: Session, task_id: str | None, seed: int | None = None
    ) -> tuple[str, dict]:
        observation, info = self.service.reset(session, task_id, seed)
        session.extra.update(
            observation=observation, reward=0.0, done=False, score=0.0, reset=True, info=info
        )
        return observation, info

    def step(self, session: Session, action: str) -> tuple[str, float, bool, dict]:
        if not session.extra.get("reset"):
            raise ServeError(
                409, "reset_needed", f"environment {session.id} has no task yet: POST /reset first"
            )
        if session.extra["done"]:
            raise ServeError(
                409, "episode_over", f"The task with environment {session.id} has finished."
            )
        observation, reward, terminated, truncated, info = self.service.step(session, action)
        done = terminated or truncated
        session.extra.update(
            observation=observation,
            reward=reward,
            done=done,
            info=info,
            score=session.extra["score"] + reward,
        )
        return observation, reward, done, info

    def close(self, idx: Any) -> bool:
        try:
            self.store.close(str(idx))
        except ServeError:
            return False  # AgentGym's close answers false for an id it does not hold
        return True


def _task(prefix: str, index: int) -> str:
    if index < 0:
        raise ServeError(400, "unknown_task", f"index {index} is negative")
    return f"{prefix}/{index}"


# ------------------------------------------------------------------------------------------
# TextCraft: agentenv-textcraft/agentenv_textcraft/{server,model,env_wrapper}.py


class TextCraftCreate(BaseModel):
    commands: str | None = None
    goal: str | None = None
    data_idx: int | None = None


class IdAction(BaseModel):
    id: int
    action: str


class TextCraftReset(BaseModel):
    id: int
    data_idx: int | None = 0


class IdBody(BaseModel):
    id: int


def _textcraft_goal_id(goal: str) -> str:
    """A client's goal (``"gold ingot"`` or ``"minecraft:gold_ingot"``) as TextCraft's item id."""
    goal = goal.strip()
    return goal if goal.startswith("minecraft:") else "minecraft:" + goal.replace(" ", "_")


def _textcraft_start(
    ag: _AgentGym, session: Session, body: TextCraftCreate, default_idx: int
) -> str:
    """Reset ``session`` to the AgentGym task the body names (``data_idx``, or the task of its
    ``goal`` with ``commands``, else ``default_idx``); the first observation."""
    from agentenvs.textcraft.crafting import item_id_to_str
    from agentenvs.textcraft.env import agentgym_goals

    data_idx = body.data_idx
    if data_idx is None and body.goal is not None and body.commands is not None:
        # the fork shows the client's commands for its goal: play an AgentGym task of it
        wanted = _textcraft_goal_id(body.goal)
        goals = [g for g, _ in agentgym_goals()]
        if wanted not in goals:
            raise ServeError(400, "unknown_task", f"no AgentGym TextCraft goal {body.goal!r}")
        data_idx = goals.index(wanted)
    if data_idx is None:
        data_idx = default_idx  # upstream: the id is the task
    observation, _ = ag.reset(session, _task("agentgym", data_idx))
    if body.goal is not None and body.commands is not None:
        env_goal = session.env.goal  # type: ignore[attr-defined]
        if _textcraft_goal_id(body.goal) != env_goal:
            raise ServeError(
                400,
                "unknown_task",
                f"goal {body.goal!r} is not the goal of AgentGym task "
                f"{data_idx} ({item_id_to_str(env_goal)!r})",
            )
        # AgentGym's reset with commands and goal shows them as given; the rules do not
        # depend on the commands, so the game played is the same
        goal_text = item_id_to_str(env_goal)
        observation = f"Crafting commands:\n{body.commands}\n\nGoal: craft {goal_text}."
        session.extra["observation"] = observation
    session.extra.update(data_idx=data_idx, goal=body.goal)
    return observation


def _textcraft(ag: _AgentGym, router: APIRouter) -> None:
    from agentenvs.textcraft.crafting import item_id_to_str

    def start(session: Session, body: TextCraftCreate, default_idx: int) -> str:
        return _textcraft_start(ag, session, body, default_idx)

    @router.get("/")
    async def hello() -> Response:
        return _json("This is environment TextCraft.")

    @router.post("/create")
    async def create(body: TextCraftCreate | None = None) -> Response:
        body = body or TextCraftCreate()
        idx, session = ag.create()
        try:
            observation = start(session, body, idx)
        except Exception:
            ag.close(idx)
            raise
        return _json(
            {"id": idx, "observation": observation, "done": False, "reward": 0, "goal": body.goal}
        )

    @router.post("/step")
    async def step(body: IdAction) -> Response:
        observation, reward, done, _ = ag.step(ag.get(body.id), body.action)
        return _json({"observation": observation, "reward": reward, "done": done})

    @router.post("/reset")
    async def reset(body: TextCraftReset) -> Response:
        session = ag.get(body.id)
        observation = start(session, TextCraftCreate(data_idx=body.data_idx or 0), 0)
        return _json({"id": body.id, "observation": observation, "done": False, "reward": 0})

    @router.get("/observation")
    async def observation(id: int) -> Response:
        return _json(ag.get(id).extra["observation"])

    @router.get("/commands")
    async def commands(id: int) -> Response:
        return _json("\n".join(ag.get(id).env.commands))  # type: ignore[attr-defined]

    @router.get("/goal")
    async def goal(id: int) -> Response:
        return _json(item_id_to_str(ag.get(id).env.goal))  # type: ignore[attr-defined]

    @router.get("/detail")
    async def detail(id: int) -> Response:
        extra = ag.get(id).extra
        return _json(
            {
                "observation": extra["observation"],
                "done": extra["done"],
                "reward": extra["reward"],
                "deleted": False,
                "goal": extra.get("goal"),
                "data_idx": extra.get("data_idx"),
            }
        )

    @router.post("/close")
    async def close(body: IdBody) -> Response:
        return _json(ag.close(body.id))


# ------------------------------------------------------------------------------------------
# BabyAI: agentenv-babyai/agentenv_babyai/{server,model,environment}.py


class BabyAIReset(BaseModel):
    id: int
    data_idx: int


def _babyai(ag: _AgentGym, router: APIRouter) -> None:
    def goal_prefixed(session: Session) -> str:
        observation = session.extra["observation"]
        if observation.startswith("Your goal: "):
            return observation
        return f"Your goal: {session.extra['goal']}\n{observation}"

    @router.get("/")
    async def hello() -> Response:
        return _json("This is environment BabyAI.")

    @router.post("/create")
    async def create() -> Response:
        idx, _ = ag.create()
        return _json({"id": idx})

    @router.post("/reset")
    async def reset(body: BabyAIReset) -> Response:
        session = ag.get(body.id)
        observation, info = ag.reset(session, _task("agentgym", body.data_idx))
        session.extra["goal"] = info["fields"].get("goal", "")
        return _json(
            {
                "observation": observation,
                "reward": 0.0,
                "score": 0.0,
                "deleted": False,
                "done": False,
            }
        )

    @router.post("/step")
    async def step(body: IdAction) -> Response:
        session = ag.get(body.id)
        observation, reward, done, _ = ag.step(session, body.action)
        return _json(
            {
                "observation": observation,
                "reward": reward,
                "score": session.extra["score"],
                "done": done,
            }
        )

    @router.get("/observation")
    async def observation(id: int) -> Response:
        session = ag.get(id)
        extra = session.extra
        if not extra["reset"]:
            return _json(
                {
                    "observation": "Environment not initialized",
                    "reward": 0,
                    "score": 0,
                    "done": False,
                    "deleted": False,
                }
            )
        return _json(
            {
                "observation": goal_prefixed(session),
                "reward": extra["reward"],
                "score": extra["score"],
                "done": extra["done"],
                "deleted": False,
            }
        )

    @router.post("/close")
    async def close(body: IdBody) -> Response:
        return _json(ag.close(body.id))

    @router.post("/render")
    async def render(body: IdBody) -> Response:
        ag.get(body.id)
        raise ServeError(
            400,
            "unsupported",
            "this server has no renderer (AgentGym's /render draws the grid as a PNG)",
        )


# ------------------------------------------------------------------------------------------
# ALFWorld: agentenv-alfworld/agentenv_alfworld/{server,model,env_wrapper}.py


class ALFWorldReset(BaseModel):
    id: int
    game: int
    world_type: str


WORLD_TYPES = ("Text", "Embody", "Hybrid")


def _alfworld(ag: _AgentGym, router: APIRouter) -> None:
    @router.get("/")
    async def hello() -> Response:
        return _json("This is environment AlfWorld.")

    @router.post("/create")
    async def create() -> Response:
        idx, _ = ag.create()
        return _json({"id": idx})

    @router.post("/reset")
    async def reset(body: ALFWorldReset) -> Response:
        if body.world_type not in WORLD_TYPES:
            raise ServeError(
                422, "bad_request", 'world_type must be one of "Text", "Embody" and "Hybrid"'
            )
        session = ag.get(body.id)
        task_id = _task("agentgym", body.game)
        observation, info = ag.reset(session, task_id)
        actions = info["admissible_actions"] or []
        task_type = session.env.game(task_id).key  # type: ignore[attr-defined]
        session.extra.update(world_type=body.world_type, game=body.game, available_actions=actions)
        return _json(
            {
                "id": body.id,
                "observation": observation,
                "available_actions": actions,
                "task_type": task_type,
            }
        )

    @router.post("/step")
    async def step(body: IdAction) -> Response:
        session = ag.get(body.id)
        observation, reward, done, info = ag.step(session, body.action)
        actions = info["admissible_actions"] or []
        session.extra["available_actions"] = actions
        return _json(
            {
                "observation": observation,
                "reward": reward,
                "available_actions": actions,
                "done": done,
            }
        )

    @router.get("/available_actions")
    async def available_actions(id: int) -> Response:
        return _json(ag.get(id).extra.get("available_actions", []))

    @router.get("/observation")
    async def observation(id: int) -> Response:
        return _json(ag.get(id).extra["observation"])

    @router.get("/detail")
    async def detail(id: int) -> Response:
        extra = ag.get(id).extra
        return _json(
            {
                k: extra.get(k)
                for k in (
                    "world_type",
                    "game",
                    "observation",
                    "available_actions",
                    "done",
                    "reward",
                )
            }
            | {"deleted": False}
        )

    @router.post("/close")
    async def close(body: IdBody) -> Response:
        if not ag.close(body.id):
            raise ServeError(404, "unknown_session", f"The id {body.id} is not valid.")
        return _json({"id": body.id, "closed": True, "active": len(ag.store)})

    @router.get("/stats")
    async def stats() -> Response:
        store = ag.store
        return _json(
            {
                "created_total": store.created,
                "closed_total": store.closed,
                "expired_total": store.expired,
                "active_env": len(store),
                "max_active_envs": store.max_sessions,
            }
        )


# ------------------------------------------------------------------------------------------
# WebShop: agentenv-webshop/agentenv_webshop/{server,model,environment}.py


class WebShopStep(BaseModel):
    env_idx: int
    action: str


class WebShopReset(BaseModel):
    env_idx: int
    session_id: int | None = None


_CLICK = re.compile(r"click\[(.*)\]\Z", re.S)


def _webshop(ag: _AgentGym, router: APIRouter) -> None:
    @router.get("/")
    async def hello() -> Response:
        return _json("ok")

    @router.get("/list_envs")
    async def list_envs() -> Response:
        return _json([int(s.id) for s in ag.store if s.id.isdigit()])

    @router.post("/create")
    async def create() -> Response:
        idx, session = ag.create()
        try:  # AgentGym's create resets to a random goal, so a step before /reset works
            ag.reset(session, None, seed=idx)
        except Exception:
            ag.close(idx)
            raise
        return _json(idx)

    @router.post("/step")
    async def step(body: WebShopStep) -> Response:
        observation, reward, done, _ = ag.step(ag.get(body.env_idx), body.action)
        return _json({"state": observation, "reward": reward, "done": done, "info": None})

    @router.get("/available_actions")
    async def available_actions(env_idx: int) -> Response:
        actions = ag.get(env_idx).extra["info"]["admissible_actions"] or []
        clickables = [m.group(1) for a in actions if (m := _CLICK.match(a))]
        return _json(
            {
                "has_search_bar": any(a.startswith("search[") for a in actions),
                "clickables": clickables,
            }
        )

    @router.get("/instruction_text")
    async def instruction_text(env_idx: int) -> Response:
        return _json(ag.get(env_idx).extra["info"]["instruction"])

    @router.get("/observation")
    async def observation(env_idx: int) -> Response:
        return _json(ag.get(env_idx).extra["observation"])

    @router.get("/state")
    async def state(env_idx: int) -> Response:
        ag.get(env_idx)
        raise ServeError(
            400,
            "unsupported",
            "/state (the browser's url and html) is not served; use /observation, "
            "/instruction_text and /available_actions",
        )

    @router.post("/reset")
    async def reset(body: WebShopReset) -> Response:
        session = ag.get(body.env_idx)
        task_id = None if body.session_id is None else _task("synthetic", body.session_id)
        observation, _ = ag.reset(session, task_id, seed=None)
        return _json([observation, None])

    @router.post("/close")
    async def close(body: dict[str, Any]) -> Response:
        return _json(ag.close(body.get("env_idx")))


# ------------------------------------------------------------------------------------------


# The fork's base interaction reads the final reward from GET /observe?id= (a route no AgentGym
# server has: there it fails and scores 0); we answer it on the id-keyed servers.
def _observe(ag: _AgentGym, router: APIRouter) -> None:
    @router.get("/observe")
    async def observe(id: int) -> Response:
        extra = ag.get(id).extra
        return _json(
            {"observation": extra["observation"], "reward": extra["reward"], "done": extra["done"]}
        )


AGENTGYM_ENVS: dict[str, Callable[[_AgentGym, APIRouter], None]] = {
    "TextCraft-v0": _textcraft,
    "BabyAI-Text-v0": _babyai,
    "ALFWorld-v0": _alfworld,
    "WebShop-v0": _webshop,
}


def add_agentgym_routes(
    router: Any, service: EnvService, worker: int = 0, workers: int = 1
) -> bool:
    """Add AgentGym's routes for the service's environment to ``router`` (a FastAPI app or
    APIRouter); False where AgentGym has no server for it (Sokoban)."""
    routes = AGENTGYM_ENVS.get(service.env_id)
    if routes is None:
        return False
    ag = _AgentGym(service, worker, workers)
    routes(ag, router)
    if service.env_id != "WebShop-v0":
        _observe(ag, router)
    return True
