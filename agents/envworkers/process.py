"""A pool of local worker processes stepping environments in parallel (``process:N``).

Each worker is a ``spawn``-ed process (safe after torch or CUDA have started here) that owns the
environments of its slots and answers batches over a pipe. Worth it for slow environments
(ALFWorld, WebShop search); for microsecond ones the in-process pool is faster. A worker that
exits (crash, ``kill -9``, out of memory) or hangs past ``step_timeout_s`` is replaced and its
episodes are retried once (:class:`agentenvs.agents.envworkers.pool.RemotePool`).
"""

from __future__ import annotations

import multiprocessing as mp
import signal
from typing import Any

from agentenvs.agents.envworkers.host import EnvHost
from agentenvs.agents.envworkers.pool import (
    DEFAULT_ENV_TIMEOUT_S,
    EnvWorkerError,
    RemotePool,
    WorkerDied,
)

__all__ = ["DEFAULT_START_TIMEOUT_S", "ProcessPool"]

DEFAULT_START_TIMEOUT_S = 120.0


def _worker_main(
    conn: Any, env_id: str, env_kwargs: dict[str, Any], env_factory: str | None
) -> None:
    host = EnvHost(env_id, env_kwargs, env_factory)
    host.preload()
    conn.send("ready")
    try:
        while True:
            try:
                message = conn.recv()
            except EOFError:  # the parent went away
                break
            if message is None:
                break
            op, items = message
            conn.send(host.run(op, items))
    finally:
        host.close()
        conn.close()


class ProcessPool(RemotePool):
    """``workers`` local processes (see the module docstring); ``start_timeout_s`` bounds the
    wait for a worker to start (import its modules)."""

    kind = "process"

    def __init__(
        self,
        env_id: str,
        workers: int,
        env_kwargs: dict[str, Any] | None = None,
        *,
        env_factory: str | None = None,
        step_timeout_s: float | None = DEFAULT_ENV_TIMEOUT_S,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
    ) -> None:
        super().__init__(env_id, workers, env_kwargs, env_factory, step_timeout_s)
        self.start_timeout_s = start_timeout_s
        self._ctx = mp.get_context("spawn")
        self._conns: list[Any] = [None] * workers
        self._procs: list[Any] = [None] * workers
        try:
            for index in range(workers):
                self._launch(index)
            for index in range(workers):
                self._wait_ready(index)
        except BaseException:
            self.close()
            raise

    def worker_pids(self) -> list[int]:
        """The process id of every worker, by index."""
        return [proc.pid for proc in self._procs]

    def _start_worker(self, index: int) -> None:
        self._launch(index)
        self._wait_ready(index)

    def _launch(self, index: int) -> None:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(
            target=_worker_main,
            args=(child, self.env_id, self.env_kwargs, self.env_factory),
            name=f"agentenvs-env-worker-{index}",
            daemon=True,
        )
        proc.start()
        child.close()
        self._conns[index], self._procs[index] = parent, proc

    def _wait_ready(self, index: int) -> None:
        """Wait until worker ``index`` has imported everything (so that ``step_timeout_s``
        never counts a worker's start-up)."""
        conn = self._conns[index]
        try:
            if not conn.poll(self.start_timeout_s):
                raise EnvWorkerError(
                    f"environment worker {index} did not start within {self.start_timeout_s:.0f} s"
                )
            conn.recv()
        except (EOFError, ConnectionResetError, OSError) as exc:
            raise EnvWorkerError(
                f"{self._death(index, exc)} while starting (its error is on stderr)"
            ) from None

    def _submit(self, index: int, op: str, items: list[tuple]) -> Any:
        try:
            self._conns[index].send((op, items))
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError) as exc:
            raise WorkerDied(self._death(index, exc)) from None
        return None

    def _collect(self, index: int, ticket: Any, timeout: float | None) -> list[Any]:
        conn = self._conns[index]
        try:
            if timeout is not None and not conn.poll(timeout):
                self._stop_worker(index, kill=True)
                raise WorkerDied(
                    f"environment worker {index} gave no answer within {timeout:.0f} s "
                    "and was killed"
                )
            return conn.recv()
        except (EOFError, ConnectionResetError, OSError) as exc:
            raise WorkerDied(self._death(index, exc)) from None

    def _stop_worker(self, index: int, kill: bool) -> None:
        conn, proc = self._conns[index], self._procs[index]
        if conn is not None and not kill:
            try:
                conn.send(None)
            except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
                pass
        if proc is not None:
            if kill and proc.is_alive():
                proc.kill()
            proc.join(timeout=None if kill else 10)
            if proc.is_alive():
                proc.kill()
                proc.join()
        if conn is not None:
            conn.close()

    def _death(self, index: int, exc: BaseException) -> str:
        proc = self._procs[index]
        proc.join(timeout=5)
        code = proc.exitcode
        if code is None:
            how = f"stopped answering ({type(exc).__name__})"
        elif code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        return f"environment worker {index} (pid {proc.pid}) {how}"
