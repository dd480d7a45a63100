"""Is the step credit right on a model's own Sokoban groups? Each estimator's advantages against
the expert's judgement of every action (no training).

    python -m agentenvs.benchmarks.learning.oracle_credit --model OUT/sft/seed-0/model \\
        --rooms 32 --samples 8 --out docs/learning-check/sokoban/oracle-credit.md

The model plays ``samples`` episodes of each of ``rooms`` training rooms (the benchmark's turn
limit and sampling: temperature 1); GRPO, GiGPO and PTGPO compute their advantages on those
groups as the trainer does (:func:`agentenvs.train.rl.batch.compute_advantages`, each
algorithm's default settings, the protocol's invalid-format penalty). The expert (a shortest
solver) labels every action from the position it was taken in:

* ``progress``: it shortens the shortest solution by one (a move of an optimal plan);
* ``fatal``: the room was solvable before it and is not after (a box pushed where it is stuck);
* ``detour``: any other action in a solvable position (a longer way, a bump into a wall, a
  reply that broke the format);
* ``lost``: an action taken after the room became unsolvable.

Per estimator and label, the table gives the mean advantage and the mean step credit (the
advantage minus the episode's outcome part), split by whether the episode was won. The question
it answers: do progress moves made in episodes that were later lost still get blamed (GRPO blames
every action of a lost episode), and does the fatal push get the blame?
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["LABELS", "label_actions", "main", "oracle_table"]

LABELS = ("progress", "detour", "fatal", "lost")
ALGOS = ("grpo", "gigpo", "ptgpo")


def label_actions(anchors: Sequence[str], actions: Sequence[str | None]) -> list[str]:
    """The expert's label (:data:`LABELS`) of each action of one Sokoban episode, from the grid
    it was taken in (an action of None: a reply without one, which moves nothing)."""
    from agentenvs.sokoban.board import ACTIONS, parse_grid
    from agentenvs.sokoban.expert import shortest_solution

    labels = []
    for anchor, action in zip(anchors, actions, strict=True):
        board = parse_grid(anchor)
        if board is None:
            raise ValueError(f"not a Sokoban grid: {anchor!r}")
        plan = shortest_solution(board)
        if plan is None:
            labels.append("lost")
            continue
        move = (action or "").strip().lower()
        after = board.step(ACTIONS.index(move)) if move in ACTIONS else board
        then = shortest_solution(after)
        if then is None:
            labels.append("fatal")
        elif len(then) == len(plan) - 1:
            labels.append("progress")
        else:
            labels.append("detour")
    return labels


def _rollouts(model: str, rooms: list[str], samples: int, max_turns: int, seed: int) -> list:
    from agentenvs.agents.policy import SamplingParams
    from agentenvs.agents.registry import make_policy
    from agentenvs.agents.rollout import RolloutConfig, plan_episodes, run_rollouts

    config = RolloutConfig(
        max_turns=max_turns,
        history="default",
        sampling=SamplingParams(1.0, 1.0, 24, seed),
    )
    policy = make_policy(f"hf:{model}")
    try:
        return run_rollouts(policy, "Sokoban-v0", plan_episodes(rooms, samples), config)
    finally:
        policy.close()


def _advantages(trajs: Sequence[Any], algo: str) -> list[list[tuple[float, float]]]:
    """(advantage, step credit) of every step of every trajectory under ``algo``."""
    from agentenvs.train.rl import RLConfig
    from agentenvs.train.rl.batch import INVALID_ACTION, StepRow, compute_advantages
    from agentenvs.train.rl.config import DataSettings

    config = RLConfig(algo=algo, data=DataSettings(env_id="Sokoban-v0"))
    rows, where = [], []
    for e, traj in enumerate(trajs):
        for t, step in enumerate(traj.steps):
            invalid = step.action is None or bool(step.info.get("format_error"))
            rows.append(
                StepRow(
                    prompt_ids=[0],
                    response_ids=[1],
                    rollout_log_probs=[0.0],
                    reward=float(step.reward) - (config.invalid_penalty if invalid else 0.0),
                    group_id=traj.group_id,
                    episode_id=f"{traj.group_id}/{traj.sample_index}",
                    step_index=t,
                    anchor=step.anchor,
                    action=step.action if step.action is not None else INVALID_ACTION,
                    episode_won=bool(traj.won),
                    episode_reward=float(traj.total_reward),
                )
            )
            where.append((e, t))
    settings = config.estimator_settings()
    compute_advantages(rows, config.spec.estimator, settings)
    outcome = _outcome_parts(rows, settings.get("normalize", "std"))
    out: list[list[tuple[float, float]]] = [[] for _ in trajs]
    for row, (e, _t) in zip(rows, where, strict=True):
        value = float(row.advantages[0])  # type: ignore[index]
        out[e].append((value, value - outcome[row.episode_id]))
    return out


def _outcome_parts(rows: Sequence[Any], normalize: str) -> dict[str, float]:
    """Each episode's outcome advantage within its group: (R - mean) / (std + 1e-6), or R - mean
    (R: the sum of the rows' rewards, as the estimators take it)."""
    totals: dict[str, float] = {}
    group_of: dict[str, str] = {}
    for row in rows:
        totals[row.episode_id] = totals.get(row.episode_id, 0.0) + row.reward
        group_of[row.episode_id] = row.group_id
    out = {}
    for group in set(group_of.values()):
        members = [e for e in totals if group_of[e] == group]
        values = [totals[e] for e in members]
        mean = sum(values) / len(values)
        std = (
            (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
            if len(values) > 1
            else 0.0
        )
        for e in members:
            centred = totals[e] - mean if len(values) > 1 else 0.0
            out[e] = centred if normalize == "mean" else centred / (std + 1e-6)
    return out


def oracle_table(trajs: Sequence[Any]) -> dict[str, Any]:
    """{counts: {label: {won: n, lost: n}}, algos: {algo: {label: {won|lost: {advantage,
    credit}}}}}: mean advantage and step credit per expert label and episode outcome."""
    labels = [
        label_actions([s.anchor for s in t.steps], [s.action for s in t.steps]) for t in trajs
    ]
    counts: dict[str, dict[str, int]] = {lab: {"won": 0, "lost": 0} for lab in LABELS}
    for traj, labs in zip(trajs, labels, strict=True):
        for lab in labs:
            counts[lab]["won" if traj.won else "lost"] += 1
    groups_won = {t.group_id for t in trajs if t.won}
    algos: dict[str, Any] = {}
    for algo in ALGOS:
        sums: dict[tuple[str, str], list[float]] = {}
        steps: list[tuple[str, str, float, bool]] = []  # (label, outcome, advantage, any win)
        no_win = [0.0, 0.0, 0.0, 0.0]  # |adv|, |credit| in groups without a win; totals
        for traj, labs, values in zip(trajs, labels, _advantages(trajs, algo), strict=True):
            outcome = "won" if traj.won else "lost"
            some_win = traj.group_id in groups_won
            for lab, (adv, credit) in zip(labs, values, strict=True):
                acc = sums.setdefault((lab, outcome), [0.0, 0.0, 0.0])
                acc[0] += adv
                acc[1] += credit
                acc[2] += 1
                steps.append((lab, outcome, adv, some_win))
                no_win[2] += abs(adv)
                no_win[3] += abs(credit)
                if not some_win:
                    no_win[0] += abs(adv)
                    no_win[1] += abs(credit)
        algos[algo] = {
            lab: {
                outcome: (
                    {"advantage": acc[0] / acc[2], "credit": acc[1] / acc[2]}
                    if (acc := sums.get((lab, outcome)))
                    else None
                )
                for outcome in ("won", "lost")
            }
            for lab in LABELS
        }
        algos[algo]["separation"] = _separations(steps)
        has_credit = no_win[3] > 1e-6 * max(len(steps), 1)  # GRPO: none (float dust only)
        algos[algo]["no_win_share"] = {
            "advantage": no_win[0] / no_win[2] if no_win[2] else None,
            "credit": no_win[1] / no_win[3] if has_credit else None,
        }
    return {
        "counts": counts,
        "groups": len({t.group_id for t in trajs}),
        "groups_with_a_win": len(groups_won),
        "algos": algos,
    }


SEPARATIONS = {
    "progress - detour": (("progress", None), ("detour", None)),
    "progress - detour, lost episodes": (("progress", "lost"), ("detour", "lost")),
    "progress - fatal, lost episodes": (("progress", "lost"), ("fatal", "lost")),
}
"""Effect sizes reported: (label, outcome or None for both) of the first minus the second."""


def _separations(steps: Sequence[tuple[str, str, float, bool]]) -> dict[str, float | None]:
    """Effect size d = (mean A of one kind of step - mean A of another) / std of A over every
    step of a group with a win (where the outcome says anything), for :data:`SEPARATIONS`."""
    informative = [a for _lab, _o, a, some_win in steps if some_win]
    if len(informative) < 2:
        return {name: None for name in SEPARATIONS}
    mean = sum(informative) / len(informative)
    std = (sum((a - mean) ** 2 for a in informative) / (len(informative) - 1)) ** 0.5
    out: dict[str, float | None] = {}
    for name, (first, second) in SEPARATIONS.items():
        means = []
        for lab, outcome in (first, second):
            vals = [
                a
                for lb, o, a, some_win in steps
                if some_win and lb == lab and (outcome is None or o == outcome)
            ]
            means.append(sum(vals) / len(vals) if vals else None)
        ok = std > 0 and None not in means
        out[name] = (means[0] - means[1]) / std if ok else None  # type: ignore[operator]
    return out


def format_oracle(table: dict[str, Any], *, model: str, rooms: str, samples: int) -> str:
    """The page: label counts, mean advantage per label and outcome, effect sizes, no-win
    shares (``rooms`` says which rooms were played)."""
    counts = table["counts"]
    won = sum(c["won"] for c in counts.values())
    lost = sum(c["lost"] for c in counts.values())
    lines = [
        "# Step credit against the expert, on a model's own Sokoban groups",
        "",
        f"`python -m agentenvs.benchmarks.learning.oracle_credit` (module docstring): model "
        f"`{model}`, {rooms} x {samples} episodes (temperature 1, turn limit 10); "
        f"{won} steps of won and {lost} steps of lost episodes. Labels by the shortest solver: "
        "progress (shortens the shortest solution by one), detour (anything else while "
        "solvable), fatal (makes the room unsolvable), lost (after that).",
        "",
        "| label | steps (won / lost episodes) |",
        "|---|---|",
    ]
    lines += [f"| {lab} | {counts[lab]['won']} / {counts[lab]['lost']} |" for lab in LABELS]
    lines += [
        "",
        "Mean advantage (mean step credit beyond the episode's outcome part), by label and the "
        "episode's outcome:",
        "",
        "| estimator | " + " | ".join(f"{lab}, won | {lab}, lost" for lab in LABELS) + " |",
        "|---|" + "---|" * (2 * len(LABELS)),
    ]
    for algo, per_label in table["algos"].items():
        cells = []
        for lab in LABELS:
            for outcome in ("won", "lost"):
                v = per_label[lab][outcome]
                cells.append(
                    "-" if v is None else f"{_signed(v['advantage'])} ({_signed(v['credit'])})"
                )
        lines.append(f"| {algo} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"{table['groups_with_a_win']} of {table['groups']} groups have a won episode. Effect "
        "sizes (difference of mean advantage / std of the advantages of the steps of groups "
        "with a win, those steps only) and the share of |advantage| and of |step credit| that "
        "falls in groups without a win (where no outcome can be told apart: step penalties, "
        "timing and format only):",
        "",
        "| estimator | " + " | ".join(SEPARATIONS) + " | no-win share of abs(advantage) | "
        "no-win share of abs(step credit) |",
        "|---|" + "---|" * (len(SEPARATIONS) + 2),
    ]
    for algo, per_label in table["algos"].items():
        seps = [_fmt2(per_label["separation"][name]) for name in SEPARATIONS]
        shares = [_fmt2(per_label["no_win_share"][k]) for k in ("advantage", "credit")]
        lines.append(f"| {algo} | " + " | ".join(seps + shares) + " |")
    return "\n".join(lines) + "\n"


def _fmt2(value: float | None) -> str:
    return "-" if value is None else f"{round(value, 2) + 0.0:.2f}"


def _signed(value: float) -> str:
    return f"{round(value, 2) + 0.0:+.2f}"  # no -0.00


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a model directory (hf: policy)")
    parser.add_argument("--rooms", type=int, default=32, help="rooms seed/F .. F+N-1")
    parser.add_argument(
        "--first",
        type=int,
        default=0,
        help="F (train seeds: 0-255 the benchmark's training rooms, 256-279 its validation rooms)",
    )
    parser.add_argument("--samples", type=int, default=8, help="episodes per room (group size)")
    parser.add_argument("--max-turns", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="write the markdown here (else print it)")
    parser.add_argument("--json", default=None, help="also write the table as JSON here")
    parser.add_argument(
        "--trajectories",
        default=None,
        help="a trajectories file: read it if it exists (no rollouts), else write the rollouts",
    )
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    rooms = [f"seed/{s}" for s in range(args.first, args.first + args.rooms)]
    from agentenvs.agents.trajectory import read_trajectories, write_trajectories

    cached = Path(args.trajectories) if args.trajectories else None
    if cached is not None and cached.is_file():
        trajs = list(read_trajectories(cached))
    else:
        trajs = _rollouts(args.model, rooms, args.samples, args.max_turns, args.seed)
        if cached is not None:
            write_trajectories(cached, trajs)
    table = oracle_table(trajs)
    last = args.first + args.rooms - 1
    where = f"{args.rooms} rooms (train seeds {args.first}-{last})"
    text = format_oracle(table, model=args.model, rooms=where, samples=args.samples)
    if args.json:
        import json

        Path(args.json).write_text(json.dumps(table, indent=1))
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
