"""One environment in a session on an ``agentenvs serve`` server, as a local environment object.

:class:`HttpEnv` does what replay validation (:class:`agentenvs.replay.validate.TrajectoryReplayer`)
asks of a :class:`~agentenvs.core.TextEnv` over the server's native routes
(``/agentenvs/v1/sessions|reset|step|snapshot|restore``, docs/serving.md): ``reset``, ``step``,
``snapshot``, ``restore`` and the ``observation``, ``turn``, ``done`` they leave. ``match`` (and
any other pure function of text) is the local environment's, of the same id and variant: the
session is made with the local environment's variant keywords and its variant is checked.

The server's answers about the environment come back as the environment's own exceptions
(``unknown_task`` -> :class:`~agentenvs.core.UnknownTaskError`, ``episode_over`` ->
:class:`~agentenvs.core.EpisodeOverError`, ...), with the server's message, so an error is the
same text as in process. A server that cannot make the environment, or makes another id or
variant, is an :class:`~agentenvs.agents.envworkers.pool.EnvWorkerError`. A server that dies
(connection refused or reset, a 5xx, a lost session, no answer within ``timeout_s``) sets
:attr:`HttpEnv.lost` and raises :class:`ServerLost`; every later call raises it at once, without
a request. The session's requests carry the caller's bearer token (the ``client``'s headers,
:func:`~agentenvs.agents.envworkers.http_transport.auth_headers`); a 401 is
:class:`~agentenvs.agents.envworkers.http_transport.AuthError`, which says how to pass it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentenvs.agents.envworkers.http_transport import (
    API_PREFIX,
    _EnvError,
    _Refused,
    _ServerGone,
    answer_json,
    step_tuple,
    variant_kwargs,
)
from agentenvs.agents.envworkers.pool import DEFAULT_ENV_TIMEOUT_S, EnvWorkerError
from agentenvs.core import (
    EpisodeOverError,
    ResetNeededError,
    SnapshotError,
    UnknownSplitError,
    UnknownTaskError,
)

__all__ = ["HttpEnv", "RemoteSnapshot", "ServerLost"]

# the server's error types (agentenvs/serve/errors.py) -> the environment's exceptions
_ERRORS: dict[str, type[Exception]] = {
    "unknown_task": UnknownTaskError,
    "unknown_split": UnknownSplitError,
    "episode_over": EpisodeOverError,
    "reset_needed": ResetNeededError,
    "snapshot_mismatch": SnapshotError,
}


class ServerLost(RuntimeError):
    """The environment's server is dead or has forgotten its session: the state is lost."""


@dataclass(frozen=True)
class RemoteSnapshot:
    """A state on a server: the opaque token it gave and what the state shows here."""

    token: str
    observation: str
    turn: int
    done: bool


class HttpEnv:
    """An environment in one session on ``url`` (see the module docstring).

    ``local``: an environment made here with ``env_kwargs`` (its ``match`` is used and its
    variant is the one the session must have). ``client`` and ``httpx``: an ``httpx.Client`` (with
    the run's bearer token in its headers, if any) and the module (shared by the caller's
    environments). ``timeout_s`` (None: wait for ever): the
    deadline of each request.
    """

    def __init__(
        self,
        url: str,
        env_id: str,
        env_kwargs: dict[str, Any],
        local: Any,
        client: Any,
        httpx: Any,
        timeout_s: float | None = DEFAULT_ENV_TIMEOUT_S,
    ) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.env_id = env_id
        self.local = local
        self._client = client
        self._httpx = httpx
        self.lost: str | None = None
        self.observation = ""
        self.turn = 0
        self.done = False
        variant = dict(local.variant)
        create = {**variant_kwargs(env_id, variant), **env_kwargs}
        try:
            body = self._post("sessions", {"env_kwargs": create})
        except (_Refused, _EnvError) as exc:
            raise EnvWorkerError(
                f"agentenvs server {url} cannot make {env_id} with {create}: {exc}"
            ) from None
        self.session = str(body["session"])
        if body.get("env_id") != env_id:
            raise EnvWorkerError(
                f"{url} serves {body.get('env_id')}, this run needs {env_id}: list servers of "
                f"{env_id} (`agentenvs serve {env_id}`)"
            )
        if body.get("variant") != variant:
            raise EnvWorkerError(
                f"agentenvs server {url} makes {env_id} with {create} as variant "
                f"{body.get('variant')}, this client as {variant}: the same agentenvs "
                "installation is needed on both sides"
            )

    # ----- the environment --------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"task_id": (options or {}).get("task_id")}
        if seed is not None:
            body["seed"] = seed
        answer = self._call("reset", body)
        self.observation, self.turn, self.done = answer["observation"], 0, False
        return answer["observation"], answer["info"]

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        answer = self._call("step", {"action": action})
        self.observation = answer["observation"]
        self.turn += 1
        self.done = bool(answer["terminated"] or answer["truncated"])
        return step_tuple(answer)

    def snapshot(self) -> RemoteSnapshot:
        token = self._call("snapshot", {})["snapshot"]
        return RemoteSnapshot(token, self.observation, self.turn, self.done)

    def restore(self, snapshot: RemoteSnapshot) -> tuple[str, dict[str, Any]]:
        answer = self._call("restore", {"snapshot": snapshot.token})
        self.observation, self.turn, self.done = (
            answer["observation"],
            snapshot.turn,
            snapshot.done,
        )
        return answer["observation"], answer["info"]

    def match(self, expected: str, actual: str) -> Any:
        return self.local.match(expected, actual)

    def close(self) -> None:
        if self.lost is None:
            try:
                self._post("close", {"session": self.session}, timeout=5.0)
            except Exception:  # best effort: the server may be gone already
                pass

    # ----- requests ---------------------------------------------------------------------

    def _call(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        """``route`` on this session; the environment's exception for a 4xx about it."""
        try:
            return self._post(route, {**body, "session": self.session})
        except _EnvError as exc:
            kind, _, message = str(exc).partition(": ")
            error = _ERRORS.get(kind)
            if error is None:
                raise
            raise error(message) from None

    def _post(self, route: str, body: dict[str, Any], timeout: float | None = None) -> dict:
        if self.lost is not None:
            raise ServerLost(self.lost)
        address = f"{self.url}{API_PREFIX}/{route}"
        deadline = self.timeout_s if timeout is None else timeout
        try:
            return answer_json(
                self._httpx,
                self.env_id,
                self.url,
                route,
                lambda: self._client.post(address, json=body, timeout=deadline),
                "authorization" in self._client.headers,
            )
        except _ServerGone as gone:
            self.lost = f"agentenvs server {self.url} {gone}"
            raise ServerLost(self.lost) from None
