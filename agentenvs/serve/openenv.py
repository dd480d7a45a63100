"""``--api openenv``: every environment through OpenEnv's server types (the ``openenv``
distribution, 0.10).

OpenEnv serves an ``Environment`` subclass with typed ``Action``, ``Observation`` and ``State``
models through its ``HTTPEnvServer``. Its clients, ``EnvClient`` (typed) and
``GenericEnvClient`` (dicts), and their ``.sync()`` forms, speak WebSocket only: ``/ws`` holds one
environment per connection, and an ``http://`` base URL is turned into ``ws://``. Over HTTP,
``/reset``, ``/step`` and ``/state`` are one-shot (a fresh environment per request); ``/health``,
``/schema``, ``/metadata`` and ``/mcp`` (JSON-RPC) describe the server, which is what
``openenv validate --url`` checks; and the task API lists the tasks: ``/list_environments``,
``/{env_id}/splits``, ``/{env_id}/tasks``, ``/{env_id}/num_tasks``, ``/{env_id}/task`` and
``/{env_id}/task_range``. Here:

* :class:`AgentenvsAction`: ``action`` (the text action);
* :class:`AgentenvsObservation`: ``text``, ``reward``, ``done`` (terminated or truncated),
  ``terminated``, ``truncated`` and ``info`` (our info contract: ``task_id``, ``family``, ``won``,
  ``valid``, ``turn``, ``admissible_actions``, ``fields`` and the environment's own keys);
* :class:`AgentenvsState`: ``episode_id``, ``step_count`` and ``env_id``, ``version``,
  ``variant``, ``task_id``, ``turn``, ``won``, ``terminated``, ``truncated``;
* :class:`AgentenvsEnvClient`: the typed ``EnvClient`` for them (openenv's own client class,
  parameterised as every OpenEnv environment package does).

``reset`` takes ``seed``, ``episode_id`` and a task: ``task_id``, or the task API's ``split``
and ``index`` (the index-th id of ``task_ids(split)``). A task spec is ``{"id", "index",
"family"}``. ``--max-sessions`` is openenv's ``max_concurrent_envs`` and ``--idle-timeout`` its
``session_timeout``. The native routes are mounted on the same app.
"""

from __future__ import annotations

import functools
import time
import uuid
from typing import Any

from fastapi import FastAPI
from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server import (
    Action,
    ConcurrencyConfig,
    Environment,
    HTTPEnvServer,
    Observation,
    State,
)
from openenv.core.env_server.exceptions import SessionCapacityError
from openenv.core.env_server.types import EnvironmentMetadata
from pydantic import Field

from agentenvs.serve.service import EnvService
from agentenvs.serve.sessions import Session

__all__ = [
    "AgentenvsAction",
    "AgentenvsEnvClient",
    "AgentenvsEnvironment",
    "AgentenvsObservation",
    "AgentenvsState",
    "openenv_app",
]


class AgentenvsAction(Action):
    """One text action."""

    action: str = Field(description="the action text, e.g. 'get 1 oak log'")


class AgentenvsObservation(Observation):
    """The observation text and our step record (``done`` is terminated or truncated)."""

    text: str = Field(default="", description="the observation text")
    terminated: bool = Field(default=False, description="the task ended (won or lost)")
    truncated: bool = Field(default=False, description="the turn budget ran out")
    info: dict[str, Any] = Field(default_factory=dict, description="agentenvs' info contract")


class AgentenvsState(State):
    """The episode's state as the environment reports it."""

    env_id: str = ""
    version: str = ""
    variant: dict[str, Any] = Field(default_factory=dict)
    task_id: str | None = None
    turn: int = 0
    won: bool = False
    terminated: bool = False
    truncated: bool = False


class AgentenvsEnvironment(Environment[AgentenvsAction, AgentenvsObservation, AgentenvsState]):
    """One agentenvs environment as an openenv ``Environment`` (one per OpenEnv session)."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session has its own instance, no shared state
    # one thread runs every session's calls (openenv's shared executor): a thread per session
    # would cost thousands of threads at thousands of sessions, and the GIL runs one at a time
    REQUIRES_SINGLE_THREAD_EXECUTOR = True

    def __init__(self, service: EnvService) -> None:
        super().__init__()
        self._service = service
        self._own: Session | None = None  # made on first use: the task API needs none
        self._episode_id: str | None = None
        self._steps = 0
        self._terminated = False
        self._truncated = False

    @property
    def _session(self) -> Session:
        if self._own is None:
            env, kwargs = self._service.store.make_env()
            self._own = Session(f"openenv-{uuid.uuid4().hex}", env, kwargs, time.monotonic())
        return self._own

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        split: str | None = None,
        index: int | None = None,
        **_: Any,
    ) -> AgentenvsObservation:
        if split is not None or index is not None:
            if task_id is not None or split is None or index is None:
                raise ValueError("reset takes task_id, or split and index (the task API's)")
            task_id = self.get_task(split, index)["id"]
        observation, info = self._service.reset(self._session, task_id, seed)
        self._episode_id = episode_id or uuid.uuid4().hex
        self._steps = 0
        self._terminated = self._truncated = False
        return AgentenvsObservation(text=observation, info=info, reward=0.0, done=False)

    def step(
        self, action: AgentenvsAction, timeout_s: float | None = None, **_: Any
    ) -> AgentenvsObservation:
        observation, reward, terminated, truncated, info = self._service.step(
            self._session, action.action
        )
        self._steps += 1
        self._terminated, self._truncated = terminated, truncated
        return AgentenvsObservation(
            text=observation,
            reward=reward,
            done=terminated or truncated,
            terminated=terminated,
            truncated=truncated,
            info=info,
        )

    # On the event loop, as the native routes run: openenv awaits these instead of handing the
    # call to its executor thread (a thread hop costs more than a fast environment's step).
    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        split: str | None = None,
        index: int | None = None,
        **_: Any,
    ) -> AgentenvsObservation:
        return self.reset(seed, episode_id, task_id, split, index)

    async def step_async(
        self, action: AgentenvsAction, timeout_s: float | None = None, **_: Any
    ) -> AgentenvsObservation:
        return self.step(action, timeout_s)

    @property
    def state(self) -> AgentenvsState:
        env = self._session.env
        return AgentenvsState(
            episode_id=self._episode_id,
            step_count=self._steps,
            env_id=env.env_id,
            version=self._service.version,
            variant=env.variant,
            task_id=env.task_id,
            turn=env.turn,
            won=env.won,
            terminated=self._terminated,
            truncated=self._truncated,
        )

    def get_metadata(self) -> EnvironmentMetadata:
        env = self._session.env
        return EnvironmentMetadata(
            name=env.env_id,
            description=(env.__doc__ or env.env_id).strip().splitlines()[0],
            version=self._service.version,
            documentation_url="https://github.com/agentenvs/agentenvs/blob/main/docs/serving.md",
        )

    def close(self) -> None:
        if self._own is not None:
            self._own.env.close()

    # ----- OpenEnv's task API (its TaskProvider protocol) ---------------------------------------

    def list_splits(self) -> list[str]:
        return list(self._service.template.splits)

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        listing = self._service.tasks(split)
        return [
            {"id": task, "index": i, "family": listing["families"][task]}
            for i, task in enumerate(listing["task_ids"])
        ]

    def num_tasks(self, split: str) -> int:
        return len(self._service.tasks(split)["task_ids"])

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        tasks = self.list_tasks(split)
        if not 0 <= index < len(tasks):
            raise IndexError(f"{split} has {len(tasks)} tasks; index {index} is out of range")
        return tasks[index]

    def get_task_range(
        self, split: str, start: int | None = None, stop: int | None = None
    ) -> list[dict[str, Any]]:
        return self.list_tasks(split)[start:stop]


class AgentenvsEnvClient(EnvClient[AgentenvsAction, AgentenvsObservation, AgentenvsState]):
    """openenv's ``EnvClient`` for an ``agentenvs serve --api openenv`` server.

    ``AgentenvsEnvClient(base_url="http://127.0.0.1:8000").sync()`` gives the synchronous
    client; ``reset(task_id=...)``, ``step(AgentenvsAction(action=...))``, ``state()``.
    """

    def _step_payload(self, action: AgentenvsAction) -> dict[str, Any]:
        return {"action": action.action}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[AgentenvsObservation]:
        observation = AgentenvsObservation(
            **payload.get("observation", {}),
            reward=payload.get("reward"),
            done=payload.get("done", False),
        )
        return StepResult(
            observation=observation, reward=payload.get("reward"), done=payload.get("done", False)
        )

    def _parse_state(self, payload: dict[str, Any]) -> AgentenvsState:
        return AgentenvsState(**payload)


def capacity_message(active: int, limit: int) -> str:
    """What a WebSocket refused at ``limit`` sessions reads (openenv's ``CAPACITY_REACHED``)."""
    return (
        f"this server holds its maximum of {limit} sessions ({active} open; --max-sessions "
        f"{limit}); close finished sessions' WebSockets, wait for idle ones to expire "
        "(--idle-timeout), or serve with more --workers or --max-sessions"
    )


class _Server(HTTPEnvServer):
    """openenv's server whose capacity refusal names the limit and what to do."""

    async def _create_session(self) -> tuple[str, Environment]:
        try:
            return await super()._create_session()
        except SessionCapacityError as exc:
            raise SessionCapacityError(
                exc.active_sessions,
                exc.max_sessions,
                capacity_message(exc.active_sessions, exc.max_sessions),
            ) from None

    @property
    def active_sessions(self) -> int:
        """Live WebSocket sessions."""
        return len(self._sessions)


def openenv_app(service: EnvService) -> FastAPI:
    """openenv's HTTPEnvServer routes for the service's environment, on a new FastAPI app."""
    from agentenvs import __version__

    app = FastAPI(title=f"agentenvs serve {service.env_id} (OpenEnv API)", version=__version__)
    server = _Server(
        functools.partial(AgentenvsEnvironment, service),
        AgentenvsAction,
        AgentenvsObservation,
        concurrency_config=ConcurrencyConfig(
            max_concurrent_envs=service.store.max_sessions,
            session_timeout=service.store.idle_timeout,
        ),
        env_name=service.env_id,
        state_cls=AgentenvsState,
    )
    server.register_routes(app)
    service.ws_sessions = lambda: server.active_sessions
    app.state.openenv_server = server
    return app
