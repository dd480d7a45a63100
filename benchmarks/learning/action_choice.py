"""Does a policy read the observation? How each arm chose its actions in its evaluation episodes.

    python -m agentenvs.benchmarks.learning.action_choice \\
        --run results/learning/sokoban-val-a results/learning/sokoban-val-c \\
        --out docs/learning-check/sokoban/action-choice.md

Two figures per arm and seed, over the actions of the run's evaluation episodes
(``<arm>/seed-<s>/eval/trajectories.jsonl``) stepped while the task could still be won (after a
fatal action every move is as good as any other, and the oracles credit each 0):

* **shortest-move share**: the share of actions the expert judges a move of a shortest
  solution (step credit 0: :mod:`agentenvs.benchmarks.learning.envs` for Sokoban,
  :mod:`agentenvs.benchmarks.learning.keydoor` for KeyDoor). The ``random`` arm's share is what
  ignoring the observation gives; a policy that reads it moves above that.
* **reply surprisal**: the mean negative log-probability (nats) of the whole reply under the
  policy that sampled it. With a fixed thought the reply's only free part is the action, so a
  policy that picks uniformly among ``n`` actions has ``ln n`` (Sokoban: ln 4 = 1.386) and a
  decisive one near 0. The ``random`` arm has no model and no figure.

Each episode is replayed in the oracle arm's environment
(:data:`~agentenvs.benchmarks.learning.settings.ORACLE_ENVS`), whose steps report ``step_credit``
and ``solvable``, under the trajectory's recorded variant; every replayed observation must equal
the recorded one, else the trajectory is not this environment's and the command stops with an
error.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentenvs.agents.trajectory import Trajectory, read_trajectories

__all__ = ["ActionChoice", "action_choice", "main", "step_credits"]

SHORTEST_MOVE_CREDIT = 0.0
"""The step credit of a move on a shortest solution (each oracle's scale: 0 on a shortest
plan, below 0 for every turn the action adds to it)."""


@dataclass(frozen=True)
class ActionChoice:
    """One arm and seed: ``episodes``, ``steps`` (actions stepped while the task could still be
    won), ``won`` (episodes won),
    ``shortest_moves`` (steps with credit :data:`SHORTEST_MOVE_CREDIT`), ``surprisal`` (mean
    reply negative log-probability in nats; None without log-probabilities)."""

    episodes: int
    steps: int
    won: int
    shortest_moves: int
    surprisal: float | None

    @property
    def shortest_share(self) -> float:
        return self.shortest_moves / self.steps if self.steps else 0.0


def step_credits(traj: Trajectory) -> list[tuple[float, bool]]:
    """``(credit, solvable)`` of each stepped action of ``traj``: the
    expert's credit of the action and whether the task could still be won before it, by
    replaying the episode in the oracle environment (module docstring)."""
    from agentenvs.benchmarks.learning.plugins import register_benchmark_envs
    from agentenvs.benchmarks.learning.settings import ORACLE_ENVS
    from agentenvs.registration import make

    register_benchmark_envs()
    if traj.env_id not in ORACLE_ENVS:
        raise ValueError(f"no oracle step credit for {traj.env_id} (ORACLE_ENVS)")
    steps = [s for s in traj.steps if s.action is not None]
    env = make(ORACLE_ENVS[traj.env_id], max_turns=len(steps) + 1, **(traj.variant or {}))
    try:
        env.reset(options={"task_id": traj.task_id})
        credits = []
        for i, step in enumerate(steps):
            observation, *_, info = env.step(step.action)
            if observation != step.observation:
                raise ValueError(
                    f"replaying {traj.task_id} step {i + 1} ({step.action!r}) gives another "
                    "observation than the trajectory records: it is not this environment's"
                )
            credits.append((float(info["step_credit"]), bool(info["solvable"])))
        return credits
    finally:
        env.close()


def action_choice(trajs: Iterable[Trajectory]) -> ActionChoice:
    """:class:`ActionChoice` of ``trajs``."""
    episodes = won = steps = shortest = 0
    nll: list[float] = []
    for traj in trajs:
        episodes += 1
        won += int(traj.won)
        live = [credit for credit, solvable in step_credits(traj) if solvable]
        steps += len(live)
        shortest += sum(c == SHORTEST_MOVE_CREDIT for c in live)
        for step in traj.steps:
            if step.action is not None and step.logprobs:
                nll.append(-math.fsum(step.logprobs))
    surprisal = math.fsum(nll) / len(nll) if nll else None
    return ActionChoice(episodes, steps, won, shortest, surprisal)


def _format(rows: list[tuple[str, str, int, ActionChoice]]) -> str:
    lines = [
        "# How each arm chose its actions",
        "",
        "`python -m agentenvs.benchmarks.learning.action_choice` writes this page. Over the "
        "actions of each arm's evaluation episodes taken while the task could still be won "
        "(steps): the share the expert judges a move of a shortest solution, and the mean "
        "negative log-probability of the reply under the policy that sampled it (every reply; "
        "a uniform choice among n actions: ln n).",
        "",
        "| run | arm | seed | episodes | success | steps | shortest-move share "
        "| reply surprisal (nats) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run, arm, seed, c in rows:
        nats = "" if c.surprisal is None else f"{c.surprisal:.3f}"
        lines.append(
            f"| {run} | {arm} | {seed} | {c.episodes} | {c.won / c.episodes:.3f} | {c.steps} | "
            f"{c.shortest_share:.3f} | {nats} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--run", type=Path, nargs="+", required=True, help="learning_check --out folders"
    )
    parser.add_argument("--out", type=Path, default=None, help="the Markdown (else printed)")
    args = parser.parse_args(argv)
    rows = []
    for run in args.run:
        paths = sorted(run.glob("*/seed-*/eval/trajectories.jsonl"))
        if not paths:
            parser.error(f"{run} has no <arm>/seed-<s>/eval/trajectories.jsonl")
        for path in paths:
            arm, seed = path.parts[-4], int(path.parts[-3].removeprefix("seed-"))
            rows.append((run.name, arm, seed, action_choice(read_trajectories(path))))
    text = _format(rows)
    if args.out:
        args.out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
