"""Avg@k and the unbiased Pass@k estimator against hand values and brute-force enumeration."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

from agentenvs.benchmarks.metrics import OVERALL, TaskOutcome, avg_at_k, pass_at_k, summarize, task_outcomes


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
        ("t2", "a", False, True),
        ("t3", "b", True, False),
        ("t3", "b", True, False),
    ]
    outcomes = task_outcomes(records)
    assert outcomes == [
        TaskOutcome("t1", "a", 2, 1, 0),
        TaskOutcome("t2", "a", 2, 0, 1),
        TaskOutcome("t3", "b", 2, 2, 0),
    ]
    rows = summarize(outcomes, k=2)
    assert [r.family for r in rows] == ["a", "b", OVERALL]
    a, b, overall = rows
    assert (a.tasks, a.samples, a.successes, a.errors) == (2, 4, 1, 1)
    assert a.avg_at_k == pytest.approx(0.25) and a.pass_at_k == pytest.approx(0.5)
    assert b.avg_at_k == 1.0 and b.pass_at_k == 1.0
    assert overall.avg_at_k == pytest.approx(0.5) and overall.pass_at_k == pytest.approx(2 / 3)
    assert summarize(outcomes, k=1)[-1].pass_at_k == pytest.approx(0.5)  # Pass@1 == Avg
    with pytest.raises(ValueError, match="needs at least 3 samples per task"):
        summarize(outcomes, k=3)
