"""Rollout throughput: batched generation vs one episode at a time, and the environments' share.

    python -m agentenvs.benchmarks.rollout_speed --threads 1   # 8 TextCraft episodes, tiny local model
    python -m agentenvs.benchmarks.rollout_speed --quick
    python -m agentenvs.benchmarks.rollout_speed --no-prefix-cache      # re-encode every turn's prompt
    python -m agentenvs.benchmarks.rollout_speed --model-dir DIR        # another model
    python -m agentenvs.benchmarks.rollout_speed --embedded --threads 1  # SmolLM2-135M, the eval agent
    python -m agentenvs.benchmarks.rollout_speed --embedded --eval-speedup --threads 1

``--embedded`` runs SmolLM2-135M (the ``embedded`` agent) with that agent's backend options
(:data:`agentenvs.agents.models.EMBEDDED_OPTIONS`: bfloat16 matrix products where the CPU has them;
one-token steps as a flat loop over the layers (:mod:`agentenvs.agents.backends.cpu.decode_step`) with the
compiled kernels of :mod:`agentenvs.agents.backends.cpu.kernels` for attention, the 4-bit decoder weights
(:mod:`agentenvs.agents.backends.cpu.int4`), the 8-bit LM head and the sampler, and the system prompt read
once per step for the whole batch (:mod:`agentenvs.agents.backends.cpu.attention`); prompts prefilled in
chunks, every row's next chunk in one shared forward pass, with the compiled attention on CPUs
with AMX tiles, :mod:`agentenvs.agents.backends.prefill`);
``--opt KEY=VALUE`` overrides one of them, e.g. ``--opt decode_weights=model --opt
decode_attention=sdpa --opt prefill_attention=sdpa`` for the plain bfloat16 path.
``--eval-speedup`` adds the eval-side figure: the same batched episodes decoded with the
backend's settings before this change (float32, ``decode="plain"``: every row decoding until the
batch's last one ends, ``torch.multinomial`` draws) and with the current ones, in the same
process, interleaved, best of the repeats; target 3x.

Both runs play the same 8 TextCraft test episodes with the tiny random Qwen3 model
(:func:`agentenvs.agents.tiny_model.build_tiny_model`) on the transformers backend, with per-episode
sampling seeds (``RolloutConfig(episode_seeds=True)``), so that both sample the same replies
wherever the backend's rows are batch-independent (the summary gives the share of identical
replies and both token counts: with one seed per call the two runs sampled different replies,
and their token counts alone moved the ratio by 10-15%):

* **batched**: the 8 episodes in flight together, one ``generate`` call per turn over all of
  them (``max_active = 8``);
* **one at a time**: the baseline, each episode played alone to the end (``max_active = 1``).

Throughput is generated tokens per wall-clock second; the target is a ratio of at least 4x.
The second figure is the share of the batched run's wall time spent inside environment calls
(reset and step), target below 5%. The summary also gives the ratio of process CPU time per
token (steadier than wall time on a shared machine when ``--threads 1``) and the share of
prompt tokens the prefix cache reused (each turn's prompt extends the previous turn's, so only
the new observation, the next assistant header and whatever of the reply re-tokenizes
differently are encoded; see :mod:`agentenvs.agents.backends.kv_cache`).

Where the time goes with the tiny model (``--threads 1``, prefix cache on, 8 episodes x 4 turns x
48 tokens; timers around the backend's parts, one run, a 2-core AMD EPYC Zen 4, December 2026;
for the embedded model's breakdown, by CPU, see the README's backend section): the baseline
takes 2.3 s, of which about 1.8 s in 1,365 one-row decoding steps (1.3 ms each, mostly per-step
Python and framework overhead), 0.3 s prefill, 0.12 s sampling and 0.07 s rendering prompts;
the batched run 0.84 s, of which about 0.53 s in at most 188 decoding steps of up to eight
rows (2.8 ms or more each), 0.2 s prefill, 0.03 s sampling and 0.05 s rendering (2.74x; 2.87x
in ``agentenvs.benchmarks.rollout_speed --threads 1`` the same hour). Batching shares the per-step
overhead, but the rest is work *per row* that batching cannot share on a CPU:

* the attention of every row over its own 1,200-1,700-token context: with the tiny model's
  hidden size of 64 attention is nearly all of its compute, and an eight-row decoding step reads
  eight rows' keys and values (about 6 MB, out of L2), so it costs about 2.2x a one-row step;
* each turn's prefill of about 180 new tokens per row (the observation or format-error feedback,
  the next headers, and the part of the random reply that re-tokenizes differently), compute-
  bound attention over the context (about 4 ms per row-turn) in both runs alike;
* prompt rendering and tokenization, per row per turn.

So the ratio sits at 2.5-2.8x in CPU time, with or without the cache (the cache makes both runs
faster, the batched one 1.3-1.5x). Even if eight rows decoded at the cost of one, prefill and
rendering would cap it near 4x. What would reach it: a model whose per-token work is its weights
(read once per step for the whole batch) with replies long compared with each turn's new prompt
tokens, an accelerator (where eight rows' prefill costs about one row's), or attention that reads
the batch's shared prompt prefix (about 1,100 of the 1,200-1,700 tokens here) once for all rows
(cascade / shared-prefix attention) combined with fewer new tokens per turn. Wall-time ratios on
a busy machine swing widely (2.5x-4.1x seen with ``--threads 1``); with torch's default two
threads, thread contention can slow the one-row baseline many times over and the ratio means
little.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from agentenvs.benchmarks.timing import SpeedRow, format_table, report

__all__ = ["EvalSpeedup", "RolloutSpeed", "main", "measure", "measure_eval_speedup"]

ENV_ID = "TextCraft-v0"
THROUGHPUT_TARGET = 4.0
ENV_SHARE_TARGET = 0.05
EVAL_SPEEDUP_TARGET = 3.0
BEFORE_OPTIONS = {"dtype": "float32", "decode": "plain"}  # the backend's eval path before


@dataclass(frozen=True)
class RolloutSpeed:
    episodes: int
    batched_tokens_per_s: float
    sequential_tokens_per_s: float
    batched_wall_s: float
    sequential_wall_s: float
    env_share: float
    batched_calls: int
    sequential_calls: int
    batched_cpu_s: float = 0.0
    sequential_cpu_s: float = 0.0
    batched_tokens: int = 0
    sequential_tokens: int = 0
    reused_share: float = 0.0
    prefix_cache: bool = True
    same_replies: float = 0.0  # share of the batched run's replies the baseline also sampled

    @property
    def cpu_ratio(self) -> float:
        """Baseline CPU seconds per token / batched CPU seconds per token."""
        if not (self.batched_cpu_s and self.sequential_tokens):
            return 0.0
        batched = self.batched_cpu_s / self.batched_tokens
        return (self.sequential_cpu_s / self.sequential_tokens) / batched

    @property
    def ratio(self) -> float:
        return self.batched_tokens_per_s / self.sequential_tokens_per_s

    def rows(self) -> list[SpeedRow]:
        per_token = 1.0 / self.batched_tokens_per_s
        return [
            SpeedRow(
                ENV_ID,
                f"rollout, {self.episodes} episodes batched: time per generated token",
                per_token,
                baseline="one episode at a time",
                baseline_seconds=1.0 / self.sequential_tokens_per_s,
                target=f">= {THROUGHPUT_TARGET:g}x faster",
                met=self.ratio >= THROUGHPUT_TARGET,
            ),
            SpeedRow(
                ENV_ID,
                f"environment calls in the batched run ({100 * self.env_share:.2f}% of wall time)",
                self.env_share * self.batched_wall_s,
                target=f"< {100 * ENV_SHARE_TARGET:g}% of wall time",
                met=self.env_share < ENV_SHARE_TARGET,
            ),
        ]


def measure(
    quick: bool = False,
    *,
    episodes: int = 8,
    model_dir: str | Path | None = None,
    repeats: int | None = None,
    threads: int | None = None,
    prefix_cache: bool = True,
    max_turns: int | None = None,
    max_new_tokens: int | None = None,
    options: dict | None = None,
) -> RolloutSpeed:
    """Play ``episodes`` TextCraft episodes batched and one at a time; best of ``repeats``.
    ``prefix_cache``: keep each episode's KV cache across turns (False: re-encode prompts).
    ``max_turns`` / ``max_new_tokens``: per episode and per reply (default 4 and 48; quick: 3
    and 24). ``options``: more backend options (e.g. the embedded agent's)."""
    import torch
    from agentenvs.agents.backends.transformers_backend import TransformersPolicy
    from agentenvs.agents.policy import SamplingParams
    from agentenvs.agents.rollout import RolloutConfig, RolloutStats, plan_episodes, run_rollouts
    from agentenvs.agents.tiny_model import build_tiny_model

    from agentenvs.registration import make

    torch.manual_seed(0)
    threads_before = torch.get_num_threads()
    repeats = repeats or (1 if quick else 3)
    max_turns = max_turns or (3 if quick else 4)
    max_new_tokens = max_new_tokens or (24 if quick else 48)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(model_dir) if model_dir else build_tiny_model(Path(tmp) / "tiny")
        policy = TransformersPolicy(
            str(directory),
            device="cpu",
            max_batch_size=episodes,
            num_threads=threads,
            prefix_cache=prefix_cache,
            **(options or {}),
        )
        env = make(ENV_ID)
        tasks = env.task_ids("test")[:episodes]
        plan = plan_episodes(tasks, 1)
        sampling = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens, seed=0)
        policy.generate([[{"role": "user", "content": "warm up"}]], sampling)

        replies: dict[int, dict] = {}

        def run(max_active: int) -> tuple[RolloutStats, float]:
            stats = RolloutStats()
            config = RolloutConfig(
                max_turns=max_turns, sampling=sampling, max_active=max_active, episode_seeds=True
            )
            cpu = time.process_time()
            played = run_rollouts(policy, ENV_ID, plan, config, stats=stats)
            cpu = time.process_time() - cpu
            replies[max_active] = _replies(played)
            return stats, cpu

        # interleaved repeats, best of each: a busy machine slows both the same way
        batched = sequential = None
        batched_cpu = sequential_cpu = float("inf")
        for _ in range(repeats):
            (b, b_cpu), (s, s_cpu) = run(episodes), run(1)
            batched = b if batched is None or b.wall_seconds < batched.wall_seconds else batched
            sequential = (
                s if sequential is None or s.wall_seconds < sequential.wall_seconds else sequential
            )
            batched_cpu, sequential_cpu = min(batched_cpu, b_cpu), min(sequential_cpu, s_cpu)
        cache_stats = policy.cache_stats
        policy.close()
    torch.set_num_threads(threads_before)
    return RolloutSpeed(
        episodes=episodes,
        batched_tokens_per_s=batched.generated_tokens / batched.wall_seconds,
        sequential_tokens_per_s=sequential.generated_tokens / sequential.wall_seconds,
        batched_wall_s=batched.wall_seconds,
        sequential_wall_s=sequential.wall_seconds,
        env_share=batched.env_share,
        batched_calls=batched.generate_calls,
        sequential_calls=sequential.generate_calls,
        batched_cpu_s=batched_cpu,
        sequential_cpu_s=sequential_cpu,
        batched_tokens=batched.generated_tokens,
        sequential_tokens=sequential.generated_tokens,
        reused_share=cache_stats.reused_share if cache_stats is not None else 0.0,
        prefix_cache=prefix_cache,
        same_replies=_same_share(replies[episodes], replies[1]),
    )


def _replies(trajectories: list) -> dict[tuple[str, int, int], tuple[int, ...]]:
    """Each reply's sampled tokens by (group, sample, turn)."""
    return {
        (t.group_id, t.sample_index, turn): tuple(step.token_ids or ())
        for t in trajectories
        for turn, step in enumerate(t.steps)
    }


def _same_share(a: dict, b: dict) -> float:
    """The share of ``a``'s replies that ``b`` has too, token for token."""
    return sum(1 for key, tokens in a.items() if b.get(key) == tokens) / max(1, len(a))


@dataclass(frozen=True)
class EvalSpeedup:
    """Batched tokens/s of the same episodes with the backend's settings before and now."""

    episodes: int
    before_tokens_per_s: float
    after_tokens_per_s: float
    before_tokens: int
    after_tokens: int

    @property
    def ratio(self) -> float:
        return self.after_tokens_per_s / self.before_tokens_per_s

    def row(self) -> SpeedRow:
        return SpeedRow(
            ENV_ID,
            f"eval decoding, {self.episodes} episodes batched: time per generated token",
            1.0 / self.after_tokens_per_s,
            baseline="float32, plain decode loop (before)",
            baseline_seconds=1.0 / self.before_tokens_per_s,
            target=f">= {EVAL_SPEEDUP_TARGET:g}x faster",
            met=self.ratio >= EVAL_SPEEDUP_TARGET,
        )


def measure_eval_speedup(
    model_dir: str | Path,
    options: dict,
    *,
    episodes: int = 8,
    repeats: int = 2,
    threads: int | None = None,
    max_turns: int = 3,
    max_new_tokens: int = 128,
) -> EvalSpeedup:
    """Play the same ``episodes`` batched with ``BEFORE_OPTIONS`` and with ``options`` (two
    policies on one model directory, same seeds), interleaved; best tokens/s of each."""
    import torch
    from agentenvs.agents.backends.transformers_backend import TransformersPolicy
    from agentenvs.agents.policy import SamplingParams
    from agentenvs.agents.rollout import RolloutConfig, RolloutStats, plan_episodes, run_rollouts

    from agentenvs.registration import make

    threads_before = torch.get_num_threads()
    sampling = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens, seed=0)
    # one seed per call, as the earlier figures: the two settings' samplers differ (multinomial
    # vs inverse CDF), so per-episode seeds could not make them sample the same replies anyway
    config = RolloutConfig(max_turns=max_turns, sampling=sampling, max_active=episodes)
    env = make(ENV_ID)
    plan = plan_episodes(env.task_ids("test")[:episodes], 1)
    env.close()
    best: dict[str, tuple[float, int]] = {}
    policies = {
        name: TransformersPolicy(
            str(model_dir), device="cpu", max_batch_size=episodes, num_threads=threads, **opts
        )
        for name, opts in (("before", BEFORE_OPTIONS), ("after", options))
    }
    for policy in policies.values():
        policy.generate([[{"role": "user", "content": "warm up"}]], sampling)
    for _ in range(repeats):
        for name, policy in policies.items():
            stats = RolloutStats()
            run_rollouts(policy, ENV_ID, plan, config, stats=stats)
            rate = stats.generated_tokens / stats.wall_seconds
            if rate > best.get(name, (0.0, 0))[0]:
                best[name] = (rate, stats.generated_tokens)
    for policy in policies.values():
        policy.close()
    torch.set_num_threads(threads_before)
    return EvalSpeedup(
        episodes, best["before"][0], best["after"][0], best["before"][1], best["after"][1]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter episodes, one repeat")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: torch's)"
    )
    parser.add_argument(
        "--no-prefix-cache",
        action="store_true",
        help="re-encode every turn's whole prompt (no KV cache kept across turns)",
    )
    parser.add_argument(
        "--model-dir", type=Path, help="a model directory instead of the tiny random model"
    )
    parser.add_argument(
        "--embedded",
        action="store_true",
        help="SmolLM2-135M (the embedded agent) with its backend options",
    )
    parser.add_argument(
        "--eval-speedup",
        action="store_true",
        help="also measure batched eval decoding now vs the backend's settings before",
    )
    parser.add_argument("--max-turns", type=int, help="replies per episode (default 4)")
    parser.add_argument("--max-new-tokens", type=int, help="tokens per reply (default 48)")
    parser.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    parser.add_argument(
        "--opt",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a backend option over the defaults, e.g. --opt decode_weights=model (repeatable)",
    )
    args = parser.parse_args(argv)
    options: dict = {}
    if args.embedded:
        from agentenvs.agents.models import embedded_model_dir, embedded_options

        args.model_dir, options = embedded_model_dir(), embedded_options()
    for item in args.opt:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--opt takes KEY=VALUE, got {item!r}")
        options[key] = value
    speed = measure(
        args.quick,
        episodes=args.episodes,
        threads=args.threads,
        model_dir=args.model_dir,
        prefix_cache=not args.no_prefix_cache,
        max_turns=args.max_turns,
        max_new_tokens=args.max_new_tokens,
        options=options,
    )
    rows = speed.rows()
    speedup = None
    if args.eval_speedup:
        if args.model_dir is None:
            parser.error("--eval-speedup needs --embedded or --model-dir")
        speedup = measure_eval_speedup(
            args.model_dir, options, episodes=args.episodes, threads=args.threads
        )
        rows.append(speedup.row())
    table = format_table(rows)
    summary = (
        f"\nbatched {speed.batched_tokens_per_s:.0f} tok/s ({speed.batched_calls} generate calls), "
        f"one at a time {speed.sequential_tokens_per_s:.0f} tok/s "
        f"({speed.sequential_calls} calls): {speed.ratio:.2f}x; environments "
        f"{100 * speed.env_share:.2f}% of the batched run's wall time\n"
        f"same sampled replies in both runs (episode seeds): {100 * speed.same_replies:.0f}% "
        f"({speed.batched_tokens} and {speed.sequential_tokens} tokens)\n"
        f"CPU time per token: {speed.cpu_ratio:.2f}x; prefix cache "
        + (
            f"on, {100 * speed.reused_share:.0f}% of prompt tokens reused"
            if speed.prefix_cache
            else "off"
        )
    )
    if speedup is not None:
        summary += (
            f"\neval decoding now {speedup.after_tokens_per_s:.1f} tok/s, before "
            f"{speedup.before_tokens_per_s:.1f} tok/s: {speedup.ratio:.2f}x "
            f"({speedup.after_tokens} and {speedup.before_tokens} tokens)"
        )
    report(table + "\n" + summary, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
