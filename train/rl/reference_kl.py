"""How far the policy moved from the initial one: ``actor/kl_to_initial`` each iteration.

The KL is measured on the policy that played the iteration (before its update) against the
initial weights (``model``, usually the SFT model), which a frozen copy holds. At each reply
position of a row it is exact: KL(pi || pi_0) = sum over the vocabulary of
p(v) (log p(v) - log p_0(v)) (:func:`agentenvs.train.rl.update.reply_statistics`), so the only
sampling is that of the contexts, which the rollout drew from pi. The rows are a seeded uniform
sample of the iteration's rows (``reference_kl_rows`` of them per rank, or all), whatever
their advantage, so every arm is measured on the same footing; the same pass gives
``actor/entropy_sampled``, pi's entropy over those tokens (``actor/entropy`` is over the rows
the update trains on). Both are means over the sampled reply tokens.

Cost: one forward pass of each model over the sampled rows. The sample bounds it: every row
would be two more forward passes over the whole batch, and on the learning benchmark's Sokoban
batches (640 rows, most of them without signal, which the update skips) those take longer than
the rest of the iteration.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from agentenvs.train.device import autocast_context
from agentenvs.train.distributed import DistContext, micro_batch_rounds, pad_passes
from agentenvs.train.rl.batch import StepRow, collate
from agentenvs.train.rl.update import reply_statistics

__all__ = ["kl_sample", "reference_kl"]


def kl_sample(rows: Sequence[StepRow], size: int, seed: int) -> list[StepRow]:
    """``size`` rows drawn uniformly without replacement by a generator seeded with ``seed`` (all
    of them when there are no more), in batch order; the global random state is untouched."""
    if len(rows) <= size:
        return list(rows)
    generator = torch.Generator().manual_seed(seed)
    picked = torch.randperm(len(rows), generator=generator)[:size].sort().values
    return [rows[i] for i in picked.tolist()]


def reference_kl(
    model: Any,
    reference: Any,
    rows: Sequence[StepRow],
    *,
    micro_batch_size: int,
    pad_id: int,
    device: torch.device,
    precision: str,
    ctx: DistContext | None = None,
) -> dict[str, float]:
    """``actor/kl_to_initial`` and ``actor/entropy_sampled`` over the reply tokens of ``rows``
    (of every rank's rows when ``ctx`` is distributed; no gradient, the rows unchanged)."""
    ctx = ctx or DistContext()
    model.eval()
    kl_sum = ent_sum = 0.0
    tokens = 0
    ordered = sorted(range(len(rows)), key=lambda i: (rows[i].length, i))
    chunks = [ordered[k : k + micro_batch_size] for k in range(0, len(ordered), micro_batch_size)]
    extra = micro_batch_rounds(ctx, len(chunks)) - len(chunks)  # before any FSDP collective
    with torch.no_grad():
        for chunk in chunks:
            batch = collate([rows[i] for i in chunk], pad_id, device)
            batch["prefix"] = None
            with autocast_context(device, precision):
                _, ent, kl = reply_statistics(model, batch, reference)
            mask = batch["response_mask"]
            kl_sum += float((kl * mask).sum())
            ent_sum += float((ent * mask).sum())
            tokens += int(mask.sum())
        for _ in range(extra):  # in the order of a micro-batch's passes: policy, then reference
            for passes in (model, reference):
                pad_passes(
                    passes, 1, pad_id=pad_id, device=device, precision=precision, backward=False
                )
    kl_sum, ent_sum, tokens = ctx.sum([kl_sum, ent_sum, tokens])
    return {
        "actor/kl_to_initial": kl_sum / max(tokens, 1),
        "actor/entropy_sampled": ent_sum / max(tokens, 1),
    }
