"""The three file-to-file stages of the replay pipeline and their summaries.

    trajectories.jsonl --run_cuts--> queries.jsonl --run_validate--> validated.jsonl
        --run_sidecar--> samples.jsonl

Each stage reads the previous stage's file (:mod:`agentenvs.replay.io` checks its schema and
version), writes its own, shows a progress bar and returns a summary whose :meth:`table` is what the
``agentenvs replay ...`` commands print: counts by environment and strategy (and status), with the
validated ratio per environment.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from agentenvs.agents.envworkers.pool import DEFAULT_ENV_TIMEOUT_S
from agentenvs.agents.trajectory import Trajectory, read_trajectories
from agentenvs.replay.cuts import CutConfig, assistant_entropies, queries_for_trajectory
from agentenvs.replay.io import (
    QUERY_SCHEMA,
    SAMPLE_SCHEMA,
    VALIDATED_SCHEMA,
    count_rows,
    read_rows,
    write_rows,
)
from agentenvs.replay.query import CutQuery, TrajectoryShapeError
from agentenvs.replay.scoring import TokenScorer, load_model
from agentenvs.replay.sidecar import compute_sidecars
from agentenvs.replay.tokens import ChatTemplateError, render_chat
from agentenvs.replay.validate import EnvPool, ReplayStats, ValidationStatus, validate_queries

__all__ = [
    "CutsSummary",
    "SidecarSummary",
    "ValidateSummary",
    "markdown_table",
    "run_cuts",
    "run_sidecar",
    "run_validate",
]

STATUSES = tuple(s.value for s in ValidationStatus)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table (numbers right as they are, floats as given)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _progress(total: int | None, unit: str, enabled: bool, desc: str) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, unit=unit, desc=desc, disable=not enabled, dynamic_ncols=True)


def _chunks(items: Iterator[Any], size: int) -> Iterator[list[Any]]:
    while chunk := list(islice(items, size)):
        yield chunk


# --------------------------------------------------------------------------------------------
# cuts


@dataclass
class CutsSummary:
    """What ``run_cuts`` did: trajectories read and skipped, queries and dropped cuts."""

    trajectories: int = 0
    skipped: Counter = field(default_factory=Counter)  # reason -> count
    examples: list[str] = field(default_factory=list)  # the first few skip messages
    queries: Counter = field(default_factory=Counter)  # (env, strategy) -> count
    dropped: Counter = field(default_factory=Counter)  # (env, strategy, reason) -> count
    seconds: float = 0.0

    def skip(self, reason: str, detail: str) -> None:
        self.skipped[reason] += 1
        if len(self.examples) < 5:
            self.examples.append(detail)

    def table(self) -> str:
        keys = sorted(set(self.queries) | {(e, s) for e, s, _ in self.dropped})
        rows = []
        for env, strategy in keys:
            reasons = {r: n for (e, s, r), n in self.dropped.items() if (e, s) == (env, strategy)}
            dropped = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items())) or "0"
            rows.append([env, strategy, self.queries[(env, strategy)], dropped])
        text = markdown_table(["env", "strategy", "queries", "dropped cuts"], rows)
        skipped = ", ".join(f"{n} ({r})" for r, n in sorted(self.skipped.items())) or "none"
        return (
            f"{text}\n\n{self.trajectories} trajectories read, skipped: {skipped}; "
            f"{sum(self.queries.values())} queries in {self.seconds:.1f} s"
        ) + "".join(f"\nskipped: {e}" for e in self.examples)


def run_cuts(
    trajectory_paths: Sequence[str | Path],
    out: str | Path,
    configs: Sequence[CutConfig],
    *,
    model_path: str | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    batch_tokens: int = 16_384,
    limit: int | None = None,
    only_won: bool = False,
    chunk: int = 32,
    progress: bool = True,
    skip_invalid: bool = False,
) -> CutsSummary:
    """Trajectory files -> a ``replay.query`` file (raw query + every config's cuts);
    ``skip_invalid``: skip trajectory lines that fail validation (each counted in the summary's
    skips) instead of stopping at the first, named by file and line."""
    if not configs:
        raise ValueError("give at least one cut strategy")
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise ValueError(f"cut strategy names must be distinct, got {names}; set CutConfig.name")
    scorer = tokenizer = None
    if any(c.needs_model for c in configs):
        if not model_path:
            needing = [c.name for c in configs if c.needs_model]
            raise ValueError(f"{needing} score tokens with the SFT model: pass its path (--model)")
        model, tokenizer = load_model(model_path, device=device, dtype=dtype)
        scorer = TokenScorer(
            model, pad_token_id=tokenizer.pad_token_id or 0, batch_tokens=batch_tokens
        )
    summary = CutsSummary()
    start = time.perf_counter()
    total = sum(count_rows(p) for p in trajectory_paths)
    bar = _progress(min(total, limit) if limit else total, "traj", progress, "cuts")

    def rows() -> Iterator[dict[str, Any]]:
        index = 0
        trajs = _trajectories(trajectory_paths, limit, skip_invalid, summary)
        for chunk_trajs in _chunks(trajs, chunk):
            usable: list[tuple[int, Trajectory]] = []
            for traj in chunk_trajs:
                summary.trajectories += 1
                if only_won and not traj.won:
                    summary.skipped["not won"] += 1
                else:
                    usable.append((index, traj))
                index += 1
            entropies = _entropies(scorer, tokenizer, usable, summary)
            for (i, traj), entropy in zip(usable, entropies, strict=True):
                if entropy is _SKIP:
                    continue
                try:
                    queries, dropped = queries_for_trajectory(traj, i, configs, entropy)
                except TrajectoryShapeError as exc:
                    summary.skip("messages and steps misaligned", str(exc))
                    continue
                for q in queries:
                    summary.queries[(q.env_id, q.strategy)] += 1
                    yield q.to_row()
                for d in dropped:
                    summary.dropped[(traj.env_id, d.strategy, d.reason)] += 1
            bar.update(len(chunk_trajs))

    try:
        write_rows(out, QUERY_SCHEMA, rows())
    finally:
        bar.close()
    summary.seconds = time.perf_counter() - start
    return summary


_SKIP = object()


def _trajectories(
    paths: Sequence[str | Path],
    limit: int | None,
    skip_invalid: bool = False,
    summary: CutsSummary | None = None,
) -> Iterator[Trajectory]:
    n = 0
    for path in paths:
        errors: list[str] = []
        for traj in read_trajectories(path, skip_invalid=skip_invalid, errors=errors):
            while errors and summary is not None:
                summary.skip("invalid line", errors.pop(0))
            if limit is not None and n >= limit:
                return
            yield traj
            n += 1
        for message in errors if summary is not None else []:  # invalid lines at the end
            summary.skip("invalid line", message)


def _entropies(
    scorer: Any, tokenizer: Any, usable: list[tuple[int, Trajectory]], summary: CutsSummary
) -> list[Any]:
    """Entropy per usable trajectory (None without a scorer; _SKIP where rendering failed)."""
    if scorer is None:
        return [None] * len(usable)
    out: list[Any] = [_SKIP] * len(usable)
    rendered = {}
    for k, (_, traj) in enumerate(usable):
        try:
            rendered[k] = render_chat(tokenizer, traj.messages)
        except ChatTemplateError as exc:
            summary.skip("chat template", str(exc))
    for k, value in zip(
        rendered, assistant_entropies(scorer, list(rendered.values())), strict=True
    ):
        out[k] = value
    return out


# --------------------------------------------------------------------------------------------
# validate


@dataclass
class ValidateSummary:
    """Status counts by (env, strategy), the environment work done, and the time taken."""

    counts: Counter = field(default_factory=Counter)  # (env, strategy, status) -> count
    stats: ReplayStats = field(default_factory=ReplayStats)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def validated_ratio(self, env: str, prefix_only: bool = False) -> float:
        keys = [k for k in self.counts if k[0] == env and not (prefix_only and k[1] == "raw")]
        total = sum(self.counts[k] for k in keys)
        good = sum(self.counts[k] for k in keys if k[2] == ValidationStatus.VALIDATED.value)
        return good / total if total else 0.0

    def table(self) -> str:
        pairs = sorted({(e, s) for e, s, _ in self.counts})
        rows = []
        for env, strategy in pairs:
            counts = [self.counts[(env, strategy, st)] for st in STATUSES]
            total = sum(counts)
            rows.append([env, strategy, *counts, total, f"{counts[0] / total:.1%}"])
        text = markdown_table(["env", "strategy", *STATUSES, "total", "validated"], rows)
        envs = sorted({e for e, _, _ in self.counts})
        per_env = markdown_table(
            ["env", "validated (prefix queries)", "validated (all queries)"],
            [
                [e, f"{self.validated_ratio(e, True):.1%}", f"{self.validated_ratio(e):.1%}"]
                for e in envs
            ],
        )
        rate = self.total / self.seconds if self.seconds else 0.0
        s = self.stats
        return (
            f"{text}\n\n{per_env}\n\n{self.total} queries in {self.seconds:.2f} s "
            f"({rate:.0f}/s); env work: {s.resets} resets, {s.steps} steps, {s.restores} "
            f"restores, {s.snapshots} snapshots; {s.reused_results} results shared by equal cuts"
        )


def run_validate(
    queries_path: str | Path,
    out: str | Path,
    *,
    limit: int | None = None,
    reuse_snapshots: bool = True,
    progress: bool = True,
    env_workers: str | Sequence[str] | None = None,
    env_timeout: float | None = DEFAULT_ENV_TIMEOUT_S,
    auth_token: str | None = None,
) -> ValidateSummary:
    """A ``replay.query`` file -> a ``replay.validated`` file (every query, with its status).

    ``env_workers``: ``agentenvs serve`` server URLs (a list, or one comma-separated string) to
    replay on instead of in process; the rows are the same (:mod:`agentenvs.replay.validate`);
    ``env_timeout``: seconds each request to them may take (None: for ever); ``auth_token``:
    their bearer token (None: the environment variable ``AGENTENVS_AUTH_TOKEN`` when set).
    """
    if isinstance(env_workers, str):
        env_workers = [u for u in env_workers.split(",") if u.strip()]
    if env_workers:
        from agentenvs.agents.envworkers.http_transport import normalize_server_url

        env_workers = [normalize_server_url(u) for u in env_workers]  # a bad URL fails here
    summary = ValidateSummary()
    total = count_rows(queries_path)
    bar = _progress(min(total, limit) if limit else total, "query", progress, "validate")
    start = time.perf_counter()
    queries = (CutQuery.from_row(r) for r in read_rows(queries_path, QUERY_SCHEMA, limit=limit))

    def rows() -> Iterator[dict[str, Any]]:
        for query, result in validate_queries(
            queries,
            pool=EnvPool(),
            reuse_snapshots=reuse_snapshots,
            stats=summary.stats,
            env_workers=env_workers or None,
            env_timeout=env_timeout,
            auth_token=auth_token,
        ):
            summary.counts[(query.env_id, query.strategy, result.status.value)] += 1
            bar.update(1)
            yield {**query.to_row(), **result.to_row()}

    try:
        write_rows(out, VALIDATED_SCHEMA, rows())
    finally:
        bar.close()
    summary.seconds = time.perf_counter() - start
    return summary


# --------------------------------------------------------------------------------------------
# sidecar


@dataclass
class SidecarSummary:
    """Samples written by (env, strategy), rows left out by status, invariant violations."""

    samples: Counter = field(default_factory=Counter)  # (env, strategy) -> count
    prefix_tokens: Counter = field(default_factory=Counter)  # (env, strategy) -> sum of counts
    violations: Counter = field(default_factory=Counter)  # (env, strategy) -> rows with any
    # (env, strategy) -> prefix rows whose prompt holds no teacher turn (template-style prompts)
    no_prefix_in_prompt: Counter = field(default_factory=Counter)
    left_out: Counter = field(default_factory=Counter)  # status -> count
    examples: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def violation_rows(self) -> int:
        return sum(self.violations.values())

    def table(self) -> str:
        rows = [
            [
                env,
                strategy,
                n,
                f"{self.prefix_tokens[(env, strategy)] / n:.1f}",
                self.no_prefix_in_prompt[(env, strategy)],
                self.violations[(env, strategy)],
            ]
            for (env, strategy), n in sorted(self.samples.items())
        ]
        header = [
            "env",
            "strategy",
            "samples",
            "mean prefix tokens",
            "prefix rows without teacher turns in prompt",
            "invariant violations",
        ]
        text = markdown_table(header, rows)
        left = ", ".join(f"{n} {s}" for s, n in sorted(self.left_out.items())) or "none"
        lines = [text, "", f"left out by status: {left}; {self.seconds:.1f} s"]
        lines += [f"violation: {e}" for e in self.examples]
        return "\n".join(lines)


def run_sidecar(
    validated_path: str | Path,
    out: str | Path,
    *,
    model_path: str,
    device: str = "cpu",
    dtype: str = "float32",
    batch_tokens: int = 16_384,
    statuses: Sequence[str] = (ValidationStatus.VALIDATED.value,),
    limit: int | None = None,
    chunk: int = 64,
    progress: bool = True,
) -> SidecarSummary:
    """A ``replay.validated`` file -> a ``replay.sample`` file (canonical prompt + sidecar).

    Rows whose status is not in ``statuses`` are left out (and counted); rows that break a
    sidecar invariant are written with their ``sidecar_violations`` and counted.
    """
    unknown = [s for s in statuses if s not in STATUSES]
    if unknown:
        raise ValueError(f"unknown statuses {unknown}; choose from {list(STATUSES)}")
    model, tokenizer = load_model(model_path, device=device, dtype=dtype)
    scorer = TokenScorer(model, pad_token_id=tokenizer.pad_token_id or 0, batch_tokens=batch_tokens)
    summary = SidecarSummary()
    total = count_rows(validated_path)
    bar = _progress(min(total, limit) if limit else total, "row", progress, "sidecar")
    start = time.perf_counter()

    def rows() -> Iterator[dict[str, Any]]:
        source = read_rows(validated_path, VALIDATED_SCHEMA, limit=limit)
        for chunk_rows in _chunks(source, chunk):
            keep = []
            for row in chunk_rows:
                if row["status"] in statuses:
                    keep.append(row)
                else:
                    summary.left_out[row["status"]] += 1
            for sample in compute_sidecars(keep, tokenizer, scorer):
                key = (sample["env_id"], sample["strategy"])
                summary.samples[key] += 1
                summary.prefix_tokens[key] += sample["prefix_token_count"]
                if sample["prefix_turns"] > 0 and sample["prompt_prefix_turns"] == 0:
                    summary.no_prefix_in_prompt[key] += 1
                if sample["sidecar_violations"]:
                    summary.violations[key] += 1
                    if len(summary.examples) < 5:
                        summary.examples.append(
                            f"{sample['query_id']}: {'; '.join(sample['sidecar_violations'])}"
                        )
                sample["sft_model"] = str(model_path)
                yield sample
            bar.update(len(chunk_rows))

    try:
        write_rows(out, SAMPLE_SCHEMA, rows())
    finally:
        bar.close()
    summary.seconds = time.perf_counter() - start
    return summary
