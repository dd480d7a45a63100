"""The check's steps run in order, each under its own time limit and the run's budget; a failed
step is recorded (error, traceback tail) and the steps that do not need it still run."""

from __future__ import annotations

import contextlib
import gc
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from agentenvs.benchmarks.gpu_check.plan import CheckPlan

__all__ = ["TAIL_CHARS", "StepRecord", "StepRunner", "StepTimeout", "free_device_memory"]

TAIL_CHARS = 4000
"""How much of a traceback (or a subprocess's output) a failed step keeps."""


class StepTimeout(Exception):
    """A step ran past its time limit."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`StepTimeout` in the main thread after ``seconds`` (SIGALRM; a step stuck in
    one C call is interrupted when it returns)."""

    def expire(signum: int, frame: Any) -> None:
        raise StepTimeout(f"ran past its {seconds:g} s limit")

    before = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


@dataclass
class StepRecord:
    """One step's outcome in the JSON."""

    name: str
    ok: bool = False
    seconds: float = 0.0
    limit_s: float = 0.0
    error: str | None = None
    traceback: str | None = None
    result: dict[str, Any] = field(default_factory=dict)


class StepRunner:
    """Runs the steps in order, each under ``min(its limit, what is left of the budget)``;
    ``outputs`` holds the results of the steps that succeeded."""

    def __init__(self, plan: CheckPlan, selected: Sequence[str]) -> None:
        self.plan = plan
        self.selected = set(selected)
        self.start = time.perf_counter()
        self.records: list[StepRecord] = []
        self.limit = 0.0
        """The running step's time limit (seconds)."""
        self.outputs: dict[str, dict[str, Any]] = {}

    def run(self, name: str, body: Callable[[], dict[str, Any]], needs: Sequence[str] = ()) -> None:
        """Run step ``name`` (when selected) unless a step it ``needs`` failed or the budget is
        spent; record its result or its failure."""
        if name not in self.selected:
            return
        left = self.plan.budget_s - (time.perf_counter() - self.start)
        limit = min(self.plan.limits_s.get(name, self.plan.budget_s), left)
        self.limit = limit
        record = StepRecord(name, limit_s=round(limit, 1))
        self.records.append(record)
        missing = [n for n in needs if n not in self.outputs]
        if missing:
            record.error = f"needs step(s) {', '.join(missing)}, which did not succeed"
            return
        if left <= 1:
            record.error = f"the {self.plan.budget_s:.0f} s budget was spent before this step"
            return
        print(f"gpu_check: {name} (limit {limit:.0f} s)", file=sys.stderr, flush=True)
        clock = time.perf_counter()
        try:
            with time_limit(limit):
                record.result = body()
            record.ok = True
            self.outputs[name] = record.result
        except BaseException as exc:  # noqa: BLE001 - every failure is recorded, then the next step
            if isinstance(exc, KeyboardInterrupt):
                raise
            record.error = f"{type(exc).__name__}: {exc}"[:TAIL_CHARS]
            record.traceback = traceback.format_exc()[-TAIL_CHARS:]
        finally:
            record.seconds = round(time.perf_counter() - clock, 3)
            free_device_memory()


def free_device_memory() -> None:
    """Collect garbage and hand the CUDA cache back, between steps."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
