"""The native routes, ``/agentenvs/v1/...``: sessions, reset/step and their batches,
snapshot/restore, replay, task listing and health (docs/serving.md, "Native routes"). Mounted on
every ``--api``.

Every response carries ``env_id``, ``version`` and ``variant``; every error is
``{"error": {"type", "message"}}`` with a 4xx status (see :mod:`agentenvs.serve.errors`).

``step_batch`` and ``reset_batch`` run many sessions' steps (resets) in one request, in order:
each result is what ``step`` (``reset``) answers for that item, with its HTTP status in
``status``; an item's error (malformed, unknown session, episode over, the environment's crash)
stands in its place and the other items still run. A well-formed batch request, and a plain
``step`` or ``reset``, is answered by :class:`BatchFastPath` ahead of FastAPI's routing and body
validation (a fast step costs less than the routing); every other request to these routes
reaches the FastAPI routes below, which answer the same.
"""

from __future__ import annotations

import asyncio
import email.message
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson
from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from agentenvs.serve.errors import ServeError, error_for, internal_error, malformed
from agentenvs.serve.guard import replay_receive
from agentenvs.serve.service import EnvService, dumps
from agentenvs.serve.sessions import Session

__all__ = ["MAX_BATCH_ITEMS", "PREFIX", "BatchFastPath", "add_native_routes", "native_router"]

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
    return {
        "observation": observation,
        "reward": reward,
        "terminated": terminated,
        "truncated": truncated,
        "info": info,
    }


def _reset_json(result: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    observation, info = result
    return {"observation": observation, "info": info}


def _step_item(raw: Any) -> tuple[str, str]:
    """A step item's (session, action). A plain object of two strings passes without pydantic
    (every turn's path); anything else goes through :class:`StepBody`, which says what is
    wrong or accepts it."""
    if type(raw) is dict and len(raw) == 2:
        session, action = raw.get("session"), raw.get("action")
        if type(session) is str and type(action) is str:
            return session, action
    body = StepBody.model_validate(raw)
    return body.session, body.action


_RESET_KEYS = frozenset(ResetBody.model_fields)


def _reset_item(raw: Any) -> tuple[str, str | None, int | None]:
    """A reset item's (session, task id, seed). An object of those keys with values of their
    types passes without pydantic; anything else goes through :class:`ResetBody`."""
    if type(raw) is dict and raw.keys() <= _RESET_KEYS:
        session, task_id, seed = raw.get("session"), raw.get("task_id"), raw.get("seed")
        if (
            type(session) is str
            and (task_id is None or type(task_id) is str)
            and (seed is None or (type(seed) is int and 0 <= seed <= MAX_SEED))
        ):
            return session, task_id, seed
    body = ResetBody.model_validate(raw)
    return body.session, body.task_id, body.seed


def _batch_operations(service: EnvService) -> dict[str, tuple[str, Callable[[Any], dict]]]:
    """Per batch route, its items' key and what one item answers (the single route's answer
    with ``status`` 200 and the envelope; an item's problem raises)."""
    get, envelope, step, reset = service.store.get, service.envelope, service.step, service.reset

    def step_one(raw: Any) -> dict[str, Any]:
        session_id, action = _step_item(raw)
        session = get(session_id)
        observation, reward, terminated, truncated, info = step(session, action)
        return {
            "observation": observation,
            "reward": reward,
            "terminated": terminated,
            "truncated": truncated,
            "info": info,
            "status": 200,
            **envelope(session),
        }

    def reset_one(raw: Any) -> dict[str, Any]:
        session_id, task_id, seed = _reset_item(raw)
        session = get(session_id)
        observation, info = reset(session, task_id, seed)
        return {"observation": observation, "info": info, "status": 200, **envelope(session)}

    return {"step_batch": ("steps", step_one), "reset_batch": ("resets", reset_one)}


async def _run_batch(
    service: EnvService, items: list[Any], field: str, run_one: Callable[[Any], dict[str, Any]]
) -> list[dict[str, Any]]:
    """``run_one(item)`` for every item, in order: each result is the single route's answer
    with its HTTP ``status``; an item's error is the route's error answer in its place (see the
    module docstring). Every :data:`YIELD_EVERY_S` the batch lets the server answer other
    requests (its health check: a client tells a long batch from a hung server by asking it)."""
    clock = time.monotonic
    due = clock() + YIELD_EVERY_S
    results: list[dict[str, Any]] = []
    append = results.append
    for index, raw in enumerate(items):
        if clock() > due:
            await asyncio.sleep(0)
            due = clock() + YIELD_EVERY_S
        try:
            append(run_one(raw))
        except Exception as exc:  # this item's error only; the batch goes on
            error = _item_error(exc, (field, index))
            append({"status": error.status, **error.to_json(), **service.envelope()})
    return results


def _item_error(exc: Exception, where: tuple[str, int]) -> ServeError:
    if isinstance(exc, ValidationError):
        return malformed(exc.errors(), where)
    mapped = error_for(exc)
    if mapped is not None:
        return mapped
    log.exception("internal error in %s item %d", *where)
    return internal_error(exc)


class BatchFastPath:
    """ASGI middleware: answers ``POST /agentenvs/v1/step_batch`` (``reset_batch``) itself when
    the body is what the route's model accepts in the plain form a client sends, ``{"steps":
    [...]}`` with at most :data:`MAX_BATCH_ITEMS` items, as JSON (orjson parses it; a JSON
    content type or none). Its answer is the route's: the same items run by the same code, the
    same JSON, status and headers. ``POST /agentenvs/v1/step`` and ``/reset`` with a plain body
    (``{"session", "action"}``; ``{"session", "task_id"?, "seed"?}``) are answered the same
    way, errors as the app's handlers answer them. Any other request, a malformed or unusual
    body included, goes on to ``app`` with its body, and FastAPI's route answers it (its 422s
    among them)."""

    def __init__(self, app: Any, service: EnvService) -> None:
        self.app = app
        self.service = service
        self.routes = {f"{PREFIX}/{name}": op for name, op in _batch_operations(service).items()}
        self.single = _single_operations(service)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope["path"] if scope["type"] == "http" else None
        route = self.routes.get(path) if path is not None else None
        if path in self.single and scope["method"] == "POST" and _json_body(scope["headers"]):
            await self._single(scope, receive, send, self.single[path])
            return
        if route is None or scope["method"] != "POST" or not _json_body(scope["headers"]):
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        if body is None:  # the client left: nobody to answer
            return
        field, run_one = route
        items = _batch_items(body, field)
        if items is None:
            await self.app(scope, replay_receive(body, receive), send)
            return
        results = await _run_batch(self.service, items, field, run_one)
        await _answer(send, 200, dumps({"results": results, **self.service.envelope()}))

    async def _single(self, scope: Any, receive: Any, send: Any, run_one: Any) -> None:
        """``/step`` or ``/reset`` with a plain body answered here, as the route answers it;
        any other body goes on to the route (which judges it)."""
        body = await _read_body(receive)
        if body is None:
            return
        try:
            raw = orjson.loads(body)
        except orjson.JSONDecodeError:
            raw = None
        try:
            status, payload = 200, run_one(raw)
        except _NotPlain:
            await self.app(scope, replay_receive(body, receive), send)
            return
        except Exception as exc:  # the route's error answer (app.py's handlers)
            error = error_for(exc)
            if error is None:
                log.exception("internal error on POST %s", scope["path"])
                error = internal_error(exc)
            status, payload = error.status, {**error.to_json(), **self.service.envelope()}
        await _answer(send, status, dumps(payload))


class _NotPlain(Exception):
    """A body the fast path leaves to the route."""


def _single_operations(service: EnvService) -> dict[str, Callable[[Any], dict[str, Any]]]:
    """``/step`` and ``/reset`` on a plain body: the route's answer (raises :class:`_NotPlain`
    for any other body, a client error as the route raises it)."""
    get, envelope, step, reset = service.store.get, service.envelope, service.step, service.reset

    def step_one(raw: Any) -> dict[str, Any]:
        if type(raw) is not dict or len(raw) != 2:
            raise _NotPlain
        session_id, action = raw.get("session"), raw.get("action")
        if type(session_id) is not str or type(action) is not str:
            raise _NotPlain
        session = get(session_id)
        return {**_step_json(step(session, action)), **envelope(session)}

    def reset_one(raw: Any) -> dict[str, Any]:
        if type(raw) is not dict or not raw.keys() <= _RESET_KEYS:
            raise _NotPlain
        try:
            session_id, task_id, seed = _reset_item(raw)
        except ValidationError:
            raise _NotPlain from None
        session = get(session_id)
        return {**_reset_json(reset(session, task_id, seed)), **envelope(session)}

    return {f"{PREFIX}/step": step_one, f"{PREFIX}/reset": reset_one}


async def _read_body(receive: Any) -> bytes | None:
    """The request's body, or None when the client left before sending it."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _answer(send: Any, status: int, payload: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-length", str(len(payload)).encode()),
                (b"content-type", b"application/json"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


def _json_body(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether FastAPI reads a body with these headers as JSON (no content type, or a JSON one:
    ``application/json`` or ``application/*+json``)."""
    for name, value in headers:
        if name == b"content-type":
            if value == b"application/json":
                return True
            message = email.message.Message()
            message["content-type"] = value.decode("latin-1")
            subtype = message.get_content_subtype()
            return message.get_content_maintype() == "application" and (
                subtype == "json" or subtype.endswith("+json")
            )
    return True


def _batch_items(body: bytes, field: str) -> list[Any] | None:
    """The items of a batch body ``{field: [...]}`` (at most :data:`MAX_BATCH_ITEMS`), or None
    for anything else (then the route's validation answers)."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if type(payload) is not dict or len(payload) != 1:
        return None
    items = payload.get(field)
    if type(items) is not list or len(items) > MAX_BATCH_ITEMS:
        return None
    return items


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

    batches = _batch_operations(service)

    @router.post(PREFIX + "/step_batch")
    async def step_batch(body: StepBatchBody) -> Response:
        results = await _run_batch(service, body.steps, *batches["step_batch"])
        return reply({"results": results})

    @router.post(PREFIX + "/reset_batch")
    async def reset_batch(body: ResetBatchBody) -> Response:
        results = await _run_batch(service, body.resets, *batches["reset_batch"])
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
