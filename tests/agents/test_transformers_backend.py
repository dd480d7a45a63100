"""The transformers backend: every prefill strategy gives the teacher-forced log-probs; sampling;
prefix caching across turns gives the outputs of re-encoding every prompt from scratch."""

from __future__ import annotations

import pytest
import torch

from agentenvs.agents.backends.cpu.engine import EngineSettings
from agentenvs.agents.backends.kv_cache import PrefixCache, common_prefix_length
from agentenvs.agents.backends.transformers_backend import TransformersPolicy, left_pad, sample_next
from agentenvs.agents.policy import SamplingParams
from agentenvs.agents.rollout import RolloutConfig, plan_episodes, run_rollouts
from agentenvs.registration import make

from .conftest import CONVERSATIONS, SYSTEM, logprob_gap, teacher_forced_diff


@pytest.mark.parametrize(
    ("prefill", "share_prefix"),
    [("rows", True), ("rows", False), ("batch", True), ("batch", False)],
)
def test_prefill_strategies_match_teacher_forcing(
    tiny_model_dir, prefill: str, share_prefix: bool
) -> None:
    policy = TransformersPolicy(
        str(tiny_model_dir),
        device="cpu",
        engine=EngineSettings(prefill=prefill, share_prefix=share_prefix),
    )
    outs = policy.generate(CONVERSATIONS, SamplingParams(max_new_tokens=12, seed=3))
    assert all(1 <= len(o.token_ids) == len(o.logprobs) <= 12 for o in outs)
    assert teacher_forced_diff(policy, CONVERSATIONS, outs) < 1e-4


def test_greedy_and_seeded_sampling_are_repeatable(tiny_policy) -> None:
    greedy = SamplingParams(temperature=0, max_new_tokens=10)
    one = tiny_policy.generate(CONVERSATIONS, greedy)
    assert [o.token_ids for o in one] == [
        o.token_ids for o in tiny_policy.generate(CONVERSATIONS, greedy)
    ]
    # a row's greedy reply does not depend on the rest of the batch (padding is masked)
    alone = tiny_policy.generate(CONVERSATIONS[1:2], greedy)[0]
    assert alone.token_ids == one[1].token_ids
    seeded = SamplingParams(max_new_tokens=10, seed=11)
    assert [o.text for o in tiny_policy.generate(CONVERSATIONS, seeded)] == [
        o.text for o in tiny_policy.generate(CONVERSATIONS, seeded)
    ]


def test_left_pad() -> None:
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0, device="cpu")
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_top_p_never_samples_outside_the_nucleus() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]] * 4000))
    generator = torch.Generator().manual_seed(0)
    drawn = sample_next(logits, SamplingParams(top_p=0.8), generator)
    assert set(drawn.tolist()) == {0, 1}  # 0.5 + 0.3 reaches 0.8: tokens 2 and 3 are cut
    share = (drawn == 0).float().mean().item()
    assert abs(share - 0.5 / 0.8) < 0.03
    assert sample_next(logits[:1], SamplingParams(temperature=0)).tolist() == [0]


# --------------------------------------------------------------------------------------------
# Prefix caching across turns

GREEDY = SamplingParams(temperature=0, max_new_tokens=10)
TURN_1 = [SYSTEM, {"role": "user", "content": "Goal: craft stick. Crafting commands: ..."}]


def _turn_2(reply: str, first_user: str = TURN_1[1]["content"]) -> list[dict[str, str]]:
    return [
        SYSTEM,
        {"role": "user", "content": first_user},
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "Got 1 oak logs. Inventory: [oak logs] (1)"},
    ]


@pytest.fixture(scope="module")
def pair(tiny_model_dir):
    """A caching and a non-caching policy sharing one model, for each prefill strategy."""

    def make_pair(prefill: str, **options) -> tuple[TransformersPolicy, TransformersPolicy]:
        cached = TransformersPolicy.with_options(
            str(tiny_model_dir), device="cpu", prefill=prefill, **options
        )
        options.pop("prefix_cache_mb", None)
        plain = TransformersPolicy.from_model(
            cached.model, cached.tokenizer, prefill=prefill, prefix_cache=False, **options
        )
        return cached, plain

    return make_pair


def _same(cached, plain, conversations, *, keys, sampling=GREEDY) -> list:
    """Generate with and without the cache: same tokens, log-probs within float noise, and
    within 1e-4 of a teacher-forced pass."""
    got = cached.generate(conversations, sampling, keys=keys)
    want = plain.generate(conversations, sampling)
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    for g, w in zip(got, want, strict=True):
        assert max(abs(a - b) for a, b in zip(g.logprobs, w.logprobs, strict=True)) < 1e-5
    assert teacher_forced_diff(cached, conversations, got) < 1e-4
    return got


@pytest.mark.parametrize(
    ("prefill", "sampling"),
    [
        ("rows", SamplingParams(temperature=1.0, max_new_tokens=16, seed=5)),
        ("batch", SamplingParams(temperature=0, max_new_tokens=16)),
    ],
)
def test_cached_multi_turn_textcraft_rollout_equals_uncached(
    pair, prefill: str, sampling: SamplingParams
) -> None:
    """A multi-turn TextCraft rollout (2 tasks x 2 samples, 4 turns, every turn kept, batches
    split in chunks of 3): seeded-sampling and greedy outputs equal the non-caching policy's,
    most prompt tokens come from the cache, and every episode's cache is freed at its end."""
    cached, plain = pair(prefill, max_batch_size=3)
    env = make("TextCraft-v0")
    plan = plan_episodes(env.task_ids("test")[:2], 2)
    config = RolloutConfig(max_turns=4, history=None, sampling=sampling)
    runs = [
        {(t.group_id, t.sample_index): t for t in run_rollouts(p, "TextCraft-v0", plan, config)}
        for p in (cached, plain)
    ]
    assert not cached.prefix_cache.entries  # every finished episode was released
    worst = 0.0
    for key, got in runs[0].items():
        want = runs[1][key]
        assert got.turns == want.turns == 4
        for a, b in zip(got.steps, want.steps, strict=True):
            assert a.token_ids == b.token_ids and a.completion == b.completion
            worst = max(worst, max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)))
    assert worst < 1e-5
    stats = cached.cache_stats
    # turns 2-4 of every episode reuse their own cache; a later chunk's first turn may reuse an
    # earlier chunk's episodes (same system prompt and task)
    assert stats.reused_share > 0.5 and stats.rows_reusing >= 3 * len(plan), stats


@pytest.mark.parametrize("prefill", ["rows", "batch"])
def test_prompts_that_do_not_extend_the_cache_fall_back_exactly(pair, prefill: str) -> None:
    cached, plain = pair(prefill)
    first = _same(cached, plain, [TURN_1], keys=["e"])[0]
    turn_1_ids = cached.prompt_ids(TURN_1)
    entry = cached.prefix_cache.entries["e"]
    assert list(entry.tokens) == turn_1_ids + first.token_ids[:-1]

    # the next turn extends the cache: at least the whole first prompt is reused
    reused = cached.cache_stats.reused_tokens
    _same(cached, plain, [_turn_2(first.text)], keys=["e"])
    assert cached.cache_stats.reused_tokens - reused >= len(turn_1_ids)

    # a re-rendered earlier turn (the first user message changed near its end), a history
    # window that dropped the first exchange, and a brand-new system prompt: the matching part
    # is reused (less than the first prompt), or nothing
    edited = _turn_2(first.text, first_user=TURN_1[1]["content"] + " (edited)")
    windowed = [SYSTEM, {"role": "user", "content": "Got 1 oak logs. Inventory: [oak logs] (1)"}]
    fresh = [{"role": "system", "content": "Another prompt entirely."}, TURN_1[1]]
    for conversation, reused_at_most in (
        (edited, len(turn_1_ids) - 1),
        (windowed, len(turn_1_ids) - 1),
        (fresh, 0),
    ):
        reused = cached.cache_stats.reused_tokens
        _same(cached, plain, [conversation], keys=["e"])
        assert 0 <= cached.cache_stats.reused_tokens - reused <= reused_at_most
        if conversation is not fresh:
            assert cached.cache_stats.reused_tokens - reused >= 16  # the system prompt
    cached.end_episodes(["e"])
    assert not cached.prefix_cache.entries


@pytest.mark.parametrize("prefill", ["rows", "batch"])
def test_one_batch_mixes_cache_lengths(pair, prefill: str) -> None:
    """Rows with a long cached prefix, a short one (another episode's, shared system prompt), a
    restored episode under a new key, and none at all, in one padded batch."""
    cached, plain = pair(prefill)
    long_turn = _same(cached, plain, [TURN_1], keys=["long"])[0]
    _same(cached, plain, [CONVERSATIONS[2]], keys=["short"])
    batch = [
        _turn_2(long_turn.text),  # extends "long"
        CONVERSATIONS[0],  # shares the system prompt with both entries, under its own key
        _turn_2(long_turn.text),  # a restored copy of "long" under a new key
        [{"role": "user", "content": "no shared prefix here"}],
    ]
    reused = cached.cache_stats.reused_tokens
    outs = _same(cached, plain, batch, keys=["long", "other", "restored", "none"])
    assert cached.cache_stats.reused_tokens - reused > 2 * len(cached.prompt_ids(TURN_1))
    # each row's reply is the one it gets alone, uncached
    for conversation, out in zip(batch, outs, strict=True):
        assert plain.generate([conversation], GREEDY)[0].token_ids == out.token_ids
    assert set(cached.prefix_cache.entries) == {"long", "short", "other", "restored", "none"}
    cached.clear_cache()
    assert not cached.prefix_cache.entries


def test_cache_memory_is_bounded_and_can_be_disabled(pair) -> None:
    cached, plain = pair("rows")
    _same(cached, plain, CONVERSATIONS, keys=["a", "b", "c"])
    one_entry = cached.prefix_cache.entries["a"].nbytes
    assert plain.prefix_cache is None and plain.cache_stats is None
    plain.generate(CONVERSATIONS, GREEDY)  # keys are optional; without them nothing is kept
    # a budget of about two entries evicts the least recently stored
    small, _ = pair("rows", prefix_cache_mb=2.5 * one_entry / (1 << 20))
    _same(small, plain, CONVERSATIONS, keys=["a", "b", "c"])
    assert list(small.prefix_cache.entries) == ["b", "c"] and small.cache_stats.evictions == 1
    # calls without keys store nothing
    none, _ = pair("rows")
    none.generate(CONVERSATIONS, GREEDY)
    assert not none.prefix_cache.entries


def test_changed_weights_drop_the_cache(tiny_model_dir) -> None:
    """An in-place weight update (what an optimizer step does) invalidates every entry."""
    policy = TransformersPolicy(str(tiny_model_dir), device="cpu")
    first = policy.generate([TURN_1], GREEDY, keys=["e"])[0]
    assert "e" in policy.prefix_cache.entries
    with torch.no_grad():
        for param in policy.model.parameters():
            param.mul_(1.5)
    conversation = _turn_2(first.text)
    reused = policy.cache_stats.reused_tokens
    out = policy.generate([conversation], GREEDY, keys=["e"])[0]
    assert policy.cache_stats.reused_tokens == reused and policy.cache_stats.invalidations == 1
    assert teacher_forced_diff(policy, [conversation], [out]) < 1e-4


def test_prefix_cache_matching() -> None:
    cache = PrefixCache(budget_bytes=1 << 30)
    layers = [(torch.zeros(1, 1, 40, 4), torch.zeros(1, 1, 40, 4))]
    from agentenvs.agents.backends.kv_cache import CachedSequence

    cache.store("a", CachedSequence(list(range(40)), layers))
    assert cache.match("a", list(range(50)))[1] == 40  # full extension
    assert cache.match("a", list(range(40)))[1] == 39  # one prompt token is always recomputed
    assert cache.match("b", list(range(30)) + [99] * 5)[1] == 30  # another episode's entry
    assert cache.match("a", list(range(10)) + [99] * 30) == (None, 0)  # under MIN_REUSE
    assert common_prefix_length([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 3]]) == 2


# --------------------------------------------------------------------------------------------
# Rows that finish early leave the batch


@pytest.mark.parametrize("prefill", ["rows", "batch"])
def test_rows_finishing_early_leave_the_batch_without_changing_any_output(
    tiny_model_dir, prefill: str
) -> None:
    """Make a token of row 0's sampled reply that the other rows never emit an end-of-reply
    token: row 0 stops early while the others run on (the batch is compacted); every row's
    log-probs are still the teacher-forced ones, and its cached keys serve the next turn
    exactly."""
    policy = TransformersPolicy(
        str(tiny_model_dir), device="cpu", engine=EngineSettings(prefill=prefill)
    )
    greedy = SamplingParams(temperature=0, max_new_tokens=14)
    sampled = SamplingParams(max_new_tokens=14, seed=5)
    first = policy.generate(CONVERSATIONS, sampled)
    others = {t for o in first[1:] for t in o.token_ids}
    at = next(
        (i for i, t in enumerate(first[0].token_ids[:10]) if t not in others and i >= 1), None
    )
    assert at is not None, "no token of row 0 is absent from the other rows' replies"
    stop = first[0].token_ids[at]
    policy.eos_ids = set(policy.eos_ids) | {stop}
    policy._eos = torch.tensor(sorted(policy.eos_ids))
    keys = [f"e/{i}" for i in range(len(CONVERSATIONS))]
    batched = policy.generate(CONVERSATIONS, sampled, keys=keys)
    assert len(batched[0].token_ids) == at + 1 and batched[0].finish_reason == "stop"
    assert all(len(o.token_ids) > at + 1 for o in batched[1:])
    assert (
        teacher_forced_diff(policy, CONVERSATIONS, batched) < 1e-4
    )  # the compacted keys are right
    # the next turn of every episode reuses the stored keys and gives the uncached outputs
    turn_2 = [
        [*c, {"role": "assistant", "content": o.text}, {"role": "user", "content": "Next."}]
        for c, o in zip(CONVERSATIONS, batched, strict=True)
    ]
    reused_before = policy.cache_stats.reused_tokens
    cached = policy.generate(turn_2, greedy, keys=keys)
    assert policy.cache_stats.reused_tokens - reused_before >= sum(
        len(policy.prompt_ids(c)) for c in CONVERSATIONS
    )
    policy.clear_cache()
    fresh = policy.generate(turn_2, greedy)
    assert [o.token_ids for o in cached] == [o.token_ids for o in fresh]


# --------------------------------------------------------------------------------------------
# bfloat16 attention on CPU with the engine's two-bmm path (agents/backends/cpu/attention.py)


def test_bmm_decode_attention_keeps_log_probs_rows_and_seeds(tiny_model_dir) -> None:
    """bfloat16 on CPU: the engine's two-bmm attention; every log-prob is close to the
    teacher-forced one (within bfloat16 rounding of the scores, and as close as SDPA's), a
    row's reply does not depend on the rest of the batch, and a seed repeats bit for bit."""
    bmm = EngineSettings(
        decode_attention="bmm", prefill_attention="bmm", decode_weights="model", sampler="torch"
    )
    fast = TransformersPolicy(
        str(tiny_model_dir), device="cpu", dtype="bfloat16", cpu_engine="auto", engine=bmm
    )
    sdpa = TransformersPolicy(str(tiny_model_dir), device="cpu", dtype="bfloat16")
    assert fast.engine is not None and sdpa.engine is None
    sampled = SamplingParams(max_new_tokens=16, seed=7)
    outs = fast.generate(CONVERSATIONS, sampled)
    assert all(len(o.token_ids) == len(o.logprobs) >= 1 for o in outs)
    assert teacher_forced_diff(fast, CONVERSATIONS, outs) < 0.05
    assert [o.logprobs for o in outs] == [o.logprobs for o in fast.generate(CONVERSATIONS, sampled)]
    greedy = SamplingParams(temperature=0, max_new_tokens=16)
    batched = fast.generate(CONVERSATIONS, greedy)
    for i, conversation in enumerate(CONVERSATIONS):
        alone = fast.generate([conversation], greedy)[0]
        assert alone.token_ids == batched[i].token_ids
        assert alone.logprobs == batched[i].logprobs  # bit for bit, whatever the batch
    reference = sdpa.generate(CONVERSATIONS, greedy)
    assert all(len(r.logprobs) == len(o.logprobs) for r, o in zip(reference, batched, strict=True))
    assert logprob_gap(reference, batched) < 0.05


def test_bmm_attention_reads_whole_buffers_only_from_their_start() -> None:
    from agentenvs.agents.backends.cpu.attention import _whole_buffer

    buffer = torch.zeros(2, 3, 40, 8, dtype=torch.bfloat16)
    whole = _whole_buffer(buffer[:, :, :25])
    assert whole.shape == (6, 40, 8) and whole.data_ptr() == buffer.data_ptr()
    assert _whole_buffer(buffer[1:, :, :25]) is None  # not at the buffer's start
    assert _whole_buffer(buffer[:, :, 5:25]) is None
    assert _whole_buffer(buffer[:, :, :25].contiguous()).shape == (6, 25, 8)
