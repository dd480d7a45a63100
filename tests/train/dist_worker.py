"""What each rank runs in the distributed tests (started by ``torchrun`` from
``test_distributed.py``; also importable there for the one-process reference).

``python -m torch.distributed.run --nproc-per-node 2 tests/train/dist_worker.py update MODEL OUT``
shards MODEL over the ranks with FSDP2 and runs the RL update on a fixed synthetic batch (this
rank's share of its groups); each rank writes its metrics to ``OUT/metrics-<rank>.json``, rank 0
the updated weights to ``OUT/weights.pt``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

AGG_MODES = ("token-mean", "seq-mean-token-mean")
GROUPS = 5  # groups of unequal sizes: the ranks get different row and micro-batch counts
LR = 0.5


def synthetic_rows(vocab: int, seed: int = 0) -> list:
    """A fixed batch of step rows: 5 groups of 2 to 4 episodes, 1 to 2 steps each, random
    tokens and rewards (every group has reward variance)."""
    from agentenvs.train.rl.batch import StepRow

    gen = torch.Generator().manual_seed(seed)

    def ints(low: int, high: int, n: int) -> list[int]:
        return torch.randint(low, high, (n,), generator=gen).tolist()

    rows = []
    for g in range(GROUPS):
        for e in range(2 + g % 3):
            reward = float(e % 2) + 0.1 * g
            for step in range(1 + (g + e) % 2):
                prompt = ints(3, vocab, int(ints(4, 16, 1)[0]))
                reply = ints(3, vocab, int(ints(2, 9, 1)[0]))
                rows.append(
                    StepRow(
                        prompt_ids=prompt,
                        response_ids=reply,
                        rollout_log_probs=(-torch.rand(len(reply), generator=gen) * 5).tolist(),
                        reward=reward,
                        group_id=f"g{g}",
                        episode_id=f"g{g}/{e}",
                        step_index=step,
                        anchor=f"obs{step}",
                        action="act",
                        episode_won=bool(e % 2),
                        episode_reward=reward,
                    )
                )
    return rows


def rank_rows(rows: list, rank: int, world: int) -> list:
    """The rows of this rank's groups (group g goes to rank g % world, as the trainer shards)."""
    return [r for r in rows if int(r.group_id[1:]) % world == rank]


def run_update(model, rows: list, agg_mode: str, ctx=None) -> dict[str, float]:
    """Old log-probs, then 2 PPO epochs of SGD steps over ``rows`` (micro-batches of 2)."""
    from agentenvs.train.losses import PolicyLossConfig
    from agentenvs.train.rl.batch import compute_advantages
    from agentenvs.train.rl.update import (
        UpdateSettings,
        apply_correction,
        ppo_update,
        recompute_old_log_probs,
    )
    from agentenvs.train.runtime import make_scheduler

    device = torch.device("cpu")
    if rows:
        compute_advantages(rows, "grpo", {})
    metrics = recompute_old_log_probs(
        model, rows, micro_batch_size=2, pad_id=0, device=device, precision="fp32", ctx=ctx
    )
    if rows:
        apply_correction(rows, None)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    settings = UpdateSettings(
        PolicyLossConfig(agg_mode=agg_mode),
        None,
        None,
        ppo_epochs=2,
        mini_batches=1,
        micro_batch_size=2,
        max_grad_norm=1e9,
        precision="fp32",
        seed=0,
    )
    metrics.update(
        ppo_update(
            model,
            optimizer,
            make_scheduler(optimizer, 2, 0.0, "constant"),
            rows,
            settings,
            iteration=0,
            pad_id=0,
            device=device,
            last_checkpoint=None,
            ctx=ctx,
        )
    )
    return metrics


def main_update(model_dir: str, out: str) -> None:
    import faulthandler

    from transformers import AutoModelForCausalLM

    from agentenvs.train.distributed import full_model_state, init_distributed, shard_model

    faulthandler.dump_traceback_later(150, exit=True)  # a hung collective fails, not hangs
    torch.set_num_threads(1)
    ctx = init_distributed("cpu")
    results, weights = {}, {}
    for mode in AGG_MODES:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        shard_model(model, ctx, precision="fp32")
        rows = rank_rows(synthetic_rows(model.config.vocab_size), ctx.rank, ctx.world_size)
        results[mode] = run_update(model, rows, mode, ctx)
        weights[mode] = full_model_state(model, ctx)
    Path(out, f"metrics-{ctx.rank}.json").write_text(json.dumps(results))
    if ctx.is_main:
        torch.save(weights, Path(out, "weights.pt"))
    ctx.close()


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command != "update":
        raise SystemExit(f"unknown command {command!r}; choose 'update'")
    main_update(*args)
