"""Learning or the rooms? The SFT model on the training rooms RL drew in given iterations.

    python -m agentenvs.benchmarks.learning.room_order --run results/learning/sokoban \\
        --out docs/learning-check/sokoban/room-order.md

RL draws its training rooms through the trainer's seeded shuffle (:class:`StartStream`), the
same order for every arm of a seed, so a rise of training success over the iterations can come
from the rooms as well as from learning. This plays each seed's SFT model (the arms' common
start) on the rooms of the first and of the last iterations, ``episodes`` times each, with the
benchmark's evaluation settings, and sets the RL arms' own training success on those rooms
beside it (``summary.json``'s ``training``). Equal columns mean the rise is the rooms'.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["drawn_rooms", "main"]


def drawn_rooms(task_ids: Sequence[str], seed: int, first: int, count: int, per: int) -> list[str]:
    """The rooms RL's iterations ``first .. first+count-1`` (1-based) drew, ``per`` an iteration."""
    from agentenvs.train.rl.starts import StartStream

    stream = StartStream(list(task_ids), seed, position=(first - 1) * per)
    return list(stream.take(count * per))


def _rate(per_task: dict[str, list[int]]) -> float:
    return sum(c for c, _ in per_task.values()) / sum(n for _, n in per_task.values())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="a learning_check --out folder")
    parser.add_argument("--preset", default="sokoban")
    parser.add_argument("--iterations", type=int, default=8, help="iterations in each slice")
    parser.add_argument("--episodes", type=int, default=8, help="SFT episodes per room")
    parser.add_argument("--out", type=Path, default=None, help="the Markdown (else printed)")
    args = parser.parse_args(argv)
    import torch

    from agentenvs.benchmarks.learning.settings import preset
    from agentenvs.benchmarks.learning.stages import evaluate_tasks

    torch.set_num_threads(1)
    summary = json.loads((args.run / "summary.json").read_text())
    settings = dataclasses.replace(preset(args.preset), eval_n=args.episodes)
    per, last = settings.rl_prompts, settings.rl_iterations
    slices = [(1, args.iterations), (last - args.iterations + 1, args.iterations)]
    rows: list[dict[str, Any]] = []
    for seed in settings.seeds:
        sft = json.loads((args.run / "sft" / f"seed-{seed}" / "result.json").read_text())
        for first, count in slices:
            rooms = drawn_rooms(summary["rl_task_ids"], seed, first, count, per)
            where = args.run / "room-order" / f"seed-{seed}-it{first}"
            per_task = evaluate_tasks(settings, Path(sft["model"]), rooms, seed, where)
            arms = {
                arm: sum(runs[str(seed)]["rollout/success_rate"][first - 1 : first - 1 + count])
                / count
                for arm, runs in summary["training"].items()
            }
            rows.append(
                {
                    "seed": seed,
                    "iterations": f"{first}-{first + count - 1}",
                    "rooms": len(rooms),
                    "sft": _rate(per_task),
                    "arms": arms,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    text = _format(rows, args.episodes)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


def _format(rows: list[dict[str, Any]], episodes: int) -> str:
    arms = list(rows[0]["arms"])
    lines = [
        "# Learning or the rooms?",
        "",
        "`python -m agentenvs.benchmarks.learning.room_order` writes this page. Training success "
        "on the rooms RL drew in the first and the last iterations (the same rooms for every arm "
        f"of a seed): the seed's SFT model, {episodes} episodes a room at temperature 1, against "
        "each RL arm's own training success on them while it trained.",
        "",
        "| seed | iterations | rooms | SFT model | " + " | ".join(arms) + " |",
        "|---|---|---|---|" + "---|" * len(arms),
    ]
    for r in rows:
        cells = " | ".join(f"{r['arms'][a]:.3f}" for a in arms)
        head = f"| {r['seed']} | {r['iterations']} | {r['rooms']} | {r['sft']:.3f}"
        lines.append(f"{head} | {cells} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
