"""``--api mcp``: one environment as MCP tools, on the official MCP Python SDK (``mcp`` 1.x).

:func:`mcp_server` returns the SDK's low-level ``Server`` with six tools over an
:class:`~agentenvs.serve.service.EnvService`: ``reset``, ``step``, ``admissible_actions``,
``list_tasks``, ``snapshot`` and ``restore`` (descriptions and schemas:
:mod:`agentenvs.serve.mcp_describe`). The low-level server runs its lifespan once per MCP
session, so each MCP session gets a :class:`SessionSlot` that holds one environment session of
the store: made by the session's first ``reset`` (or ``restore``), under the store's
``max_sessions`` and ``idle_timeout`` like every other API's sessions, and closed when the MCP
session ends (the client's DELETE, the transport's idle timeout, stdio's end of input).

Every mistake is a tool result with ``isError`` and a message that says the fix, never a
protocol error or a dead session: malformed arguments (checked against the input schema here,
with short messages), an unknown task or split, a step before reset or after the episode ended,
an action over the environment's ``max_action_length``, a bad snapshot token, a full server, an
expired session. A ``reset`` after the environment session expired starts a new one.

Transports: :mod:`agentenvs.serve.mcp_http` (streamable HTTP) and :func:`run_stdio`.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread
import jsonschema
import mcp.types as types
from mcp.server.lowlevel import Server

from agentenvs import __version__
from agentenvs.registration import ENVIRONMENTS
from agentenvs.serve.errors import ServeError, error_for
from agentenvs.serve.mcp_describe import (
    DEFAULT_TASK_PAGE,
    ToolSpec,
    server_instructions,
    tool_specs,
)
from agentenvs.serve.service import EnvService, jsonable
from agentenvs.serve.sessions import SessionStore
from agentenvs.serve.settings import DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_SESSIONS
from agentenvs.serve.tokens import server_key

__all__ = ["MCP_API", "SessionSlot", "make_service", "mcp_server", "run_stdio"]

MCP_API = "mcp"
"""The ``--api`` name of this server."""
MAX_ERROR_VALUE = 200
"""Characters of an offending argument a validation message quotes (an action may be 10 kB)."""

log = logging.getLogger("agentenvs.serve.mcp")


def make_service(
    env_id: str,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
    snapshot_key: str | bytes | None = None,
    worker: int = 0,
    workers: int = 1,
) -> EnvService:
    """The session store and service of one MCP server process (the environment's own default
    keywords, overridden by ``env_kwargs``, as OpenEnv's API serves them)."""
    if env_id not in ENVIRONMENTS:
        raise ValueError(f"unknown environment id {env_id!r}; choose from {sorted(ENVIRONMENTS)}")
    store = SessionStore(
        env_id,
        default_kwargs=dict(env_kwargs or {}),
        max_sessions=max_sessions,
        idle_timeout=idle_timeout,
        id_prefix=f"w{worker}-" if workers > 1 else "",
    )
    return EnvService(store, version=__version__, key=server_key(snapshot_key), api=MCP_API)


@dataclass
class SessionSlot:
    """The environment session of one MCP session (``None`` until its first reset/restore)."""

    session_id: str | None = None
    lock: anyio.Lock = field(default_factory=anyio.Lock)


class ToolError(Exception):
    """A tool call that fails: its message becomes the ``isError`` result's text."""


class _Tools:
    """The tool handlers of one server over ``service`` (shared by all its MCP sessions)."""

    def __init__(self, service: EnvService) -> None:
        self.service = service
        template = service.template
        self.counts = _split_sizes(template)
        self.specs: dict[str, ToolSpec] = {t.name: t for t in tool_specs(template, self.counts)}
        self._families: dict[str, list[tuple[str, str]]] = {}

    # ----- dispatch ----------------------------------------------------------------------------

    async def call(self, name: str, arguments: dict[str, Any], slot: SessionSlot) -> Any:
        spec = self.specs.get(name)
        if spec is None:
            raise ToolError(f"unknown tool {name!r}; the tools are {sorted(self.specs)}")
        _check_arguments(spec, arguments)
        handler: Callable[[dict[str, Any], SessionSlot], Any] = getattr(self, f"_{name}")
        async with slot.lock:  # one call at a time per MCP session
            try:
                return await anyio.to_thread.run_sync(handler, arguments, slot)
            except ToolError:
                raise
            except ServeError as exc:
                raise ToolError(_message(exc)) from None
            except Exception as exc:
                mapped = error_for(exc)
                if mapped is None:
                    log.exception("tool %s failed", name)
                    raise ToolError(f"internal error: {type(exc).__name__}: {exc}") from None
                raise ToolError(_message(mapped)) from None

    # ----- the environment session -------------------------------------------------------------

    def _session(self, slot: SessionSlot) -> Any:
        if slot.session_id is None:
            raise ServeError(409, "reset_needed", "")
        return self.service.store.get(slot.session_id)

    def _fresh_session(self, slot: SessionSlot) -> Any:
        """The slot's live session, or a new one (none yet, or the old one expired)."""
        if slot.session_id is not None:
            try:
                return self.service.store.get(slot.session_id)
            except ServeError as exc:
                if exc.type not in ("session_expired", "unknown_session"):
                    raise
        session = self.service.store.create()
        slot.session_id = session.id
        return session

    def close(self, slot: SessionSlot) -> None:
        if slot.session_id is not None:
            try:
                self.service.store.close(slot.session_id)
            except ServeError:  # expired or already closed
                pass
            slot.session_id = None

    # ----- tools -------------------------------------------------------------------------------

    def _reset(self, args: dict[str, Any], slot: SessionSlot) -> dict[str, Any]:
        task_id, seed = self._task_choice(args)
        session = self._fresh_session(slot)
        observation, info = self.service.reset(session, task_id=task_id, seed=seed)
        return self._record(session, observation, 0.0, False, False, info)

    def _task_choice(self, args: dict[str, Any]) -> tuple[str | None, int | None]:
        task_id, split = args.get("task_id"), args.get("split")
        index, seed = args.get("index"), args.get("seed")
        if task_id is not None and (split is not None or index is not None or seed is not None):
            raise ToolError("give task_id alone, or split with index or seed, or seed alone")
        if index is not None and (split is None or seed is not None):
            raise ToolError("index needs split (and no seed): the index-th task of that split")
        if split is None:
            return task_id, seed
        ids = self.service.template.task_ids(split)
        if index is None:
            index = random.Random(seed).randrange(len(ids))
        if index >= len(ids):
            raise ToolError(f"split {split!r} has {len(ids)} tasks; index must be below that")
        return ids[index], None

    def _step(self, args: dict[str, Any], slot: SessionSlot) -> dict[str, Any]:
        session = self._session(slot)
        result = self.service.step(session, args["action"])
        return self._record(
            session,
            result.observation,
            result.reward,
            result.terminated,
            result.truncated,
            result.info,
        )

    def _admissible_actions(self, args: dict[str, Any], slot: SessionSlot) -> dict[str, Any]:
        env = self._session(slot).env
        return {"admissible_actions": env.admissible_actions(), "turn": env.turn}

    def _list_tasks(self, args: dict[str, Any], slot: SessionSlot) -> dict[str, Any]:
        split = args.get("split", "test" if "test" in self.counts else next(iter(self.counts)))
        rows = self._families.get(split)
        if rows is None:
            template = self.service.template
            rows = self._families[split] = [
                (t, template.family(t)) for t in template.task_ids(split)
            ]
        if "family" in args:
            rows = [r for r in rows if r[1] == args["family"]]
        offset = args.get("offset", 0)
        page = rows[offset : offset + args.get("limit", DEFAULT_TASK_PAGE)]
        return {
            "split": split,
            "total": len(rows),
            "offset": offset,
            "tasks": [{"task_id": t, "family": f} for t, f in page],
        }

    def _snapshot(self, args: dict[str, Any], slot: SessionSlot) -> dict[str, Any]:
        session = self._session(slot)
        if session.env.task_id is None:
            raise ServeError(409, "reset_needed", "")
        token = self.service.snapshot(session)
        return {"snapshot": token, "task_id": session.env.task_id, "turn": session.env.turn}

    def _restore(self, args: dict[str, Any], slot: SessionSlot) -> dict[str, Any]:
        session = self._fresh_session(slot)
        session, observation, info = self.service.restore(args["snapshot"], session.id)
        env = session.env
        # a restored state that is over: terminated unless the turn budget ended it
        terminated = env.done and (env.won or env.turn < env.max_turns)
        truncated = env.done and not terminated
        return self._record(session, observation, 0.0, terminated, truncated, info)

    def _record(
        self,
        session: Any,
        observation: str,
        reward: float,
        terminated: bool,
        truncated: bool,
        info: dict[str, Any],
    ) -> dict[str, Any]:
        env = session.env
        return {
            "observation": observation,
            "reward": reward,
            "terminated": bool(terminated),
            "truncated": bool(truncated),
            "done": bool(terminated or truncated),
            "won": bool(info.get("won", False)),
            "valid": bool(info.get("valid", True)),
            "turn": int(info.get("turn", env.turn)),
            "max_turns": env.max_turns,
            "task_id": str(info.get("task_id", env.task_id)),
            "family": str(info.get("family", "")),
            "admissible_actions": info.get("admissible_actions"),
            "info": jsonable_tree(info),
        }


def _split_sizes(template: Any) -> dict[str, int]:
    """Each split's task count; a split whose tasks cannot be listed here (e.g. data not
    downloaded) is left out, so the tools neither offer nor accept it."""
    sizes = {}
    for split in template.splits:
        try:
            sizes[split] = len(template.task_ids(split))
        except Exception as exc:
            log.warning("%s: split %r left out of the MCP tools: %s", template.env_id, split, exc)
    return sizes


def jsonable_tree(value: Any) -> Any:
    """``value`` with every leaf JSON can hold (tuples as lists; others via ``jsonable``)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable_tree(v) for v in value]
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    return jsonable_tree(jsonable(value))


_REWRITES = {
    "reset_needed": "no episode is running in this session: call reset first",
    "episode_over": "the episode is over: call reset to start another, or restore a snapshot",
    "session_expired": "this session's environment was closed after {idle} s without a call "
    "(--idle-timeout): call reset to start a new episode, or restore a snapshot",
    "session_limit": "the server holds its maximum of {max} environment sessions "
    "(--max-sessions): try again later, or close other MCP sessions",
}


def _message(exc: ServeError) -> str:
    """The tool error text of a service error, its HTTP route hints replaced by tool names."""
    rewrite = _REWRITES.get(exc.type)
    if rewrite is None:
        return f"{exc.type}: {exc.message}"
    return f"{exc.type}: " + rewrite.format(idle="the idle timeout's", max="its")


def _check_arguments(spec: ToolSpec, arguments: dict[str, Any]) -> None:
    """Validate against the tool's input schema, with a short message naming the field."""
    validator = jsonschema.Draft202012Validator(spec.input_schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    if error is None:
        return
    where = ".".join(str(p) for p in error.absolute_path) or "arguments"
    if error.validator == "maxLength":
        text = f"{len(error.instance)} characters; at most {error.validator_value}"
    elif error.validator == "additionalProperties":
        allowed = sorted(spec.input_schema.get("properties", {}))
        text = f"{error.message.split(' (')[0]}; {spec.name} takes {allowed}"
    else:
        text = error.message
        if len(text) > MAX_ERROR_VALUE:
            text = text[:MAX_ERROR_VALUE] + "..."
    raise ToolError(f"bad_arguments: {where}: {text}")


def _text(name: str, payload: dict[str, Any]) -> str:
    """What a model reads: the observation (and the episode's end), or the payload's facts."""
    if "observation" in payload:
        text = payload["observation"]
        if payload["done"]:
            how = "won" if payload["won"] else "lost" if payload["terminated"] else "out of turns"
            text += (
                f"\n\n[episode over: {how}, reward {payload['reward']:g}; call reset to play again]"
            )
        return text
    if name == "admissible_actions":
        actions = payload["admissible_actions"]
        return "\n".join(actions) if actions is not None else "(this environment lists none)"
    if name == "snapshot":
        return payload["snapshot"]
    rows = [f"{t['task_id']}\t{t['family']}" for t in payload["tasks"]]
    head = f"{payload['split']}: tasks {payload['offset']}..{payload['offset'] + len(rows)}"
    return "\n".join([f"{head} of {payload['total']}", *rows])


def _error_result(message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], isError=True
    )


def mcp_server(service: EnvService) -> Server[SessionSlot, Any]:
    """The MCP server of ``service``'s environment (one :class:`SessionSlot` per MCP session)."""
    tools = _Tools(service)

    @asynccontextmanager
    async def per_session(_: Server[SessionSlot, Any]) -> AsyncIterator[SessionSlot]:
        slot = SessionSlot()
        try:
            yield slot
        finally:
            tools.close(slot)

    server: Server[SessionSlot, Any] = Server(
        f"agentenvs {service.env_id}",
        version=__version__,
        instructions=server_instructions(service.template, tools.counts),
        lifespan=per_session,
    )
    listed = [
        types.Tool(
            name=s.name,
            description=s.description,
            inputSchema=s.input_schema,
            outputSchema=s.output_schema,
        )
        for s in tools.specs.values()
    ]

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return listed

    @server.call_tool(validate_input=False)  # checked in _Tools.call, with shorter messages
    async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        slot = server.request_context.lifespan_context
        try:
            payload = await tools.call(name, dict(arguments or {}), slot)
        except ToolError as exc:
            return _error_result(str(exc))
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=_text(name, payload))],
            structuredContent=payload,
            isError=False,
        )

    server.agentenvs_tools = tools  # type: ignore[attr-defined]  (tests read the counts)
    return server


async def run_stdio(service: EnvService) -> None:
    """Serve one MCP session over this process's stdin/stdout until the client closes it."""
    from mcp.server.stdio import stdio_server

    server = mcp_server(service)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
    service.store.close_all()
