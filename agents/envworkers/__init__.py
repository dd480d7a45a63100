"""Environment workers: where the environments of a batched rollout live and step.

Chosen by a spec string (``--env-workers`` on the command line, ``RolloutConfig.workers``):

=========================  =====================================================================
``inprocess`` (or ``0``)   every environment in this process (default; best for microsecond
                           environments: TextCraft, Sokoban, BabyAI)
``process:N`` (or ``N``)   N local worker processes stepping in parallel (``process``: one per
                           core); for slow environments (ALFWorld, WebShop)
``ray[:N][@ADDRESS]``      N Ray actors (``ray``: one per CPU of the cluster) on the Ray cluster
                           at ADDRESS (``auto``, ``HOST:6379``, ``ray://HOST:10001``; default:
                           ``RAY_ADDRESS`` or a new local Ray); needs ``agentenvs[ray]``
``http://HOST:PORT[,...]`` sessions on ``agentenvs serve ENV_ID`` servers, one worker per
                           server, each episode on one of them (:mod:`.http_pool`); a server's
                           ``--auth-token`` from ``AGENTENVS_AUTH_TOKEN`` (or ``auth_token=``)
=========================  =====================================================================

Process, Ray and http pools isolate faults per episode: a worker that dies is replaced (an http
worker moves to the next live server) and each episode it hosted is retried once, exactly (its
operations replayed on the new worker and checked against the original results); an episode that
cannot be retried ends with ``error`` set and the others go on
(:mod:`agentenvs.agents.envworkers.pool`). Every pool has the same interface,
:class:`EnvWorkerPool`; :func:`make_env_pool` builds one from a spec.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from agentenvs.agents.envworkers.host import CutStateError, EnvFailure, EnvHost
from agentenvs.agents.envworkers.http_pool import HttpPool
from agentenvs.agents.envworkers.http_transport import AuthError, normalize_server_url
from agentenvs.agents.envworkers.pool import (
    DEFAULT_ENV_TIMEOUT_S,
    EnvWorkerError,
    EnvWorkerPool,
    InProcessPool,
    RemotePool,
    WorkerDied,
)
from agentenvs.agents.envworkers.process import ProcessPool
from agentenvs.agents.envworkers.ray_pool import RayPool

__all__ = [
    "DEFAULT_ENV_TIMEOUT_S",
    "ENV_WORKER_KINDS",
    "AuthError",
    "CutStateError",
    "EnvFailure",
    "EnvHost",
    "EnvWorkerError",
    "EnvWorkerPool",
    "EnvWorkersSpec",
    "EnvWorkersSpecError",
    "HttpPool",
    "InProcessPool",
    "ProcessPool",
    "RayPool",
    "RemotePool",
    "WorkerDied",
    "make_env_pool",
    "ENV_TIMEOUT_HELP",
    "parse_env_timeout",
    "parse_env_workers",
]

ENV_WORKER_KINDS: dict[str, str] = {
    "inprocess": "every environment in this process (also: 0)",
    "process": "process:N local worker processes (also: N; 'process' alone: one per core)",
    "ray": "ray[:N][@ADDRESS] Ray actors ('ray' alone: one per cluster CPU)",
    "http": "http://HOST:PORT[,http://HOST2:PORT] agentenvs servers ('agentenvs serve ENV_ID')",
}

_SPEC = re.compile(r"^(?P<kind>[a-z]+)(?::(?P<n>\d+))?(?:@(?P<address>\S+))?$")


ENV_TIMEOUT_HELP = (
    f"seconds one environment operation may take on remote workers (process, ray, http) before "
    f"the worker counts as hung and its episodes move on; 0: no limit "
    f"(default {DEFAULT_ENV_TIMEOUT_S:g})"
)


def parse_env_timeout(text: str | float | None) -> float | None:
    """``--env-timeout``: seconds (a positive number), or ``0`` / ``none`` for no limit."""
    if text is None or str(text).strip().lower() in ("0", "0.0", "none"):
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"--env-timeout takes seconds (> 0) or 0 for no limit, got {text!r}")
    return seconds


class EnvWorkersSpecError(ValueError):
    """A bad ``--env-workers`` spec; the message lists the valid forms."""


@dataclass(frozen=True)
class EnvWorkersSpec:
    """A parsed spec: ``kind`` (inprocess, process, ray, http), ``workers`` (None: the default
    for the kind), for Ray the cluster ``address`` (None: ``RAY_ADDRESS`` or a local Ray), for
    http the server ``urls`` (one worker each)."""

    kind: str
    workers: int | None = None
    address: str | None = None
    urls: tuple[str, ...] = ()


def parse_env_workers(spec: int | str | EnvWorkersSpec | None) -> EnvWorkersSpec:
    """Parse ``0``/``N``/``inprocess``/``process[:N]``/``ray[:N][@ADDRESS]``/
    ``http://HOST:PORT[,...]`` (see the module docstring)."""
    if isinstance(spec, EnvWorkersSpec):
        return spec
    if spec is None or spec == "":
        return EnvWorkersSpec("inprocess")
    text = str(spec).strip()
    if re.match(r"^https?://", text):
        return _parse_urls(text)
    if isinstance(spec, int) or re.fullmatch(r"-?\d+", text):
        n = int(text)
        if n < 0:
            raise EnvWorkersSpecError(_help(f"a worker count must be >= 0, got {n}"))
        return EnvWorkersSpec("inprocess") if n == 0 else EnvWorkersSpec("process", n)
    match = _SPEC.match(text)
    if match is None or match["kind"] not in ENV_WORKER_KINDS:
        raise EnvWorkersSpecError(_help(f"unknown environment-worker spec {spec!r}"))
    kind, n, address = match["kind"], match["n"], match["address"]
    if address is not None and kind != "ray":
        raise EnvWorkersSpecError(_help(f"only ray workers take an @ADDRESS, got {spec!r}"))
    if kind == "inprocess":
        if n is not None:
            raise EnvWorkersSpecError(_help(f"inprocess takes no count, got {spec!r}"))
        return EnvWorkersSpec("inprocess")
    if n is not None and int(n) < 1:
        raise EnvWorkersSpecError(_help(f"{kind} needs at least 1 worker, got {spec!r}"))
    if kind == "process" and n is None:
        return EnvWorkersSpec("process", os.cpu_count() or 1)
    return EnvWorkersSpec(kind, int(n) if n is not None else None, address)


def make_env_pool(
    env_id: str,
    spec: int | str | EnvWorkersSpec | None = None,
    env_kwargs: dict[str, Any] | None = None,
    **options: Any,
) -> EnvWorkerPool:
    """The pool a spec names, making ``env_id`` with ``env_kwargs``.

    ``options`` go to the pool: ``env_factory`` (all but http: a server makes its environments
    from ``env_id``), ``step_timeout_s`` (process, ray, http), ``cpus_per_worker`` (ray),
    ``start_timeout_s`` (ray, http) and ``auth_token`` (http: the servers' bearer token; default
    the environment variable ``AGENTENVS_AUTH_TOKEN`` when set).
    """
    parsed = parse_env_workers(spec)
    if parsed.kind == "http":
        return HttpPool(
            env_id,
            parsed.urls,
            env_kwargs,
            **_only(options, "step_timeout_s", "start_timeout_s", "auth_token"),
        )
    if parsed.kind == "inprocess":
        return InProcessPool(env_id, env_kwargs, **_only(options, "env_factory"))
    if parsed.kind == "process":
        assert parsed.workers is not None
        return ProcessPool(
            env_id, parsed.workers, env_kwargs, **_only(options, "env_factory", "step_timeout_s")
        )
    return RayPool(env_id, parsed.workers, env_kwargs, address=parsed.address, **options)


def _parse_urls(text: str) -> EnvWorkersSpec:
    urls = []
    for part in text.split(","):
        try:
            url = normalize_server_url(part)
        except ValueError as exc:
            raise EnvWorkersSpecError(_help(str(exc))) from None
        if url in urls:
            raise EnvWorkersSpecError(_help(f"the server {url} is listed twice"))
        urls.append(url)
    return EnvWorkersSpec("http", len(urls), urls=tuple(urls))


def _only(options: dict[str, Any], *allowed: str) -> dict[str, Any]:
    extra = sorted(set(options) - set(allowed))
    if extra:
        raise TypeError(f"options {extra} do not apply here; this pool takes {list(allowed)}")
    return options


def _help(problem: str) -> str:
    forms = "; ".join(f"{k}: {v}" for k, v in ENV_WORKER_KINDS.items())
    return f"{problem}. Valid forms: {forms}"
