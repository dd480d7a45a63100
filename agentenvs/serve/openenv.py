"""``--api openenv``: every environment through openenv-core's server types.

openenv-core (0.3.0, meta-pytorch/OpenEnv) serves an ``Environment`` subclass with typed
``Action``, ``Observation`` and ``State`` models through its ``HTTPEnvServer``: the WebSocket
``/ws`` holds one environment per connection (what ``EnvClient`` and its ``.sync()`` client use),
the HTTP ``/reset`` and ``/step`` are one-shot (a fresh environment per request), and ``/health``,
``/schema``, ``/metadata``, ``/state`` describe it. Here:

* :class:`AgentenvsAction`: ``action`` (the text action);
* :class:`AgentenvsObservation`: ``text``, ``reward``, ``done`` (terminated or truncated),
  ``terminated``, ``truncated`` and ``info`` (our info contract: ``task_id``, ``family``, ``won``,
  ``valid``, ``turn``, ``admissible_actions``, ``fields`` and the environment's own keys);
* :class:`AgentenvsState`: ``episode_id``, ``step_count`` and ``env_id``, ``version``,
  ``variant``, ``task_id``, ``turn``, ``won``, ``terminated``, ``truncated``;
* :class:`AgentenvsEnvClient`: the typed ``EnvClient`` for them (openenv's own client class,
  parameterised as every OpenEnv environment package does).

``reset`` takes ``seed``, ``episode_id`` and ``task_id``. ``--max-sessions`` is openenv's
``max_concurrent_envs`` and ``--idle-timeout`` its ``session_timeout``. The native routes are
mounted on the same app.
"""

from __future__ import annotations

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

    def __init__(self, service: EnvService) -> None:
        super().__init__()
        self._service = service
        env, kwargs = service.store.make_env()
        self._session = Session(f"openenv-{uuid.uuid4().hex}", env, kwargs, time.monotonic())
        self._episode_id: str | None = None
        self._steps = 0
        self._terminated = False
        self._truncated = False

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        **_: Any,
    ) -> AgentenvsObservation:
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
        return AgentenvsObservation(text=observation, reward=reward,
                                    done=terminated or truncated, terminated=terminated,
                                    truncated=truncated, info=info)

    @property
    def state(self) -> AgentenvsState:
        env = self._session.env
        return AgentenvsState(
            episode_id=self._episode_id, step_count=self._steps, env_id=env.env_id,
            version=self._service.version, variant=env.variant, task_id=env.task_id,
            turn=env.turn, won=env.won, terminated=self._terminated, truncated=self._truncated,
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
        self._session.env.close()


class AgentenvsEnvClient(EnvClient[AgentenvsAction, AgentenvsObservation, AgentenvsState]):
    """openenv's ``EnvClient`` for an ``agentenvs serve --api openenv`` server.

    ``AgentenvsEnvClient(base_url="http://127.0.0.1:8000").sync()`` gives the synchronous
    client; ``reset(task_id=...)``, ``step(AgentenvsAction(action=...))``, ``state()``.
    """

    def _step_payload(self, action: AgentenvsAction) -> dict[str, Any]:
        return {"action": action.action}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[AgentenvsObservation]:
        observation = AgentenvsObservation(
            **payload.get("observation", {}), reward=payload.get("reward"),
            done=payload.get("done", False))
        return StepResult(observation=observation, reward=payload.get("reward"),
                          done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> AgentenvsState:
        return AgentenvsState(**payload)


def openenv_app(service: EnvService) -> FastAPI:
    """openenv's HTTPEnvServer routes for the service's environment, on a new FastAPI app."""
    from agentenvs import __version__

    app = FastAPI(title=f"agentenvs serve {service.env_id} (OpenEnv API)", version=__version__)
    server = HTTPEnvServer(
        lambda: AgentenvsEnvironment(service),
        AgentenvsAction,
        AgentenvsObservation,
        concurrency_config=ConcurrencyConfig(
            max_concurrent_envs=service.store.max_sessions,
            session_timeout=service.store.idle_timeout,
        ),
    )
    server.register_routes(app)
    app.state.openenv_server = server
    return app
