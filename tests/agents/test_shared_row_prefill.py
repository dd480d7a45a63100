"""Row-wise prefill runs a prompt once for the rows that have it with the same base
(``share_identical_rows``): the replies' token ids and log-probs are those of every row running
its own pass, bit for bit, over turns where the bases come from the shared prefix and from each
episode's prefix cache."""

from __future__ import annotations

import dataclasses

from agentenvs.agents.backends.transformers_backend import TransformersPolicy
from agentenvs.agents.policy import SamplingParams

from .conftest import CONVERSATIONS, SYSTEM

SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=12, seed=7)


def _turn_2(index: int) -> list[dict[str, str]]:
    """A re-rendered prompt (not extending turn 1: a template prompt restating the last step),
    the same for every episode of one task."""
    first = CONVERSATIONS[index][1]["content"]
    return [SYSTEM, {"role": "user", "content": f"{first} Your last step: look. Now: act."}]


def _rollout(policy: TransformersPolicy, share: bool) -> list[tuple[list[int], list[float]]]:
    """Two turns of 9 episodes (3 tasks x 3 samples, interleaved), keyed for the prefix cache."""
    policy.share_identical_rows = share
    policy.shared_row_passes = 0
    tasks = [i % 3 for i in range(9)]
    keys = [f"{t}/{i}" for i, t in enumerate(tasks)]
    out = []
    for turn, conversations in enumerate(
        ([CONVERSATIONS[t] for t in tasks], [_turn_2(t) for t in tasks])
    ):
        sampling = dataclasses.replace(SAMPLING, seed=SAMPLING.seed + turn)
        outs = policy.generate(conversations, sampling, keys=keys)
        out += [(list(o.token_ids), list(o.logprobs)) for o in outs]
    policy.end_episodes(keys)
    return out


def test_rows_sharing_a_pass_give_every_rows_own_outputs_bit_for_bit(tiny_model_dir) -> None:
    own = TransformersPolicy(str(tiny_model_dir), device="cpu", dtype="float32")
    shared = TransformersPolicy.from_model(own.model, own.tokenizer)
    want = _rollout(own, share=False)
    assert own.shared_row_passes == 0
    got = _rollout(shared, share=True)
    assert shared.shared_row_passes >= 12  # 6 twins a turn, on both turns
    assert [g[0] for g in got] == [w[0] for w in want]
    assert [g[1] for g in got] == [w[1] for w in want]  # float equality, not a tolerance
    assert shared.cache_stats is not None and shared.cache_stats.rows_reusing > 0
