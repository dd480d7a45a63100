"""The run of ``agentenvs eval``: choose the tasks, resume from disk, play the missing episodes,
write the tables (:func:`evaluate`; the whole behaviour is described in
:mod:`agentenvs.benchmarks.eval`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentenvs.agents.policy import SamplingParams
from agentenvs.agents.registry import make_policy
from agentenvs.agents.rollout import RolloutConfig, RolloutStats, plan_episodes, run_rollouts
from agentenvs.agents.task_sample import sample_tasks
from agentenvs.agents.trajectory import append_trajectory
from agentenvs.benchmarks.eval.metrics import (
    ErrorCount,
    MetricRow,
    count_errors,
    summarize,
    task_outcomes,
)
from agentenvs.benchmarks.eval.progress import RunProgress
from agentenvs.benchmarks.eval.resume import (
    TRAJECTORIES,
    OnDisk,
    check_run_file,
    load_finished,
    record_backend,
)
from agentenvs.benchmarks.eval.settings import EvalSettings
from agentenvs.benchmarks.eval.writers import write_tables
from agentenvs.registration import make

__all__ = ["EvalResult", "evaluate"]


@dataclass
class EvalResult:
    """What :func:`evaluate` did: the table's rows, the episodes on disk (``episodes``: finished
    or errored, one per episode key) and played now, the errors by type, the lines of the
    trajectory file that were dropped or skipped, and ``plot_note`` (why no PNG, or None)."""

    rows: list[MetricRow]
    out_dir: Path
    episodes: int
    new_episodes: int
    dropped_lines: list[str]
    errors: list[ErrorCount] = field(default_factory=list)
    first_error: str | None = None
    plot_note: str | None = None

    @property
    def all_errored(self) -> bool:
        """Every episode ended in an error: no figure of the table is a result."""
        return bool(self.errors) and all(r.samples == 0 for r in self.rows)


def evaluate(
    settings: EvalSettings,
    out_dir: str | Path,
    *,
    fresh: bool = False,
    progress: bool = True,
    skip_invalid: bool = False,
) -> EvalResult:
    """Run (or resume) an evaluation and write its tables and plot (see
    :mod:`agentenvs.benchmarks.eval`). ``skip_invalid``: resume past trajectory lines that fail
    validation (left in the file) instead of stopping at the first
    (:func:`agentenvs.benchmarks.eval.resume.load_finished`)."""
    out = Path(out_dir)
    env = make(settings.env_id, **settings.protocol_settings["env_kwargs"])
    tasks = sample_tasks(
        env.task_ids(settings.split), env.family, settings.limit, settings.task_seed
    )
    meta = {"variant": dict(env.variant), "task_ids": list(tasks)}
    family_of = env.family  # task data only: works on the closed environment
    env.close()
    check_run_file(out, settings, fresh, meta)
    on_disk = load_finished(out / TRAJECTORIES, set(tasks), skip_invalid)
    planned = _play_missing(settings, out, tasks, on_disk, progress=progress)
    episodes = _ordered([*on_disk.done.values(), *on_disk.errored.values()], tasks)
    outcomes = task_outcomes(
        # an episode that errored before its reset has no family of its own
        (t.task_id, t.family or family_of(t.task_id), t.won, t.error is not None)
        for t in episodes
    )
    rows = summarize(outcomes, settings.k)
    messages = [t.error for t in episodes if t.error is not None]
    errors = count_errors(messages)
    note = write_tables(rows, out, settings, meta, errors)
    first = messages[0] if messages else None
    return EvalResult(rows, out, len(episodes), planned, on_disk.invalid, errors, first, note)


def rollout_config(settings: EvalSettings) -> RolloutConfig:
    """The rollout of an evaluation: the protocol's turns, history and sampling, one seed per
    episode and turn."""
    return RolloutConfig(
        max_turns=settings.max_turns,
        history=settings.history,
        sampling=SamplingParams(
            settings.temperature, settings.top_p, settings.max_new_tokens, settings.seed
        ),
        max_active=settings.max_active,
        workers=settings.workers,
        env_timeout=settings.env_timeout,
        protocol=settings.protocol,
        episode_seeds=True,
    )


def _play_missing(
    settings: EvalSettings,
    out: Path,
    tasks: Sequence[str],
    on_disk: OnDisk,
    *,
    progress: bool,
) -> int:
    """Play the episodes ``on_disk`` lacks (errored ones again), appending each to the trajectory
    file and updating ``on_disk`` as it finishes; returns how many were planned."""
    done, errored = on_disk.done, on_disk.errored
    plan = [spec for spec in plan_episodes(tasks, settings.n) if spec.key not in done]
    bar = RunProgress(
        len(tasks) * settings.n,
        list(done.values()),
        f"{settings.env_id} {settings.agent}",
        enabled=progress,
        planned=len(plan),
        max_active=settings.max_active,
    )

    def record(traj: Any) -> None:
        append_trajectory(out / TRAJECTORIES, traj)
        if traj.error is None:
            done[traj.episode_key] = traj
            errored.pop(traj.episode_key, None)
        else:
            errored[traj.episode_key] = traj
        bar.add(traj)

    with bar:
        if plan:
            bar.set_status("loading the agent")
            policy = make_policy(settings.agent, **settings.agent_options)
            stats = RolloutStats()
            bar.watch(stats)
            try:
                run_rollouts(
                    policy,
                    settings.env_id,
                    plan,
                    rollout_config(settings),
                    on_episode=record,
                    stats=stats,
                )
            finally:
                record_backend(out, policy.run_metadata())
                policy.close()
    return len(plan)


def _ordered(episodes: list[Any], tasks: Sequence[str]) -> list[Any]:
    rank = {t: i for i, t in enumerate(tasks)}
    return sorted(
        episodes, key=lambda t: (rank.get(t.task_id, len(rank)), t.group_id, t.sample_index)
    )
