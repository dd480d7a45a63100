"""Environments on remote ``agentenvs serve`` servers (``http://HOST:PORT[,http://HOST2:PORT]``).

Each listed server is one worker of a :class:`~agentenvs.agents.envworkers.pool.RemotePool`: slot
``s`` (an episode in flight) lives in a session on worker ``s % servers`` for the whole episode
(sticky), so the episodes spread over the list. The pool speaks the server's native routes
(``/agentenvs/v1/...``, docs/serving.md): a session per slot, made with the rollout's environment
keywords (the protocol's variant and the turn budget) in its create body and reused by the
slot's later episodes; ``reset``, ``step``, and ``replay`` (a task id and an action list in one
request) for cut starts. The requests of a batch run concurrently, one per slot.

A server that dies (its connection is refused or reset, it answers 5xx, it has forgotten a
session, or it gives no answer within ``step_timeout_s`` per item) is a dead worker: the pool
moves that worker to the next server of the list that answers its health check, and retries
each episode that lived there once, exactly, by replaying the episode's reset and steps there in
one ``replay`` request and checking every result against the original one (the
:class:`~agentenvs.agents.envworkers.pool.RemotePool` contract). Episodes already finished are
never touched. With no server left, the run stops with
:class:`~agentenvs.agents.envworkers.pool.EnvWorkerError` (an evaluation's finished episodes are
already in its file). Environment errors (an unknown task, a cut that is not reached) are the
item's :class:`~agentenvs.agents.envworkers.host.EnvFailure`, as in process.

Scripted policies that act from state (the expert, the random agent) act on a local mirror of
each episode: the pool replays the episode's reset and steps into an environment of this
process before each ``act`` and checks the mirror reaches the server's observations (the
server's environment object does not travel over HTTP). The mirror costs one local step per
step; language-model policies need no mirror.

At start every server must answer ``GET /agentenvs/v1/health`` and serve the same environment
id with the same agentenvs version as this client, and the environment keywords must make the
same variant there as here; otherwise :class:`EnvWorkerError` names the server, what differs and
how to start a matching one (``agentenvs serve ENV_ID --api agentgym --port P``).
"""

from __future__ import annotations

import concurrent.futures as cf
import traceback
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from agentenvs.agents.envworkers.host import CutStateError, EnvFailure, EnvHost, slot_of
from agentenvs.agents.envworkers.pool import EnvWorkerError, RemotePool, WorkerDied

__all__ = ["API_PREFIX", "DEFAULT_START_TIMEOUT_S", "HttpPool", "normalize_server_url"]

API_PREFIX = "/agentenvs/v1"
DEFAULT_START_TIMEOUT_S = 30.0
_GONE_STATUSES = (404, 410)  # the server no longer has the session: its environment is lost


class _ServerGone(Exception):
    """A request found its server dead, or without the session (the message says which)."""

    def __init__(self, message: str, session_lost: bool = False) -> None:
        super().__init__(message)
        self.session_lost = session_lost


class _Refused(Exception):
    """The server answered with an error that is not the environment's (e.g. no free session)."""


def normalize_server_url(text: str) -> str:
    """``http(s)://HOST[:PORT]`` without a trailing slash; ValueError for anything else."""
    url = text.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{text!r} is not a server URL (http://HOST:PORT)")
    if parts.path or parts.query or parts.fragment:
        raise ValueError(f"{text!r}: give the server's root, http://HOST:PORT, without a path")
    try:
        parts.port  # noqa: B018 (raises for a malformed port)
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None
    return url


def _serve_command(env_id: str, url: str) -> str:
    port = urlsplit(url).port or 8000
    return f"agentenvs serve {env_id} --api agentgym --port {port}"


def _import_httpx() -> Any:
    try:
        import httpx
    except ImportError as exc:
        raise EnvWorkerError(
            "environments on remote servers need httpx: pip install 'agentenvs[serve]'"
        ) from exc
    return httpx


class HttpPool(RemotePool):
    """Environments in sessions on ``agentenvs serve`` servers (see the module docstring).

    ``urls``: the servers (``http://HOST:PORT``), one worker each. ``step_timeout_s`` (None: wait
    forever) bounds each request to that many seconds per operation; ``start_timeout_s`` the
    health checks and session creation at start.
    """

    kind = "http"

    def __init__(
        self,
        env_id: str,
        urls: Sequence[str],
        env_kwargs: dict[str, Any] | None = None,
        *,
        step_timeout_s: float | None = None,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
    ) -> None:
        urls = [normalize_server_url(u) for u in urls]
        if not urls:
            raise ValueError("an http pool needs at least one server URL")
        if len(set(urls)) != len(urls):
            raise ValueError(f"a server is listed twice in {urls}")
        super().__init__(env_id, len(urls), env_kwargs, None, step_timeout_s)
        self.urls = urls
        self.start_timeout_s = start_timeout_s
        httpx = _import_httpx()
        self._httpx = httpx
        self._client = httpx.Client(
            timeout=httpx.Timeout(step_timeout_s, connect=start_timeout_s),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
        )
        self._executor = cf.ThreadPoolExecutor(
            max_workers=64 * len(urls), thread_name_prefix="agentenvs-http-env"
        )
        self._server: list[str] = list(urls)  # worker index -> the server it uses now
        self._sessions: dict[int, tuple[str, str]] = {}  # slot -> (server, session id)
        # scripted policies' mirrors and cut-state matching (a slot's environment on first use)
        self._local = EnvHost(self.env_id, self.env_kwargs)
        self._seen: dict[int, list[tuple]] = {}  # slot -> the server's results, log-aligned
        self._mirrored: dict[int, int] = {}  # slot -> log operations applied to its mirror
        try:
            self._variant = self._local_variant()
            # the server's API may default other variant keywords (AgentGym's ALFWorld): pin the
            # ones this client makes, so that the server makes the same environment as here
            self._create_kwargs = {**self._variant_kwargs(), **self.env_kwargs}
            for url in urls:
                self._check_server(url)
        except BaseException:
            self._close_transport()
            raise

    @property
    def servers(self) -> list[str]:
        """The server each worker uses now, by index (a dead one's worker has moved on)."""
        return list(self._server)

    def __repr__(self) -> str:
        return f"HttpPool({self.env_id!r}, servers={self._server})"

    # ----- scripted policies act on local mirrors ------------------------------------------

    def act(self, policy: Any, items: Sequence[tuple[int, str]]) -> list[Any]:
        ref = self._policy_ref(policy)
        results: list[Any] = []
        for slot, key in items:
            log = self._logs.get(slot)
            if log is not None and log.lost is not None:
                results.append(EnvFailure(log.lost, worker_lost=True))
                continue
            problem = self._sync_mirror(slot)
            if problem is not None:
                results.append(EnvFailure(problem))
                continue
            results.append(self._local.run("act", [(ref, slot, key)])[0])
        return results

    def end(self, policy: Any, items: Sequence[tuple[int, str]]) -> None:
        ref = self._policy_ref(policy)
        self._local.run("end", [(ref, slot, key) for slot, key in items])

    def release(self, slot: int) -> list[str]:
        self._seen.pop(slot, None)
        self._mirrored.pop(slot, None)
        return super().release(slot)

    def close(self) -> None:
        if self._closed:
            return
        try:
            super().close()
        finally:
            self._close_transport()

    def _sync_mirror(self, slot: int) -> str | None:
        """Bring the slot's mirror to the server's state; a problem as text, else None."""
        log = self._logs.get(slot)
        if log is None:
            return f"slot {slot} has no episode (reset it first)"
        done = self._mirrored.get(slot, 0)
        operations = log.operations[done:]
        if not operations:
            return None
        answers = self._local.replay(operations)
        seen = self._seen[slot][done:]
        for n, (answer, expected) in enumerate(zip(answers, seen, strict=True), start=done):
            if isinstance(answer, EnvFailure) or _comparable(answer) != expected:
                self._mirrored.pop(slot, None)
                got = answer.error if isinstance(answer, EnvFailure) else repr(answer[0])
                return (
                    f"the local copy of the episode that the scripted policy acts on differs "
                    f"from the server's ({self._server[self.worker_of(slot)]}) after operation "
                    f"{n}: {got} here, {expected[0]!r} there (same agentenvs version and "
                    "environment data on both?)"
                )
        self._mirrored[slot] = done + len(operations)
        return None

    def _record(self, op: str, item: tuple, result: Any) -> None:
        super()._record(op, item, result)
        slot = slot_of(op, item)
        if op == "reset":
            self._seen[slot] = [_comparable(result)]
            self._mirrored.pop(slot, None)
        elif op == "step" and slot in self._seen:
            self._seen[slot].append(_comparable(result))

    # ----- the transport -----------------------------------------------------------------------

    def _start_worker(self, index: int) -> None:
        """Move worker ``index`` to the next server of the list that is healthy."""
        n = len(self.urls)
        start = self.urls.index(self._server[index]) + 1
        problems = []
        for k in range(n):
            url = self.urls[(start + k) % n]
            try:
                self._check_health(url)
            except EnvWorkerError as exc:
                problems.append(str(exc))
                continue
            self._server[index] = url
            return
        raise EnvWorkerError("no server is left: " + "; ".join(problems))

    def _submit(self, index: int, op: str, items: list[tuple]) -> Any:
        url = self._server[index]
        return [self._executor.submit(self._apply, url, op, item) for item in items]

    def _collect(self, index: int, ticket: Any, timeout: float | None) -> list[Any]:
        done, waiting = cf.wait(ticket, timeout=timeout)
        if waiting:
            for future in waiting:
                future.cancel()
            raise WorkerDied(
                f"agentenvs server {self._server[index]} (worker {index}) gave no answer within "
                f"{timeout:.0f} s"
            )
        results = []
        for future in ticket:
            try:
                results.append(future.result())
            except _ServerGone as gone:
                raise WorkerDied(f"agentenvs server {self._server[index]} {gone}") from None
            except _Refused as refused:
                raise EnvWorkerError(str(refused)) from None
        return results

    def _stop_worker(self, index: int, kill: bool) -> None:
        url = self._server[index]
        slots = [s for s, (server, _) in self._sessions.items() if server == url]
        for slot in slots:
            if self.worker_of(slot) != index:
                continue
            _, session = self._sessions.pop(slot)
            if not kill:  # a clean close; a dead server's sessions died with it
                try:
                    self._client.post(
                        f"{url}{API_PREFIX}/close", json={"session": session}, timeout=5.0
                    )
                except Exception:  # best effort: the server may be gone already
                    pass

    def _close_transport(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._client.close()
        self._local.close()

    # ----- one operation on one server ---------------------------------------------------------

    def _apply(self, url: str, op: str, item: tuple) -> Any:
        """Run one item; an environment error is its :class:`EnvFailure`."""
        try:
            if op == "replay":
                return self._replay_on(url, item[0])
            if op == "reset":
                return self._reset(url, *item)
            if op == "step":
                slot, action = item
                return self._step(url, slot, action)
            raise ValueError(f"an http pool does not run {op!r} on its servers")
        except (_ServerGone, _Refused):
            raise
        except _EnvError as exc:  # the server's answer about the environment (unknown task...)
            return EnvFailure(str(exc))
        except Exception as exc:  # the environment's, as in process
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            return EnvFailure(detail)

    def _reset(
        self,
        url: str,
        slot: int,
        task_id: str,
        prefix_actions: Sequence[str] = (),
        cut_observation: str | None = None,
    ) -> tuple[str, dict[str, Any]]:
        if not prefix_actions and cut_observation is None:
            body = self._call_session(url, slot, "reset", {"task_id": task_id})
            return body["observation"], body["info"]
        body = self._call_session(
            url, slot, "replay", {"task_id": task_id, "actions": list(prefix_actions)}
        )
        steps = body["steps"]
        last = steps[-1] if steps else body["reset"]
        reached, info = last["observation"], last["info"]
        if cut_observation is not None and reached != cut_observation:
            if not self._local.env(slot).match(cut_observation, reached):
                raise CutStateError(
                    f"replaying {len(prefix_actions)} prefix actions of {task_id} reaches "
                    f"{reached!r}, not the recorded cut observation {cut_observation!r}"
                )
        if steps and (last["terminated"] or last["truncated"]):
            raise CutStateError(
                f"the episode of {task_id} is over at the cut (after {len(prefix_actions)} "
                "prefix actions): nothing is left to play"
            )
        return reached, info

    def _step(self, url: str, slot: int, action: str) -> tuple:
        body = self._call_session(url, slot, "step", {"action": action}, create=False)
        return (
            body["observation"],
            body["reward"],
            body["terminated"],
            body["truncated"],
            body["info"],
        )

    def _replay_on(self, url: str, operations: list[tuple[str, tuple]]) -> list[Any]:
        """A slot's episode (its reset, then steps) on ``url``, in a new session; one result per
        operation. One ``replay`` request when it can run in one, else one request each."""
        op, item = operations[0]
        slot = slot_of(op, item)
        self._sessions.pop(slot, None)  # its session died with its old server
        if op != "reset" or any(o != "step" for o, _ in operations[1:]):
            return [self._apply(url, o, i) for o, i in operations]
        task_id = item[1]
        prefix = list(item[2]) if len(item) > 2 else []
        cut_observation = item[3] if len(item) > 3 else None
        actions = prefix + [i[1] for _, i in operations[1:]]
        try:
            body = self._call_session(url, slot, "replay", {"task_id": task_id, "actions": actions})
        except _EnvError:  # an operation fails: find which, one request each
            return [self._apply(url, o, i) for o, i in operations]
        steps = body["steps"]
        if prefix:
            last = steps[len(prefix) - 1]
            reached = (last["observation"], last["info"])
            missed = cut_observation is not None and reached[0] != cut_observation
            if (missed and not self._local.env(slot).match(cut_observation, reached[0])) or (
                last["terminated"] or last["truncated"]
            ):  # the cut start fails: the per-operation path gives its error
                return [self._apply(url, o, i) for o, i in operations]
        else:
            reached = (body["reset"]["observation"], body["reset"]["info"])
        answers: list[Any] = [reached]
        for step in steps[len(prefix) :]:
            answers.append(
                (
                    step["observation"],
                    step["reward"],
                    step["terminated"],
                    step["truncated"],
                    step["info"],
                )
            )
        return answers

    # ----- requests ------------------------------------------------------------------------------

    def _call_session(
        self, url: str, slot: int, route: str, body: dict[str, Any], create: bool = True
    ) -> dict[str, Any]:
        """``route`` for the slot's session on ``url`` (made on first use when ``create``)."""
        held = self._sessions.get(slot)
        if held is None or held[0] != url:
            if not create:
                raise _ServerGone(f"has no session for slot {slot} (its episode was not reset)")
            held = self._hold(url, slot)
        try:
            return self._post(url, route, {**body, "session": held[1]})
        except _ServerGone as gone:
            if not (create and gone.session_lost):
                raise
        # a session that expired between episodes: a new one for this reset
        return self._post(url, route, {**body, "session": self._hold(url, slot)[1]})

    def _hold(self, url: str, slot: int) -> tuple[str, str]:
        """A new session on ``url`` for ``slot``, kept unless the slot's worker has moved off
        ``url`` meanwhile (a request that outlived its deadline must not take the slot back)."""
        held = (url, self._new_session(url))
        if self._server[self.worker_of(slot)] != url:
            raise _ServerGone(f"was left by worker {self.worker_of(slot)} during this request")
        self._sessions[slot] = held
        return held

    def _new_session(self, url: str) -> str:
        try:
            body = self._post(url, "sessions", {"env_kwargs": self._create_kwargs})
        except _EnvError as exc:
            if exc.status == 429:
                raise _Refused(
                    f"agentenvs server {url} has no free session ({exc}); this run keeps one "
                    "session per episode in flight: start the server with a larger "
                    "--max-sessions, add servers, or lower --max-active"
                ) from None
            raise _Refused(
                f"agentenvs server {url} cannot make {self.env_id} with {self._create_kwargs}: "
                f"{exc}"
            ) from None
        return str(body["session"])

    def _post(self, url: str, route: str, body: dict[str, Any]) -> dict[str, Any]:
        address = f"{url}{API_PREFIX}/{route}"
        return self._answer(url, route, lambda: self._client.post(address, json=body))

    def _answer(self, url: str, route: str, send: Any) -> dict[str, Any]:
        return answer_json(self._httpx, self.env_id, url, route, send)

    # ----- start-up checks -----------------------------------------------------------------------

    def _local_variant(self) -> dict[str, Any]:
        from agentenvs.registration import env_class

        env = env_class(self.env_id)(**self.env_kwargs)
        try:
            return dict(env.variant)
        finally:
            env.close()

    def _variant_kwargs(self) -> dict[str, Any]:
        """The variant's keywords that the environment's constructor takes."""
        return variant_kwargs(self.env_id, self._variant)

    def _check_health(self, url: str) -> dict[str, Any]:
        """The server's health answer, checked: same env id and agentenvs version."""
        return check_health(self._client, self._httpx, url, self.env_id, self.start_timeout_s)

    def _check_server(self, url: str) -> None:
        """Health, then one session with this run's environment keywords: its variant must be
        the one they make here."""
        self._check_health(url)
        try:
            body = self._post(url, "sessions", {"env_kwargs": self._create_kwargs})
        except (_ServerGone, _Refused, _EnvError) as exc:
            raise EnvWorkerError(
                f"agentenvs server {url} cannot make {self.env_id} with {self._create_kwargs}: "
                f"{exc}"
            ) from None
        try:
            self._post(url, "close", {"session": body["session"]})
        except (_ServerGone, _EnvError):
            pass
        variant = body.get("variant")
        if variant != self._variant:
            raise EnvWorkerError(
                f"agentenvs server {url} makes {self.env_id} with {self._create_kwargs} as variant "
                f"{variant}, this client as {self._variant}: the same agentenvs installation "
                "is needed on both sides"
            )


def answer_json(httpx: Any, env_id: str, url: str, route: str, send: Any) -> dict[str, Any]:
    """The JSON answer of ``send()`` (a request to ``url``'s ``route``): :class:`_ServerGone` for
    a dead server or a lost session, :class:`_EnvError` for a 4xx answer, :class:`_Refused` for a
    non-agentenvs answer."""
    try:
        response = send()
    except httpx.TimeoutException as exc:
        raise _ServerGone(
            f"gave no answer to /{route} in time ({type(exc).__name__})"
        ) from None
    except httpx.TransportError as exc:
        raise _ServerGone(f"is unreachable ({type(exc).__name__}: {exc})") from None
    if response.status_code >= 500:
        raise _ServerGone(f"failed: /{route} answered {response.status_code}")
    try:
        payload = response.json()
    except ValueError:
        raise _Refused(
            f"{url} answered /{route} with {response.status_code} and no JSON: is it an "
            f"agentenvs server? Start one with `{_serve_command(env_id, url)}`"
        ) from None
    if response.status_code >= 400:
        error = payload.get("error") if isinstance(payload, dict) else None
        if not isinstance(error, dict):
            error = {"type": "HTTPError", "message": str(payload)}
        if response.status_code in _GONE_STATUSES and route != "sessions":
            raise _ServerGone(
                f"lost the session ({response.status_code} {error.get('type')}: "
                f"{error.get('message')})",
                session_lost=True,
            )
        kind, message = str(error.get("type")), str(error.get("message"))
        raise _EnvError(response.status_code, kind, message)
    return payload


def variant_kwargs(env_id: str, variant: dict[str, Any]) -> dict[str, Any]:
    """The keywords of ``variant`` that ``env_id``'s constructor takes: pinned in a session's
    create body, so that a server whose API defaults others makes the same environment."""
    import inspect

    from agentenvs.registration import env_class

    params = inspect.signature(env_class(env_id).__init__).parameters
    return {k: v for k, v in variant.items() if k in params}


def check_health(
    client: Any, httpx: Any, url: str, env_id: str, timeout: float = DEFAULT_START_TIMEOUT_S
) -> dict[str, Any]:
    """The server's health answer, checked: same env id and agentenvs version."""
    from agentenvs import __version__

    how = f"start one with `{_serve_command(env_id, url)}` (or fix the URL)"
    try:
        response = client.get(f"{url}{API_PREFIX}/health", timeout=timeout)
    except httpx.TransportError as exc:
        raise EnvWorkerError(
            f"no agentenvs server answers at {url} ({type(exc).__name__}: {exc}): {how}"
        ) from None
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code != 200 or not isinstance(body, dict) or "env_id" not in body:
        raise EnvWorkerError(
            f"{url} is not an agentenvs server (GET {API_PREFIX}/health answered "
            f"{response.status_code}): {how}"
        )
    if body["env_id"] != env_id:
        raise EnvWorkerError(
            f"{url} serves {body['env_id']}, this run needs {env_id}: start "
            f"`{_serve_command(env_id, url)}` (or list the servers of {env_id})"
        )
    if body.get("version") != __version__:
        raise EnvWorkerError(
            f"{url} runs agentenvs {body.get('version')}, this client {__version__}: both "
            "sides need the same version (the same environments, the same results); "
            "upgrade one of them"
        )
    return body


class _EnvError(Exception):
    """A 4xx answer about the request (unknown task, episode over, bad field)."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.status = status


def _comparable(result: Any) -> tuple:
    """What a mirror must reproduce of a server's result: observation, reward and flags."""
    if isinstance(result, EnvFailure):
        return ("failure",)
    if len(result) == 2:
        return (result[0],)
    return (result[0], float(result[1]), bool(result[2]), bool(result[3]))
