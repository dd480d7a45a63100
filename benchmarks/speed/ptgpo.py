"""PTGPO advantage cost on a 16 groups x 8 episodes x 50 steps batch, and its growth with length.

    python -m agentenvs.benchmarks.speed.ptgpo                      # the full table
    python -m agentenvs.benchmarks.speed.ptgpo --quick              # fewer repeats
    python -m agentenvs.benchmarks.speed.ptgpo --out results/ptgpo_speed.md

The batch comes from a toy corridor (rooms 0-9, goal in room 9) walked by a biased random
policy: the anchor is the room's description, so anchor groups are large and action prefixes
are shared a few steps deep, as in ALFWorld-like tasks. The baseline, measured in the same run
on the same batch, is the GiGPO estimator (one level of anchor grouping, no tree). A second row
uses a deterministic policy (every episode identical): the worst case, where every tree is
expanded to the end of the episodes. Target: :data:`TARGET_S`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from agentenvs.benchmarks.speed.timing import SpeedRow, format_table, per_call, report
from agentenvs.train.advantages import (
    AdvantageBatch,
    Step,
    get_advantage_estimator,
    ptgpo_advantages,
)

__all__ = ["GROUPS", "EPISODES", "LENGTHS", "corridor_groups", "bench", "growth_rows", "main"]

GROUPS, EPISODES = 16, 8
LENGTHS = (10, 25, 50, 100, 200)
TARGET_STEPS = 50
TARGET_S = 0.050
"""PTGPO advantages for 16 x 8 x 50 steps under 50 ms, so that they never show in an
iteration's profile (a rollout of that batch takes minutes)."""
ROOMS, GOAL = 10, 9
ACTIONS = ("go east", "go west", "look", "wait")
BIASED_POLICY = (0.6, 0.2, 0.1, 0.1)
DETERMINISTIC_POLICY = (1.0, 0.0, 0.0, 0.0)


def corridor_groups(
    n_groups: int,
    n_episodes: int,
    n_steps: int,
    *,
    policy: tuple[float, ...] = BIASED_POLICY,
    seed: int = 0,
) -> list[list[list[Step]]]:
    """``n_groups`` tasks (start rooms) x ``n_episodes`` episodes of exactly ``n_steps`` steps.

    Reward 1 on the last step of an episode that reached the goal room, else 0 (sparse).
    """
    rng = np.random.default_rng(seed)
    groups = []
    for task in range(n_groups):
        start = task % (ROOMS - 1)
        episodes = []
        for _ in range(n_episodes):
            room, reached, steps = start, False, []
            choices = rng.choice(len(ACTIONS), size=n_steps, p=policy)
            for t, choice in enumerate(choices):
                anchor = f"You are in room {room}. Exits: east, west. Goal: room {GOAL}."
                action = ACTIONS[choice]
                room = min(room + 1, ROOMS - 1) if choice == 0 else room
                room = max(room - 1, 0) if choice == 1 else room
                reached = reached or room == GOAL
                reward = 1.0 if (t == n_steps - 1 and reached) else 0.0
                steps.append((anchor, action, reward))
            episodes.append(steps)
        groups.append(episodes)
    return groups


def _time(name: str, batch: AdvantageBatch, quick: bool) -> tuple[float, dict[str, float]]:
    estimator = get_advantage_estimator(name)
    config = estimator.make_config()

    def call() -> object:
        # a fresh batch each call, so the cached episode layout is rebuilt and timed too
        return estimator(_copy(batch), config)

    seconds = per_call(call, budget_s=0.3 if quick else 1.5, repeats=5 if quick else 9)
    return seconds, estimator(_copy(batch), config).metrics


def _copy(batch: AdvantageBatch) -> AdvantageBatch:
    return AdvantageBatch(
        batch.rewards,
        batch.response_mask,
        batch.group_index,
        batch.episode_index,
        batch.step_index,
        batch.anchors,
        batch.actions,
    )


def bench(quick: bool = False) -> list[SpeedRow]:
    """The 16 x 8 x 50 rows (biased and deterministic policy), against GiGPO on the same batch."""
    rows = []
    for label, policy in (
        ("biased policy", BIASED_POLICY),
        ("identical episodes", DETERMINISTIC_POLICY),
    ):
        groups = corridor_groups(GROUPS, EPISODES, TARGET_STEPS, policy=policy)
        batch = AdvantageBatch.from_groups(groups)
        ptgpo_s, metrics = _time("ptgpo", batch, quick)
        gigpo_s, _ = _time("gigpo", batch, quick)
        rows.append(
            SpeedRow(
                env_id="PTGPO",
                operation=(
                    f"advantages {GROUPS}x{EPISODES}x{TARGET_STEPS}, {label} "
                    f"(depth {metrics['adv/tree_depth_max']:.0f})"
                ),
                seconds=ptgpo_s,
                baseline="GiGPO, same batch",
                baseline_seconds=gigpo_s,
                target=f"< {TARGET_S * 1e3:.0f} ms",
                met=ptgpo_s < TARGET_S,
            )
        )
    groups = corridor_groups(GROUPS, EPISODES, TARGET_STEPS)
    batch = AdvantageBatch.from_groups(groups)
    reference_s = per_call(
        lambda: [ptgpo_advantages(episodes) for episodes in groups],
        budget_s=0.3 if quick else 1.5,
        repeats=3 if quick else 5,
    )
    rows.append(
        SpeedRow(
            env_id="PTGPO",
            operation=f"reference ptgpo_advantages {GROUPS}x{EPISODES}x{TARGET_STEPS} (Python)",
            seconds=reference_s,
            baseline="GiGPO, same batch",
            baseline_seconds=_time("gigpo", batch, quick)[0],
        )
    )
    return rows


def growth_rows(quick: bool = False, lengths: tuple[int, ...] = LENGTHS) -> list[dict[str, float]]:
    """PTGPO and GiGPO time per batch of 16 x 8 x T steps for each T (biased policy)."""
    out = []
    for steps in lengths:
        batch = AdvantageBatch.from_groups(corridor_groups(GROUPS, EPISODES, steps))
        ptgpo_s, metrics = _time("ptgpo", batch, quick)
        gigpo_s, _ = _time("gigpo", batch, quick)
        out.append(
            {
                "steps": steps,
                "rows": GROUPS * EPISODES * steps,
                "ptgpo_s": ptgpo_s,
                "gigpo_s": gigpo_s,
                "depth": metrics["adv/tree_depth_max"],
                "nodes": metrics["adv/tree_nodes"],
            }
        )
    return out


def format_growth(rows: list[dict[str, float]]) -> str:
    """A Markdown table of :func:`growth_rows`."""
    lines = [
        "| steps/episode | rows | PTGPO | GiGPO (baseline) | PTGPO/GiGPO | PTGPO per row "
        "| tree depth | tree nodes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['steps']} | {r['rows']} | {r['ptgpo_s'] * 1e3:.2f} ms | "
            f"{r['gigpo_s'] * 1e3:.2f} ms | {r['ptgpo_s'] / r['gigpo_s']:.2f}x | "
            f"{r['ptgpo_s'] / r['rows'] * 1e6:.2f} us | {r['depth']:.0f} | {r['nodes']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--out", type=Path, help="also write the tables to this Markdown file")
    args = parser.parse_args(argv)
    text = (
        format_table(bench(quick=args.quick))
        + f"\n\nGrowth with episode length ({GROUPS} groups x {EPISODES} episodes, "
        + "biased policy):\n\n"
        + format_growth(growth_rows(quick=args.quick))
    )
    report(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
