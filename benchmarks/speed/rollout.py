"""Rollout throughput: the CPU engine against the plain backend, and batched against one at a time.

    python -m agentenvs.benchmarks.speed.rollout --threads 1  # 8 TextCraft episodes, tiny model
    python -m agentenvs.benchmarks.speed.rollout --quick
    python -m agentenvs.benchmarks.speed.rollout --no-prefix-cache  # re-encode every turn's prompt
    python -m agentenvs.benchmarks.speed.rollout --model-dir DIR  # another model
    python -m agentenvs.benchmarks.speed.rollout --embedded --engine --threads 1 \
        --doc docs/cpu-engine.md

``--embedded`` runs SmolLM2-135M (the ``embedded`` agent) with that agent's options
(:data:`agentenvs.agents.models.EMBEDDED_OPTIONS`: the CPU engine, ``cpu_engine="auto"``).
``--engine`` adds the engine's figure: the same batched episodes decoded by two policies on the
same model directory, one with the engine and one without (``cpu_engine="off"``: the plain
batched generator, float32 on CPU), in the same process, interleaved, best of the repeats.
``--doc PATH`` rewrites the measured section of that page (``docs/cpu-engine.md``, between its
``<!-- measured -->`` markers) with this run's table, machine and load; the rest of the page (the
engine's design and its measurements) is kept.

Both runs of the first figure play the same TextCraft test episodes on the transformers backend
with per-episode sampling seeds (``RolloutConfig(episode_seeds=True)``), so both sample the same
replies wherever the backend's rows are batch-independent:

* **batched**: the episodes in flight together, one ``generate`` call per turn over all of them;
* **one at a time**: each episode played alone to the end (``max_active = 1``).

Throughput is generated tokens per wall-clock second (no target: on a CPU the per-row work of
attention and prefill caps the ratio, ``docs/cpu-engine.md``). The second figure is the share of
the batched run's wall time spent inside environment calls (reset and step), target below 5%.
The summary also gives the ratio of process CPU time per token (steadier than wall time on a
shared machine when ``--threads 1``) and the share of prompt tokens the prefix cache reused.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agentenvs.agents.backends.transformers_backend import TransformersPolicy
from agentenvs.agents.models import embedded_model_dir, embedded_options
from agentenvs.agents.policy import SamplingParams
from agentenvs.agents.rollout import (
    EpisodeSpec,
    RolloutConfig,
    RolloutStats,
    plan_episodes,
    run_rollouts,
)
from agentenvs.agents.tiny_model import build_tiny_model
from agentenvs.benchmarks.machine import cpu_model
from agentenvs.benchmarks.speed.timing import SpeedRow, format_table, report
from agentenvs.registration import make

__all__ = ["EngineSpeed", "RolloutSpeed", "main", "measure", "measure_engine", "write_doc"]

ENV_ID = "TextCraft-v0"
ENV_SHARE_TARGET = 0.05
ENGINE_TARGET = 2.0  # the engine's tokens/s over the plain backend's, same run
PLAIN_OPTIONS = {"cpu_engine": "off"}  # the plain batched generator (float32 on CPU)
DOC_START, DOC_END = "<!-- measured -->", "<!-- /measured -->"


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

    torch.manual_seed(0)
    threads_before = torch.get_num_threads()
    repeats = repeats or (1 if quick else 3)
    sampling = SamplingParams(
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=max_new_tokens or (24 if quick else 48),
        seed=0,
    )
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(model_dir) if model_dir else build_tiny_model(Path(tmp) / "tiny")
        policy = TransformersPolicy.with_options(
            str(directory),
            device="cpu",
            max_batch_size=episodes,
            num_threads=threads,
            **{"prefix_cache": prefix_cache, **(options or {})},
        )
        env = make(ENV_ID)
        plan = plan_episodes(env.task_ids("test")[:episodes], 1)
        policy.generate([[{"role": "user", "content": "warm up"}]], sampling)
        pair = _BestOfRuns(policy, plan, sampling, max_turns or (3 if quick else 4))
        for _ in range(repeats):  # interleaved, best of each: a busy machine slows both alike
            pair.run(episodes)
            pair.run(1)
        cache_stats = policy.cache_stats
        policy.close()
    torch.set_num_threads(threads_before)
    batched, sequential = pair.best[episodes], pair.best[1]
    return RolloutSpeed(
        episodes=episodes,
        batched_tokens_per_s=batched.generated_tokens / batched.wall_seconds,
        sequential_tokens_per_s=sequential.generated_tokens / sequential.wall_seconds,
        batched_wall_s=batched.wall_seconds,
        sequential_wall_s=sequential.wall_seconds,
        env_share=batched.env_share,
        batched_calls=batched.generate_calls,
        sequential_calls=sequential.generate_calls,
        batched_cpu_s=pair.cpu[episodes],
        sequential_cpu_s=pair.cpu[1],
        batched_tokens=batched.generated_tokens,
        sequential_tokens=sequential.generated_tokens,
        reused_share=cache_stats.reused_share if cache_stats is not None else 0.0,
        prefix_cache=prefix_cache,
        same_replies=_same_share(pair.replies[episodes], pair.replies[1]),
    )


class _BestOfRuns:
    """Runs of the same episodes at several ``max_active``: the fastest run's stats, the least
    CPU time and the last run's sampled replies of each."""

    def __init__(
        self, policy: Any, plan: list[EpisodeSpec], sampling: SamplingParams, max_turns: int
    ) -> None:
        self.policy, self.plan, self.sampling, self.max_turns = policy, plan, sampling, max_turns
        self.best: dict[int, RolloutStats] = {}
        self.cpu: dict[int, float] = {}
        self.replies: dict[int, dict] = {}

    def run(self, max_active: int) -> None:
        stats = RolloutStats()
        config = RolloutConfig(
            max_turns=self.max_turns,
            sampling=self.sampling,
            max_active=max_active,
            episode_seeds=True,
        )
        cpu = time.process_time()
        played = run_rollouts(self.policy, ENV_ID, self.plan, config, stats=stats)
        cpu = time.process_time() - cpu
        self.replies[max_active] = _replies(played)
        best = self.best.get(max_active)
        if best is None or stats.wall_seconds < best.wall_seconds:
            self.best[max_active] = stats
        self.cpu[max_active] = min(self.cpu.get(max_active, float("inf")), cpu)


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
class EngineSpeed:
    """Batched tokens/s of the same episodes with the CPU engine and with the plain backend."""

    episodes: int
    engine_tokens_per_s: float
    plain_tokens_per_s: float
    engine_tokens: int
    plain_tokens: int
    engine_line: str = ""

    @property
    def ratio(self) -> float:
        return self.engine_tokens_per_s / self.plain_tokens_per_s

    def row(self) -> SpeedRow:
        return SpeedRow(
            ENV_ID,
            f"eval decoding, {self.episodes} episodes batched, CPU engine: time per token",
            1.0 / self.engine_tokens_per_s,
            baseline="plain backend (cpu_engine=off)",
            baseline_seconds=1.0 / self.plain_tokens_per_s,
            target=f">= {ENGINE_TARGET:g}x faster",
            met=self.ratio >= ENGINE_TARGET,
        )


def measure_engine(
    model_dir: str | Path,
    options: dict | None = None,
    *,
    episodes: int = 8,
    repeats: int = 2,
    threads: int | None = None,
    max_turns: int = 3,
    max_new_tokens: int = 128,
) -> EngineSpeed:
    """Play the same ``episodes`` batched with the engine (``options``, default
    ``cpu_engine="auto"``) and with :data:`PLAIN_OPTIONS` (two policies on one model
    directory, same seeds), interleaved; best tokens/s of each."""
    import torch

    threads_before = torch.get_num_threads()
    sampling = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens, seed=0)
    config = RolloutConfig(max_turns=max_turns, sampling=sampling, max_active=episodes)
    env = make(ENV_ID)
    plan = plan_episodes(env.task_ids("test")[:episodes], 1)
    env.close()
    best: dict[str, tuple[float, int]] = {}
    policies = {
        name: TransformersPolicy.with_options(
            str(model_dir), device="cpu", max_batch_size=episodes, num_threads=threads, **opts
        )
        for name, opts in (("plain", PLAIN_OPTIONS), ("engine", options or {"cpu_engine": "auto"}))
    }
    line = policies["engine"].run_metadata()["engine"]
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
    return EngineSpeed(
        episodes, best["engine"][0], best["plain"][0], best["engine"][1], best["plain"][1], line
    )


def write_doc(path: Path, text: str) -> None:
    """Replace the measured section of the page at ``path`` (between :data:`DOC_START` and
    :data:`DOC_END`) with ``text``; a page without the markers gets the section appended."""
    page = path.read_text() if path.exists() else ""
    section = f"{DOC_START}\n{text.strip()}\n{DOC_END}"
    if DOC_START in page and DOC_END in page:
        head, _, rest = page.partition(DOC_START)
        _, _, tail = rest.partition(DOC_END)
        page = head + section + tail
    else:
        page = page.rstrip() + ("\n\n" if page else "") + section + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page)


def _machine() -> str:
    """The CPU's model name, core count and load average, for the page."""
    name = cpu_model()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return f"{name}, {os.cpu_count()} cores, load average {load}"


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m agentenvs.benchmarks.speed.rollout``."""
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
        "--engine",
        action="store_true",
        help="also measure batched eval decoding with the CPU engine vs the plain backend",
    )
    parser.add_argument(
        "--doc", type=Path, help="rewrite the measured section of this page (docs/cpu-engine.md)"
    )
    parser.add_argument("--max-turns", type=int, help="replies per episode (default 4)")
    parser.add_argument("--max-new-tokens", type=int, help="tokens per reply (default 48)")
    parser.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    parser.add_argument(
        "--opt",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a backend option over the defaults, e.g. --opt cpu_engine=off (repeatable)",
    )
    return parser


def summary(speed: RolloutSpeed, engine: EngineSpeed | None) -> str:
    """The lines under the table: both runs' rates, shared replies, CPU time, the cache, and
    the engine's figure when measured."""
    cache = "off"
    if speed.prefix_cache:
        cache = f"on, {100 * speed.reused_share:.0f}% of prompt tokens reused"
    text = (
        f"\nbatched {speed.batched_tokens_per_s:.0f} tok/s ({speed.batched_calls} generate calls), "
        f"one at a time {speed.sequential_tokens_per_s:.0f} tok/s "
        f"({speed.sequential_calls} calls): {speed.ratio:.2f}x; environments "
        f"{100 * speed.env_share:.2f}% of the batched run's wall time\n"
        f"same sampled replies in both runs (episode seeds): {100 * speed.same_replies:.0f}% "
        f"({speed.batched_tokens} and {speed.sequential_tokens} tokens)\n"
        f"CPU time per token: {speed.cpu_ratio:.2f}x; prefix cache {cache}"
    )
    if engine is not None:
        text += (
            f"\neval decoding with the CPU engine {engine.engine_tokens_per_s:.1f} tok/s, plain "
            f"backend {engine.plain_tokens_per_s:.1f} tok/s: {engine.ratio:.2f}x "
            f"({engine.engine_tokens} and {engine.plain_tokens} tokens)\n"
            f"engine: {engine.engine_line}"
        )
    return text


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    options: dict = {}
    if args.embedded:
        args.model_dir, options = embedded_model_dir(), embedded_options()
    for item in args.opt:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--opt takes KEY=VALUE, got {item!r}")
        options[key] = value
    if args.engine and args.model_dir is None:
        parser.error("--engine needs --embedded or --model-dir")
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
    engine = None
    if args.engine:
        engine_options = options if options.get("cpu_engine", "off") != "off" else None
        engine = measure_engine(
            args.model_dir, engine_options, episodes=args.episodes, threads=args.threads
        )
        rows.append(engine.row())
    table, text = format_table(rows), summary(speed, engine)
    report(table + "\n" + text, args.out)
    if args.doc:
        when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        command = "python -m agentenvs.benchmarks.speed.rollout " + " ".join(argv or sys.argv[1:])
        write_doc(
            args.doc,
            f"Last measured {when} on {_machine()}, torch threads {args.threads or 'default'}:\n"
            f"`{command}`\n\n{table}\n\n```\n{text.strip()}\n```",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
