"""Avg@k and the unbiased Pass@k estimator against hand values and brute-force enumeration."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

from agentenvs.benchmarks.eval.metrics import (
    OVERALL,
    TaskOutcome,
    avg_at_k,
    count_errors,
    error_type,
    pass_at_k,
    summarize,
    task_outcomes,
)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (8, 0, 8, 0.0),
        (8, 8, 8, 1.0),
        (8, 1, 8, 1.0),
        (8, 1, 1, 1 / 8),
        (8, 2, 2, 1 - 15 / 28),  # 1 - C(6,2)/C(8,2)
        (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5)
        (16, 4, 8, 1 - 495 / 12870),  # 1 - C(12,8)/C(16,8)
        (5, 1, 4, 1 - 1 / 5),  # 1 - C(4,4)/C(5,4)
        (3, 0, 1, 0.0),
    ],
)
def test_pass_at_k_hand_values(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("n", [1, 4, 7])
def test_pass_at_k_is_the_subset_average(n: int) -> None:
    """The estimator equals the fraction of k-subsets of the n samples that contain a success."""
    for c in range(n + 1):
        outcomes = [1] * c + [0] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(outcomes, k))
            exact = Fraction(sum(any(s) for s in subsets), len(subsets))
            assert pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-12)


def test_invalid_arguments() -> None:
    for args in ((8, 9, 1), (8, -1, 1), (8, 2, 0), (8, 2, 9)):
        with pytest.raises(ValueError):
            pass_at_k(*args)
    with pytest.raises(ValueError):
        avg_at_k(0, 0)
    assert avg_at_k(8, 6) == 0.75


def test_summarize_per_family_and_overall() -> None:
    records = [
        ("t1", "a", True, False),
        ("t1", "a", False, False),
        ("t2", "a", False, False),
        ("t2", "a", True, True),  # errored: not a result, whatever its `won` says
        ("t3", "b", True, False),
        ("t3", "b", True, False),
    ]
    outcomes = task_outcomes(records)
    assert outcomes == [
        TaskOutcome("t1", "a", 2, 1, 0),
        TaskOutcome("t2", "a", 1, 0, 1),
        TaskOutcome("t3", "b", 2, 2, 0),
    ]
    rows = summarize(outcomes, k=2)
    assert [r.family for r in rows] == ["a", "b", OVERALL]
    a, b, overall = rows
    assert (a.tasks, a.samples, a.successes, a.errors) == (2, 3, 1, 1)
    # Avg@2 over both tasks (t2 by its one played sample), Pass@2 over t1 alone (t2 has 1 < k)
    assert a.avg_at_k == pytest.approx(0.25) and a.pass_at_k == pytest.approx(1.0)
    assert (a.avg_tasks, a.pass_tasks) == (2, 1)
    assert b.avg_at_k == 1.0 and b.pass_at_k == 1.0 and (b.avg_tasks, b.pass_tasks) == (1, 1)
    assert overall.avg_at_k == pytest.approx(0.5) and overall.pass_at_k == pytest.approx(1.0)
    assert summarize(outcomes, k=1)[-1].pass_at_k == pytest.approx(0.5)  # Pass@1 == Avg
    with pytest.raises(ValueError, match="needs at least 3 samples per task"):
        summarize(outcomes, k=3)


def test_a_family_whose_every_episode_errored_has_no_figures() -> None:
    outcomes = task_outcomes([("t1", "a", False, True), ("t2", "b", True, False)])
    a, b, overall = summarize(outcomes, k=1)
    assert (a.samples, a.errors, a.avg_at_k, a.pass_at_k, a.avg_tasks) == (0, 1, None, None, 0)
    assert b.avg_at_k == 1.0 and overall.avg_at_k == 1.0 and overall.errors == 1


def test_errors_are_counted_per_type() -> None:
    missing = (
        "reset failed: agentenvs.registration.MissingDependencyError: ALFWorld-v0 needs the "
        "'alfworld' extra; install it with: pip install 'agentenvs[alfworld]'"
    )
    counts = count_errors([missing, "step failed: ValueError: bad", missing + " (2)"])
    assert [(c.type, c.episodes) for c in counts] == [
        ("reset: MissingDependencyError", 2),
        ("step: ValueError", 1),
    ]
    assert counts[0].first == missing
    assert error_type("ExpertFailure: no plan") == "ExpertFailure"
    assert error_type("something odd") == "error"
