"""No wasted passes: the trainer's side of an iteration with and without the zero-advantage skip.

    python -m agentenvs.benchmarks.speed.zero_advantage [--rows 64] [--zero-frac 1.0 0.75 0.0]

A batch where every group had equal rewards (all advantages 0, prefix advantage 0) cannot change
a weight; the trainer skips the old-log-prob and update passes of such rows
(:func:`agentenvs.train.rl.update.zero_advantage_rows`) and, when no row has a signal, the optimizer
step. This times the old-log-prob pass plus the PPO epochs (what
:meth:`agentenvs.train.rl.RLTrainer.iteration` runs after the rollout) on synthetic rows with a
share ``zero-frac`` of zero-advantage rows, with the skip off (every pass, as before) and on, in the
same run on the same model, and prints the ratio. The rollout is not part of it (it is the same
either way).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentenvs.benchmarks.speed.timing import report
from agentenvs.benchmarks.speed.train import SMALL_SHAPE, _random_model, _synthetic_rows

__all__ = ["main", "trainer_side_seconds"]


def trainer_side_seconds(
    model: Any, rows: list[Any], *, skip: bool, ppo_epochs: int = 2, micro_batch_size: int = 16
) -> tuple[float, dict[str, float]]:
    """Seconds of old log-probs + PPO epochs over ``rows`` (a copy of ``model``), and metrics."""
    import torch

    from agentenvs.train.losses import PolicyLossConfig
    from agentenvs.train.rl.update import (
        UpdateSettings,
        ppo_update,
        recompute_old_log_probs,
        zero_advantage_rows,
    )

    device = torch.device("cpu")
    model = copy.deepcopy(model)
    settings = UpdateSettings(
        policy=PolicyLossConfig(),
        prefix=None,
        correction=None,
        ppo_epochs=ppo_epochs,
        mini_batches=1,
        micro_batch_size=micro_batch_size,
        max_grad_norm=1.0,
        precision="fp32",
        seed=0,
        skip_zero_advantage=skip,
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    for r in rows:
        r.old_log_probs = None
    start = time.perf_counter()
    zero = zero_advantage_rows(rows, settings)
    needed = [r for r, z in zip(rows, zero, strict=True) if not z]
    if needed:
        recompute_old_log_probs(
            model, needed, micro_batch_size=micro_batch_size, pad_id=0, device=device,
            precision="fp32",
        )  # fmt: skip
    metrics = ppo_update(
        model, optimizer, scheduler, rows, settings, iteration=0, pad_id=0, device=device,
        last_checkpoint=None,
    )  # fmt: skip
    return time.perf_counter() - start, metrics


def _rows(count: int, zero_frac: float, prompt: int, response: int) -> list[Any]:
    import torch

    rows = _synthetic_rows(count, prompt, response, SMALL_SHAPE.vocab_size, seed=0)
    for r in rows[: int(round(count * zero_frac))]:
        r.advantages = torch.zeros(len(r.response_ids))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=192)
    parser.add_argument("--response", type=int, default=32)
    parser.add_argument("--zero-frac", type=float, nargs="+", default=[1.0, 0.75, 0.0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = _random_model(SMALL_SHAPE, torch.device("cpu"), seed=0)
    lines = [
        f"# Zero-advantage skip: old log-probs + 2 PPO epochs, {args.rows} rows of "
        f"{args.prompt}+{args.response} tokens, model {SMALL_SHAPE}, {args.threads} thread(s)",
        "",
        "| zero-advantage rows | every pass (s) | with the skip (s) | ratio | optimizer steps "
        "(skip) |",
        "|---|---|---|---|---|",
    ]
    for frac in args.zero_frac:
        rows = _rows(args.rows, frac, args.prompt, args.response)
        full, fast, steps = [], [], 0.0
        for _ in range(args.repeats):  # interleaved: the same load on both
            full.append(trainer_side_seconds(model, rows, skip=False)[0])
            seconds, metrics = trainer_side_seconds(model, rows, skip=True)
            fast.append(seconds)
            steps = metrics["actor/optimizer_steps"]
        a, b = statistics.median(full), statistics.median(fast)
        lines.append(f"| {frac:.0%} | {a:.3f} | {b:.3f} | {a / b:.1f}x | {steps:.0f} |")
    report("\n".join(lines), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
