"""Replay validation statuses on constructed trajectories, and snapshot reuse."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import pytest

from agentenvs.core import Outcome, TextEnv
from agentenvs.replay.query import CutQuery, DroppedCut, build_query, raw_query
from agentenvs.replay.validate import (
    ReplayStats,
    TrajectoryReplayer,
    ValidationStatus,
    validate_queries,
)

V, MM, UN, ER = (
    ValidationStatus.VALIDATED,
    ValidationStatus.MISMATCH,
    ValidationStatus.UNVERIFIABLE,
    ValidationStatus.ERROR,
)


def every_cut(traj, index: int = 0, strategy: str = "all") -> list[CutQuery]:
    """The raw query and a query after every assistant turn that makes one."""
    made = [build_query(traj, index, t, strategy) for t in range(len(traj.steps))]
    return [raw_query(traj, index)] + [q for q in made if not isinstance(q, DroppedCut)]


def statuses(queries, **kwargs) -> dict[int, ValidationStatus]:
    return {q.prefix_turns: r.status for q, r in validate_queries(queries, **kwargs)}


def corrupt_observation(traj, turn: int, new: str):
    """Replace the recorded observation of step ``turn`` (and its user message)."""
    old = traj.steps[turn].observation
    at = [i for i, m in enumerate(traj.messages) if m["role"] == "assistant"][turn] + 1
    traj.messages[at]["content"] = traj.messages[at]["content"].replace(old, new)
    traj.steps[turn] = dataclasses.replace(traj.steps[turn], observation=new)
    if turn + 1 < len(traj.steps):
        traj.steps[turn + 1] = dataclasses.replace(traj.steps[turn + 1], anchor=new)
    return traj


def test_a_good_trajectory_validates_every_cut(expert_trajectory) -> None:
    traj = expert_trajectory("TextCraft-v0", "agentgym/421")
    queries = every_cut(traj)
    assert len(queries) == len(traj.steps)  # raw + all but the last turn (episode over)
    results = list(validate_queries(queries))
    assert {r.status for _, r in results} == {V}
    q, r = results[2]
    assert r.replayed_observation == q.cut_observation
    assert r.cut_match.shared and r.probe_match.shared
    row = r.to_row()
    assert row["status"] == "validated" and row["cut_match"]["status"] == "match"


def test_a_corrupted_inventory_is_a_mismatch(expert_trajectory) -> None:
    traj = expert_trajectory("TextCraft-v0", "agentgym/421", insert={2: "inventory"})
    inventory = traj.steps[2].observation
    assert inventory.startswith("Inventory: [")
    corrupt_observation(traj, 2, inventory.replace("(", "(1", 1))
    by_turn = {q.prefix_turns: r for q, r in validate_queries(every_cut(traj))}
    assert by_turn[3].status is MM and "inventory" in by_turn[3].reason  # the cut itself
    assert by_turn[2].status is MM and by_turn[2].reason.startswith("probe")  # the probe
    assert set(by_turn[3].cut_match.differing) == {"inventory"}
    others = {t: r.status for t, r in by_turn.items() if t not in (2, 3)}
    assert set(others.values()) == {V}


def test_an_unparsed_reply_makes_its_cut_unverifiable(
    expert_trajectory, with_unparsed_turn
) -> None:
    traj = with_unparsed_turn(expert_trajectory("TextCraft-v0", "agentgym/421"), 2)
    queries = every_cut(traj)
    by_turn = {q.prefix_turns: (q, r) for q, r in validate_queries(queries)}
    q3, r3 = by_turn[3]  # cut right after the unparsed reply
    assert not q3.cut_from_env and r3.status is UN and "harness feedback" in r3.reason
    q2, r2 = by_turn[2]  # the next teacher turn has no action: no probe
    assert q2.probe_action is None and r2.status is V and "no next action" in r2.reason
    assert q3.prefix_actions == traj.actions[:2]
    assert {r.status for t, (_, r) in by_turn.items() if t not in (3,)} == {V}


def test_observations_without_shared_fields_are_unverifiable(expert_trajectory) -> None:
    traj = expert_trajectory("TextCraft-v0", "agentgym/421")
    corrupt_observation(traj, 1, "Something happened.")
    got = statuses(every_cut(traj))
    assert got[2] is UN  # cut: the recorded text has no fields
    assert got[1] is UN  # probe: likewise
    assert {s for t, s in got.items() if t not in (1, 2)} == {V}


def test_exceptions_are_errors(expert_trajectory) -> None:
    traj = expert_trajectory("TextCraft-v0", "agentgym/140")
    queries = every_cut(traj)
    unknown = [dataclasses.replace(q, task_id="agentgym/not-a-number") for q in queries]
    results = [r for _, r in validate_queries(unknown)]
    assert {r.status for r in results} == {ER}
    assert "UnknownTaskError" in results[0].reason
    no_env = [dataclasses.replace(q, env_id="Nope-v0") for q in queries]
    assert {r.status for _, r in validate_queries(no_env)} == {ER}


def test_a_prefix_past_the_episode_end_is_an_error_and_the_walk_recovers(expert_trajectory) -> None:
    traj = expert_trajectory("TextCraft-v0", "agentgym/421")
    good = every_cut(traj)
    too_long = dataclasses.replace(
        good[-1], prefix_turns=len(traj.steps) + 1, prefix_actions=traj.actions + ["inventory"]
    )
    replayer = TrajectoryReplayer(_textcraft())
    results = replayer.validate_trajectory(good[:3] + [too_long] + good[3:])
    assert results[3].status is ER and "EpisodeOverError" in results[3].reason
    assert {r.status for i, r in enumerate(results) if i != 3} == {V}
    assert replayer.stats.resets == 1  # the queries after the error continued from snapshots


def test_snapshot_reuse_replays_the_prefix_once(expert_trajectory) -> None:
    traj = expert_trajectory("TextCraft-v0", "agentgym/421")
    n = len(traj.steps)
    queries = every_cut(traj)
    reused, fresh = ReplayStats(), ReplayStats()
    with_reuse = statuses(queries, stats=reused)
    without = statuses(queries, stats=fresh, reuse_snapshots=False)
    assert with_reuse == without and set(with_reuse.values()) == {V}
    # one reset and one walk: each cut's probe is the next cut's last prefix action
    assert (reused.resets, reused.steps, reused.restores) == (1, n - 1 + 1, 0)
    # from reset: every query replays its prefix and probes
    assert fresh.resets == len(queries)
    assert fresh.steps == sum(
        q.prefix_turns + (0 if q.is_raw else 1) for q in queries
    )  # raw: no probe


def test_a_diverging_prefix_restores_the_deepest_snapshot_on_its_path(expert_trajectory) -> None:
    traj = expert_trajectory("TextCraft-v0", "agentgym/421")
    a = build_query(traj, 0, 2, "a")  # probes the teacher's 4th action
    b = dataclasses.replace(
        a,
        prefix_turns=4,
        prefix_actions=a.prefix_actions + ["inventory"],
        cut_observation="Inventory: You are not carrying anything.",
        probe_action=None,
        probe_observation=None,
    )
    replayer = TrajectoryReplayer(_textcraft())
    ra, rb = replayer.validate_trajectory([a, b])
    assert ra.status is V
    assert rb.replayed_observation.startswith("Inventory: [") and rb.status is MM
    assert (replayer.stats.resets, replayer.stats.restores) == (1, 1)
    assert replayer.stats.steps == 3 + 1 + 1  # prefix of a, probe of a, the diverging step


def test_equal_cuts_of_two_strategies_are_validated_once(expert_trajectory) -> None:
    traj = expert_trajectory("TextCraft-v0", "agentgym/421")
    one = [build_query(traj, 0, t, "one") for t in (1, 4)]
    two = [build_query(traj, 0, t, "two") for t in (1, 2)]
    stats = ReplayStats()
    results = list(validate_queries(one + two, stats=stats))
    assert [r.status for _, r in results] == [V] * 4
    assert stats.queries == 4 and stats.reused_results == 1
    assert results[0][1] is results[2][1]


def test_sokoban_through_the_generic_contract(expert_trajectory) -> None:
    from agentenvs import make

    env = make("Sokoban-v0")
    traj = expert_trajectory("Sokoban-v0", env.task_ids("test")[0])
    assert set(statuses(every_cut(traj)).values()) == {V}
    grid = traj.steps[1].observation
    moved = grid.replace("P", "_", 1).replace("_", "P", 1) if "P" in grid else grid + "\n#"
    assert moved != grid
    corrupt_observation(traj, 1, moved)
    got = statuses(every_cut(traj))
    assert got[2] is MM and got[1] is MM


# --- an environment without fields: exact text after whitespace normalisation ---------------


class CounterEnv(TextEnv):
    """A real TextEnv with no fields: counts 'add N' actions."""

    env_id: ClassVar[str] = "Counter-v0"
    default_max_turns: ClassVar[int] = 10

    def task_ids(self, split: str) -> list[str]:
        return ["start/0", "start/5"]

    def family(self, task_id: str) -> str:
        return "counter"

    def _start_task(self, task_id: str) -> str:
        self.total = int(task_id.split("/")[1])
        return f"Total:  {self.total}"

    def _apply(self, action: str) -> Outcome:
        if not action.startswith("add "):
            return Outcome("Unknown action.", valid=False)
        self.total += int(action[4:])
        return Outcome(f"You added {action[4:]}.\nTotal: {self.total}")

    def _get_state(self) -> Any:
        return self.total

    def _set_state(self, task_id: str, state: Any) -> None:
        self.total = state


def _counter_query(prefix: list[str], cut: str, probe: tuple[str, str] | None) -> CutQuery:
    return CutQuery(
        query_id="q",
        trajectory_id="t",
        trajectory_index=0,
        env_id="Counter-v0",
        task_id="start/5",
        family="counter",
        group_id="g",
        sample_index=0,
        agent="expert",
        strategy="s",
        prefix_turns=len(prefix),
        messages=[],
        prefix_actions=prefix,
        cut_observation=cut,
        cut_from_env=True,
        probe_action=probe[0] if probe else None,
        probe_observation=probe[1] if probe else None,
    )


def test_an_environment_without_fields_compares_normalised_text() -> None:
    replayer = TrajectoryReplayer(CounterEnv())
    ok = _counter_query(["add 2"], "You added 2.   Total: 7 ", ("add 1", "You added 1. Total:\t8"))
    wrong_cut = _counter_query(["add 2"], "You added 2. Total: 9", None)
    wrong_probe = _counter_query(["add 2"], "You added 2. Total: 7", ("add 1", "Total: 8"))
    raw = _counter_query([], "Total: 5", ("add 2", "You added 2. Total: 7"))
    results = replayer.validate_trajectory([ok, wrong_cut, wrong_probe, raw])
    assert [r.status for r in results] == [V, MM, MM, V]
    assert results[0].cut_match.shared == ("text",)
    assert results[2].reason.startswith("probe")


def _textcraft() -> TextEnv:
    from agentenvs import make

    return make("TextCraft-v0")


@pytest.mark.parametrize("reuse", [True, False])
def test_validation_never_raises_on_garbage_actions(reuse: bool) -> None:
    q = _counter_query(["add x"], "whatever", ("add 1", "x"))
    result = TrajectoryReplayer(CounterEnv(), reuse_snapshots=reuse).validate(q)
    assert result.status is ER and "ValueError" in result.reason
