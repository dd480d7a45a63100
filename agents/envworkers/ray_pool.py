"""Environment workers as Ray actors, on one machine or across a cluster (``ray[:N][@ADDRESS]``).

Each worker is a Ray actor (one CPU each by default, placed with the ``SPREAD`` strategy so a
cluster's nodes share them) that owns the environments of its slots. The pool connects to the
Ray instance of this process if one is initialised, else to ``address`` (``auto``, ``HOST:6379``
or ``ray://HOST:10001``) or the ``RAY_ADDRESS`` variable, else starts a local Ray. It never shuts
Ray down: a trainer keeps one Ray across iterations (``ray.shutdown()`` is the caller's).

An actor that dies (killed, crashed, its node lost) or hangs past ``step_timeout_s`` is replaced
and its episodes are retried once (:class:`agentenvs.agents.envworkers.pool.RemotePool`). Every
node needs the same agentenvs installation (and environment data) as the driver.

Ray is optional: ``pip install 'agentenvs[ray]'``. This module imports without it; making a
pool without it raises :class:`agentenvs.agents.envworkers.pool.EnvWorkerError` saying so.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from agentenvs.agents.envworkers.host import EnvHost
from agentenvs.agents.envworkers.pool import (
    DEFAULT_ENV_TIMEOUT_S,
    EnvWorkerError,
    RemotePool,
    WorkerDied,
)

__all__ = ["RayPool", "connect_ray", "import_ray"]

DEFAULT_START_TIMEOUT_S = 120.0


def import_ray() -> Any:
    """The ``ray`` module, or an :class:`EnvWorkerError` saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise EnvWorkerError(
            "Ray environment workers need Ray: pip install 'agentenvs[ray]' (ray>=2.10), or use "
            "--env-workers process:N for local worker processes"
        ) from exc
    return ray


def connect_ray(address: str | None = None, min_cpus: float = 0.0) -> Any:
    """Initialise Ray in this process if needed (see the module docstring); returns ``ray``.

    A local Ray started here gets this machine's cores, or ``min_cpus`` logical CPUs if more (so
    that ``ray:N`` places N workers on a smaller machine, as ``process:N`` would).
    """
    ray = import_ray()
    if ray.is_initialized():
        return ray
    if address or os.environ.get("RAY_ADDRESS"):
        ray.init(address=address or None)
    else:
        cpus = max(os.cpu_count() or 1, math.ceil(min_cpus))
        ray.init(num_cpus=cpus, include_dashboard=False)
    return ray


class EnvActor:
    """The body of one Ray environment worker (wrapped by ``ray.remote`` when a pool starts)."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any], env_factory: str | None) -> None:
        self.host = EnvHost(env_id, env_kwargs, env_factory)
        self.host.preload()

    def run(self, op: str, items: Sequence[tuple]) -> list[Any]:
        return self.host.run(op, items)

    def where(self) -> tuple[int, str]:
        """(process id, node IP address) of this actor."""
        import ray

        return os.getpid(), ray.util.get_node_ip_address()

    def close(self) -> None:
        self.host.close()


class RayPool(RemotePool):
    """Ray actors stepping environments (see the module docstring).

    ``workers`` None: one per ``cpus_per_worker`` CPUs of the cluster. ``cpus_per_worker`` may be
    fractional (0.5 puts two workers on a core). ``start_timeout_s`` bounds the wait for the
    cluster to place a worker.
    """

    kind = "ray"

    def __init__(
        self,
        env_id: str,
        workers: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        *,
        address: str | None = None,
        cpus_per_worker: float = 1.0,
        env_factory: str | None = None,
        step_timeout_s: float | None = DEFAULT_ENV_TIMEOUT_S,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
    ) -> None:
        if cpus_per_worker <= 0:
            raise ValueError(f"cpus_per_worker must be > 0, got {cpus_per_worker}")
        self._ray = connect_ray(address, (workers or 0) * cpus_per_worker)
        cpus = float(self._ray.cluster_resources().get("CPU", 0.0))
        if workers is None:
            workers = max(1, int(cpus / cpus_per_worker + 1e-9))
        if workers * cpus_per_worker > cpus + 1e-9:
            raise EnvWorkerError(
                f"{workers} Ray environment workers of {cpus_per_worker:g} CPU each need "
                f"{workers * cpus_per_worker:g} CPUs; the Ray cluster has {cpus:g}. Ask for fewer "
                "workers, pass a smaller cpus_per_worker, or add nodes (ray start --address=...)"
            )
        super().__init__(env_id, workers, env_kwargs, env_factory, step_timeout_s)
        self.cpus_per_worker = cpus_per_worker
        self.start_timeout_s = start_timeout_s
        self._actor_class = self._ray.remote(max_restarts=0, max_task_retries=0)(EnvActor)
        self._actors: list[Any] = [None] * workers
        self._where: list[tuple[int, str]] = [(0, "")] * workers
        try:
            for index in range(workers):
                self._launch(index)
            self._wait_ready(range(workers))
        except BaseException:
            self.close()
            raise

    @property
    def actors(self) -> list[Any]:
        """The actor handle of every worker, by index (``ray.kill`` one to drill a failure)."""
        return list(self._actors)

    def worker_pids(self) -> list[int]:
        """The process id of every worker, by index (on its own node)."""
        return [pid for pid, _ in self._where]

    def worker_nodes(self) -> list[str]:
        """The node IP address of every worker, by index."""
        return [node for _, node in self._where]

    def _launch(self, index: int) -> None:
        self._actors[index] = self._actor_class.options(
            num_cpus=self.cpus_per_worker,
            scheduling_strategy="SPREAD",
        ).remote(self.env_id, self.env_kwargs, self.env_factory)

    def _wait_ready(self, indices: Sequence[int] | range) -> None:
        ray = self._ray
        refs = [self._actors[i].where.remote() for i in indices]
        try:
            answers = ray.get(refs, timeout=self.start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            total = ray.cluster_resources().get("CPU", 0.0)
            free = ray.available_resources().get("CPU", 0.0)
            raise EnvWorkerError(
                f"Ray could not place {len(refs)} environment worker(s) of {self.cpus_per_worker} "
                f"CPU each within {self.start_timeout_s:.0f} s (the cluster has {total:g} CPUs, "
                f"{free:g} free); ask for fewer workers, a smaller cpus_per_worker, or add nodes"
            ) from None
        except ray.exceptions.RayError as exc:
            raise EnvWorkerError(
                f"a Ray environment worker failed to start ({type(exc).__name__}: {exc}); is "
                "agentenvs installed on every node, with the same version?"
            ) from None
        for i, where in zip(indices, answers, strict=True):
            self._where[i] = tuple(where)

    def _start_worker(self, index: int) -> None:
        self._launch(index)
        self._wait_ready([index])

    def _submit(self, index: int, op: str, items: list[tuple]) -> Any:
        return self._actors[index].run.remote(op, items)

    def _collect(self, index: int, ticket: Any, timeout: float | None) -> list[Any]:
        ray = self._ray
        pid, node = self._where[index]
        name = f"environment worker {index} (Ray actor, pid {pid} on {node})"
        try:
            return ray.get(ticket, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            ray.kill(self._actors[index], no_restart=True)
            raise WorkerDied(
                f"{name} gave no answer within {timeout:.0f} s and was killed"
            ) from None
        except ray.exceptions.RayError as exc:
            raise WorkerDied(f"{name} died ({type(exc).__name__})") from None

    def _stop_worker(self, index: int, kill: bool) -> None:
        actor = self._actors[index]
        if actor is None:
            return
        self._actors[index] = None
        if not kill:
            try:
                self._ray.get(actor.close.remote(), timeout=10)
            except Exception:  # already dead or unreachable: killing it is all that is left
                pass
        try:
            self._ray.kill(actor, no_restart=True)
        except Exception:  # an actor that is already gone
            pass
