"""The progress line of long runs (``agentenvs eval``): shown at once, moving every turn.

:class:`RunProgress` draws a tqdm bar of finished episodes as soon as it is made (before the
model loads: ``status`` says what is happening meanwhile) and a postfix with the episodes in
flight, the turns played, generated tokens per second, the success rate so far (over the played
episodes) and the episodes that ended in an error (not results: the next run plays them
again). A daemon thread redraws it every ``interval`` seconds from the
:class:`~agentenvs.agents.rollout.RolloutStats` the rollout fills after each generated turn, so
the line advances per turn and its clock keeps moving during a long generation call.
transformers' own "Loading weights" bar is silenced while models load
(:func:`agentenvs.agents.models.quiet_loading`), so it cannot overwrite this one.
"""

from __future__ import annotations

import threading
import time
from typing import Any

__all__ = ["RunProgress"]


class RunProgress:
    """A progress bar over ``total`` episodes (``finished``: those already on disk).

    ``planned``: the episodes this run will play; ``max_active``: how many are in flight at once
    (the rollout keeps that many going while any are pending). Disabled, every method is a
    no-op. Use :meth:`watch` with the rollout's stats, :meth:`add` per finished episode and
    :meth:`close` at the end (also a context manager).
    """

    def __init__(
        self,
        total: int,
        finished: list[Any],
        label: str,
        *,
        enabled: bool = True,
        planned: int = 0,
        max_active: int = 1,
        interval: float = 1.0,
    ) -> None:
        self.won = sum(bool(t.won) for t in finished)
        self.count = len(finished)
        self.errors = 0
        self.new = 0
        self.planned = planned
        self.max_active = max(1, max_active)
        self.status = "starting" if planned else ""
        self.stats: Any = None
        self._started = time.perf_counter()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.bar = None
        if not enabled:
            return
        from tqdm import tqdm

        self.bar = tqdm(
            total=total,
            initial=self.count,
            desc=label,
            unit="ep",
            dynamic_ncols=True,
            mininterval=0.5,
        )
        self.refresh()
        if planned:
            self._thread = threading.Thread(
                target=self._tick, args=(interval,), name="progress", daemon=True
            )
            self._thread.start()

    def set_status(self, status: str) -> None:
        """A word on what the run is doing before its first turn (e.g. ``loading model``)."""
        self.status = status
        self.refresh()

    def watch(self, stats: Any) -> None:
        """Read turns and tokens from ``stats`` (a RolloutStats the rollout updates)."""
        self.stats = stats
        self.status = ""
        self._started = time.perf_counter()
        self.refresh()

    def add(self, traj: Any) -> None:
        """One more finished (or errored) episode."""
        with self._lock:
            self.new += 1
            if traj.error is not None:
                self.errors += 1
            else:
                self.count += 1
                self.won += int(bool(traj.won))
            if self.bar is not None:
                self.bar.set_postfix_str(self.postfix(), refresh=False)
                self.bar.update(1)

    def postfix(self) -> str:
        """The text after the bar: status or in-flight/turns/tok/s, then the success so far."""
        rate = 100.0 * self.won / self.count if self.count else 0.0
        parts = [self.status] if self.status else []
        stats = self.stats
        if stats is not None:
            in_flight = min(self.max_active, max(self.planned - self.new, 0))
            elapsed = max(time.perf_counter() - self._started, 1e-9)
            parts += [
                f"{in_flight} in flight",
                f"{stats.turns} turns",
                f"{stats.generated_tokens / elapsed:.1f} tok/s",
            ]
        parts.append(f"success {self.won}/{self.count} ({rate:.1f}%)")
        if self.errors:
            parts.append(f"{self.errors} errored")
        return ", ".join(parts)

    def refresh(self) -> None:
        with self._lock:
            if self.bar is not None:
                self.bar.set_postfix_str(self.postfix(), refresh=True)

    def _tick(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.refresh()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.bar is not None:
            self.refresh()
            self.bar.close()
            self.bar = None

    def __enter__(self) -> RunProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
