"""Avg@k and Pass@k over episodes, per task family and overall.

For a task with ``n`` sampled episodes of which ``c`` succeeded:

* ``Avg@k`` is the expected success of one sample, ``c / n`` (the paper's Avg@8 with n = 8),
  averaged over tasks;
* ``Pass@k`` is the probability that at least one of ``k`` samples drawn without replacement
  from the ``n`` succeeds, by the unbiased estimator of Chen et al. (2021),
  ``1 - C(n - c, k) / C(n, k)``, averaged over tasks. It needs ``n >= k``.

A family's figures average over its tasks; "overall" averages over all tasks (not over
families). Figures are fractions in [0, 1]; tables print percentages.

An episode that ended in an error (the environment, its worker or the policy failed) is not a
result: it is left out of ``n`` and ``c`` and counted in ``errors`` beside them, per error type
(:func:`count_errors`). Avg@k then averages over the tasks with at least one played sample,
Pass@k over those with at least ``k`` (``avg_tasks``, ``pass_tasks``); with no such task the
figure is None, not 0.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "OVERALL",
    "ErrorCount",
    "MetricRow",
    "TaskOutcome",
    "avg_at_k",
    "count_errors",
    "error_type",
    "pass_at_k",
    "summarize",
    "task_outcomes",
]

OVERALL = "overall"


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased Pass@k for one task: ``1 - C(n - c, k) / C(n, k)``.

    >>> pass_at_k(8, 0, 8), pass_at_k(8, 1, 8), round(pass_at_k(8, 2, 1), 4)
    (0.0, 1.0, 0.25)
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"Pass@k needs 1 <= k <= n samples, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def avg_at_k(n: int, c: int) -> float:
    """Avg@k for one task: the success rate ``c / n`` of its samples."""
    if not 0 <= c <= n or n < 1:
        raise ValueError(f"need 0 <= c <= n and n >= 1, got n={n}, c={c}")
    return c / n


@dataclass(frozen=True)
class TaskOutcome:
    """One task's samples: how many were played (``n``, errored ones not counted), how many
    succeeded (``c``) and how many ended in an error (``errors``)."""

    task_id: str
    family: str
    n: int
    c: int
    errors: int = 0


@dataclass(frozen=True)
class MetricRow:
    """One line of a results table (fractions in [0, 1]).

    ``samples``: the played episodes (``errors``, those that ended in an error, are not among
    them); ``avg_tasks`` / ``pass_tasks``: the tasks ``avg_at_k`` / ``pass_at_k`` average over
    (all ``tasks`` unless episodes errored); a figure is None when no task qualifies."""

    family: str
    tasks: int
    samples: int
    successes: int
    errors: int
    avg_at_k: float | None
    pass_at_k: float | None
    k: int
    avg_tasks: int = 0
    pass_tasks: int = 0


@dataclass(frozen=True)
class ErrorCount:
    """The episodes of one error type (:func:`error_type`) and the first one's message."""

    type: str
    episodes: int
    first: str


_STAGE = re.compile(r"(\w+) failed: ")
_EXCEPTION = re.compile(r"(?:[A-Za-z_]\w*\.)*([A-Z]\w*):")


def error_type(message: str) -> str:
    """The type of an episode's error message: the stage that failed and the exception's class.

    >>> error_type("reset failed: agentenvs.registration.MissingDependencyError: ALFWorld-v0 ...")
    'reset: MissingDependencyError'
    >>> error_type("ExpertFailure: no plan"), error_type("step failed: worker lost")
    ('ExpertFailure', 'step: error')
    """
    stage = ""
    if m := _STAGE.match(message):
        stage, message = m[1], message[m.end() :]
    m = _EXCEPTION.match(message)
    name = m[1] if m else "error"
    return f"{stage}: {name}" if stage else name


def count_errors(messages: Iterable[str]) -> list[ErrorCount]:
    """The error messages grouped by :func:`error_type`, most frequent first (then first seen)."""
    groups: dict[str, list] = {}
    for message in messages:
        entry = groups.setdefault(error_type(message), [0, message])
        entry[0] += 1
    ranked = sorted(groups.items(), key=lambda item: -item[1][0])
    return [ErrorCount(name, count, first) for name, (count, first) in ranked]


def task_outcomes(episodes: Iterable[tuple[str, str, bool, bool]]) -> list[TaskOutcome]:
    """Group ``(task_id, family, won, errored)`` records by task, in first-seen order; an errored
    episode counts in ``errors`` only (not in ``n``, whatever its ``won``)."""
    order: dict[str, list] = {}
    for task_id, family, won, errored in episodes:
        entry = order.setdefault(task_id, [family, 0, 0, 0])
        if errored:
            entry[3] += 1
        else:
            entry[1] += 1
            entry[2] += int(bool(won))
    return [TaskOutcome(t, f, n, c, e) for t, (f, n, c, e) in order.items()]


def summarize(outcomes: Sequence[TaskOutcome], k: int) -> list[MetricRow]:
    """One row per family (sorted by name) and an ``overall`` row last.

    Every task must have at least ``k`` samples, played or errored (raise otherwise: a partial
    run's table would quietly mix estimators); errored ones are left out of the figures (see
    the module docstring).
    """
    short = [o.task_id for o in outcomes if o.n + o.errors < k]
    if short:
        raise ValueError(
            f"Pass@{k} needs at least {k} samples per task; {len(short)} task(s) have fewer "
            f"(e.g. {short[0]}). Finish the run (it resumes) or lower -k"
        )
    families: dict[str, list[TaskOutcome]] = {}
    for outcome in outcomes:
        families.setdefault(outcome.family, []).append(outcome)
    rows = [_row(name, families[name], k) for name in sorted(families)]
    if outcomes:
        rows.append(_row(OVERALL, list(outcomes), k))
    return rows


def _row(name: str, outcomes: Sequence[TaskOutcome], k: int) -> MetricRow:
    avg = [avg_at_k(o.n, o.c) for o in outcomes if o.n >= 1]
    pas = [pass_at_k(o.n, o.c, k) for o in outcomes if o.n >= k]
    return MetricRow(
        family=name,
        tasks=len(outcomes),
        samples=sum(o.n for o in outcomes),
        successes=sum(o.c for o in outcomes),
        errors=sum(o.errors for o in outcomes),
        avg_at_k=sum(avg) / len(avg) if avg else None,
        pass_at_k=sum(pas) / len(pas) if pas else None,
        k=k,
        avg_tasks=len(avg),
        pass_tasks=len(pas),
    )
