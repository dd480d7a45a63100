"""The controlled credit test: a real Sokoban group where a later action decides the outcome,
and the credit GRPO, GiGPO and PTGPO (as the trainer runs them) give the shared and the decisive
action, against values computed by hand from the construction."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch")

from agentenvs.benchmarks.learning.credit import (  # noqa: E402
    DECISIVE_STEP,
    FATAL_STEP,
    SAFE_STEP,
    SHARED_STEP,
    credit_table,
    estimator_credits,
    format_credit,
    format_lost_group,
    lost_group_table,
    play_group,
    play_lost_group,
)

GAMMA = 0.95  # GiGPO's and PTGPO's default discount in the trainer
N = 8  # episodes in the group; 4 per route
T = 10  # every episode: 10 actions (the turn limit)
WIN_REWARDS = [-0.1] * 9 + [10.9]  # -0.1 a step; the solving push: -0.1 + 1 (box on target) + 10
LOSE_REWARDS = [-0.1] * 10  # truncated after 10 turns, the box stuck
ROOT_8 = math.sqrt((N - 1) / N)  # one root of 8 (4 win, 4 lose): delta / std = sqrt(7/8)
ROOT_4 = math.sqrt(3 / 4)  # one root of 4 (2 win, 2 lose)


@pytest.fixture(scope="module")
def episodes():
    return play_group()


def test_the_group_is_the_figure_1_situation(episodes):
    assert len(episodes) == N
    won = [ep for ep in episodes if ep.won]
    lost = [ep for ep in episodes if not ep.won]
    assert len(won) == len(lost) == 4
    for ep in won:
        assert list(ep.rewards) == pytest.approx(WIN_REWARDS)
    for ep in lost:
        assert list(ep.rewards) == pytest.approx(LOSE_REWARDS)

    def anchors_at(t, which=episodes):
        return {ep.anchors[t] for ep in which}

    # one start, one shared action, one state after it
    assert len(anchors_at(0)) == 1 and {ep.actions[0] for ep in episodes} == {"right"}
    assert len(anchors_at(1)) == 1
    # the routes, then the decision: different states, each shared by its 2 winners and 2
    # losers; at the decision the winners' and the losers' actions differ, per route
    for t in (2, 3, DECISIVE_STEP):
        by_route = {
            r: anchors_at(t, [e for e in episodes if e.route == r]) for r in ("up", "right")
        }
        assert all(len(v) == 1 for v in by_route.values())
        assert by_route["up"] != by_route["right"]
    for route, win, lose in (("up", "up", "right"), ("right", "down", "left")):
        moves = {ep.outcome: ep.actions[DECISIVE_STEP] for ep in episodes if ep.route == route}
        assert moves == {"win": win, "lose": lose}
    # no anchor recurs at another step (so each anchor-state group is one step of the plan)
    steps_of = {}
    for ep in episodes:
        for t, anchor in enumerate(ep.anchors):
            steps_of.setdefault(anchor, set()).add(t)
    assert all(len(ts) == 1 for ts in steps_of.values())


def _sign(ep) -> float:
    return 1.0 if ep.won else -1.0


def test_grpo_gives_every_step_the_same_credit(episodes):
    advantages, credits = estimator_credits(episodes, "grpo")
    # R = 10.0 or -1.0: mean 4.5, std sqrt(8/7) * 5.5, so A = +-sqrt(7/8) on every row
    for ep, adv, credit in zip(episodes, advantages, credits, strict=True):
        assert adv == pytest.approx([_sign(ep) * ROOT_8] * T, abs=1e-5)
        assert credit == pytest.approx([0.0] * T, abs=1e-5)


def test_gigpo_credits_the_shared_action_with_the_later_outcome(episodes):
    advantages, credits = estimator_credits(episodes, "gigpo")
    # G_t(win) - G_t(lose) = 11 * gamma^(9 - t); every anchor group up to t = 4 holds as many
    # winners as losers, so A_step = +-5.5 gamma^(9 - t); after t = 4 a group holds one outcome
    for ep, adv, credit in zip(episodes, advantages, credits, strict=True):
        s = _sign(ep)
        want = [s * 5.5 * GAMMA ** (9 - t) if t <= DECISIVE_STEP else 0.0 for t in range(T)]
        assert credit == pytest.approx(want, abs=1e-5)
        assert adv == pytest.approx([s * 5.5 + w for w in want], abs=1e-5)  # R - mean R = +-5.5
    shared = [c[SHARED_STEP] for c in credits]
    assert max(shared) == pytest.approx(5.5 * GAMMA**9) and min(shared) == -max(shared)


def test_ptgpo_credits_only_the_decisive_action(episodes):
    advantages, credits = estimator_credits(episodes, "ptgpo")
    # every tree edge before t = 4 keeps the mean (all took it, or each route is half won); the
    # edge of the decisive action gets sqrt((n-1)/n) from each of the 5 roots that reach it:
    # t = 0, 1 (8 members) and t = 2, 3, 4 (4 members, one route); nothing after it
    decisive = 2 * ROOT_8 + 3 * ROOT_4
    for ep, adv, credit in zip(episodes, advantages, credits, strict=True):
        s = _sign(ep)
        want = [s * decisive if t == DECISIVE_STEP else 0.0 for t in range(T)]
        assert credit == pytest.approx(want, abs=1e-5)
        assert adv == pytest.approx([s * ROOT_8 + w for w in want], abs=1e-5)
    assert decisive == pytest.approx(4.4689, abs=1e-4)


def test_credit_table_and_its_page(episodes):
    rows = credit_table(episodes)
    keys = {(r["algo"], r["action"], r["route"], r["outcome"]) for r in rows}
    assert len(keys) == len(rows) == 3 * 6
    ptgpo = {
        (r["action"], r["route"], r["outcome"]): r["credit"] for r in rows if r["algo"] == "ptgpo"
    }
    assert ptgpo["shared", "up", "win"] == ptgpo["shared", "up", "lose"] == 0.0
    for route in ("up", "right"):
        assert ptgpo["decisive", route, "win"] == -ptgpo["decisive", route, "lose"] == 4.469
    text = format_credit(rows)
    assert "| ptgpo | decisive (t=4) | right | win | `down` | +5.404 | +4.469 |" in text
    assert "-0.000" not in text


def test_the_expert_labels_the_decisive_push_fatal(episodes):
    from agentenvs.benchmarks.learning.oracle_credit import label_actions

    for ep in episodes:
        labels = label_actions(ep.anchors, ep.actions)
        if ep.won:  # from the decision state on, a shortest solution: every move progress
            assert labels[DECISIVE_STEP:] == ["progress"] * (T - DECISIVE_STEP)
        else:  # the push at t=4 loses the room; what follows is played in a lost room
            assert labels[DECISIVE_STEP] == "fatal"
            assert labels[DECISIVE_STEP + 1 :] == ["lost"] * (T - DECISIVE_STEP - 1)
        assert "fatal" not in labels[:DECISIVE_STEP] and "lost" not in labels[:DECISIVE_STEP]
    assert label_actions([episodes[0].anchors[0]], [None]) == ["detour"]  # no action: no move


# ------------------------------------------------------------------------------ all lose


@pytest.fixture(scope="module")
def lost():
    return play_lost_group()


def _kinds(lost):
    fatal = next(i for i, ep in enumerate(lost) if ep.route == "fatal")
    safe = next(i for i, ep in enumerate(lost) if ep.route == "safe")
    return fatal, safe


def test_the_lost_group_differs_only_in_timing(lost):
    from agentenvs.benchmarks.learning.oracle_credit import label_actions

    assert len(lost) == 4 and not any(ep.won for ep in lost)
    for ep in lost:
        assert list(ep.rewards) == pytest.approx([-0.1] * T)  # R = -1.0 for all
    fatal, safe = _kinds(lost)
    decision = lost[safe].anchors[SAFE_STEP]
    assert lost[fatal].anchors[FATAL_STEP] == decision  # the same state, a step later
    assert label_actions(lost[fatal].anchors, lost[fatal].actions)[FATAL_STEP] == "fatal"
    assert "fatal" not in label_actions(lost[safe].anchors, lost[safe].actions)


def _g(t: int) -> float:
    """G_t of a lost episode: -0.1 a step for the 10 - t steps left, discounted by 0.95."""
    return sum(-0.1 * GAMMA**k for k in range(T - t))


def test_paper_ptgpo_rewards_the_fatal_push_when_all_lose(lost):
    # roots before the push, each with the safe members at t and the fatal ones at t + 1: the
    # state after the shared move (the fatal pushers stand there twice: 4 x G_1, 2 x G_2; the
    # split at depth 3 credits (G_2 - G_1) / 2 over std 2 (G_2 - G_1) / sqrt(15)), then the three
    # states of the route (2 x G_t, 2 x G_t+1: (delta / 2) / (delta / sqrt(3)))
    _, credits = estimator_credits(lost, "ptgpo")
    fatal, safe = _kinds(lost)
    paper = math.sqrt(15) / 4 + 3 * math.sqrt(3) / 2
    assert credits[fatal][FATAL_STEP] == pytest.approx(paper, rel=1e-4)
    assert credits[safe][SAFE_STEP] == pytest.approx(-paper, rel=1e-4)
    # GiGPO: the decision state's group alone, G_5 - mean = (G_5 - G_4) / 2, no division
    _, gigpo = estimator_credits(lost, "gigpo")
    assert gigpo[fatal][FATAL_STEP] == pytest.approx((_g(5) - _g(4)) / 2, abs=1e-6)


def test_outcome_gated_ptgpo_gives_the_fatal_push_no_credit_when_all_lose(lost):
    _, credits = estimator_credits(lost, "ptgpo", root_spread="outcome_gated")
    fatal, _ = _kinds(lost)
    assert credits[fatal][FATAL_STEP] <= 0.0
    assert all(c == pytest.approx(0.0, abs=1e-9) for episode in credits for c in episode)


def test_floored_ptgpo_keeps_only_the_raw_timing_difference(lost):
    _, credits = estimator_credits(lost, "ptgpo", root_spread="floored", spread_floor=1.0)
    fatal, _ = _kinds(lost)
    raw = sum((_g(t + 1) - _g(t)) / 2 for t in (1, 2, 3, 4))  # every root spread < 1
    assert credits[fatal][FATAL_STEP] == pytest.approx(raw, abs=1e-6)


def test_lost_group_table_and_its_section(lost):
    rows = {r["variant"]: r for r in lost_group_table(lost)}
    assert rows["ptgpo (paper)"]["fatal"] == 3.566
    assert rows["ptgpo outcome_gated"]["fatal"] == rows["grpo"]["fatal"] == 0.0
    assert rows["ptgpo floored at 1"]["fatal"] == 0.144
    text = format_lost_group(list(rows.values()))
    assert "| ptgpo outcome_gated | +0.000 | +0.000 | 0.000 |" in text
    assert "-0.000" not in text
