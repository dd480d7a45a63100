"""Environment-worker throughput: ALFWorld episodes per minute with 1, 2 and 4 workers, and Ray's
overhead against local worker processes on the same workload.

    python -m agentenvs.benchmarks.speed.env_workers                 # 16 ALFWorld expert episodes
    python -m agentenvs.benchmarks.speed.env_workers --quick  # 8 episodes, fewer configurations
    python -m agentenvs.benchmarks.speed.env_workers --policy random:0 --max-turns 20

Every configuration plays the same ALFWorld test episodes with a scripted policy (the expert by
default; it acts next to the environments, inside the workers), all in flight together, so the
run is bound by the environments: resets (textworld loads and translates a game, 0.3-1.3 s; an
environment's first reset also copies and loads its own 34 MB planner library) and steps (20-70
ms), nearly all CPU work in Python. Configurations: in this process (the baseline),
``process:1/2/4`` and ``ray:1/2/4`` (a local Ray started here with this machine's CPUs, each
actor asking for ``min(1, CPUs / N)`` of them). Each pool is started and warmed first (one
episode per worker, on test tasks outside the timed ones: the first reset in a process also
imports the engine), and that start-up time is reported apart. ``--rounds`` rounds run every
configuration in turn, each round on the next ``--episodes`` test tasks: every configuration
plays the same tasks, each new to every process (ALFWorld caches a game's PDDL translation per
process, so a second reset of a game is faster), and the figures are totals over the rounds
(interleaving spreads a shared machine's bursts of load over all configurations; the load
average is printed with the table). The column "CPU
cores used" (CPU seconds of this process and the workers per wall second) shows how much of the
machine the run really had: on a shared machine Linux gives each session an equal share, which
bounds the scaling however many workers there are.

A second table gives the pools' own cost per rollout turn on a microsecond environment
(TextCraft's random agent, 32 episodes): what a process or Ray round trip adds to every turn.

Targets: near-linear scaling up to the core count (``os.cpu_count()``; more workers than cores
cannot add throughput, so 4 workers on a 2-core machine should merely hold the 2-worker figure),
and Ray within 10% of local processes with the same number of workers.

Where ALFWorld-v0 cannot be made here (the ``alfworld`` extra or its data missing), the benchmark
falls back to TextCraft with an artificial CPU-bound cost of 40 ms per step and 300 ms per reset
(:func:`costly_textcraft`) and says so in its output.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentenvs.benchmarks.speed.timing import report
from agentenvs.textcraft import TextCraftEnv

__all__ = [
    "CostlyTextCraft",
    "WorkerRun",
    "costly_textcraft",
    "format_runs",
    "main",
    "measure",
    "workload",
]

ALFWORLD = "ALFWorld-v0"
FALLBACK = "TextCraft-v0"
FALLBACK_FACTORY = "agentenvs.benchmarks.speed.env_workers:costly_textcraft"
STEP_COST_S = 0.040
RESET_COST_S = 0.300
RAY_OVERHEAD_TARGET = 0.10


class CostlyTextCraft(TextCraftEnv):
    """TextCraft that burns CPU like a slow simulator: ``STEP_COST_S`` per step, ``RESET_COST_S``
    per reset (busy loops, so workers beyond the core count cannot hide the cost)."""

    def _start_task(self, task_id: str) -> str:
        _burn(RESET_COST_S)
        return super()._start_task(task_id)

    def _apply(self, action: str) -> Any:
        _burn(STEP_COST_S)
        return super()._apply(action)


def costly_textcraft(**kwargs: Any) -> CostlyTextCraft:
    """The fallback environment's factory (an importable ``env_factory`` for the pools)."""
    return CostlyTextCraft(**kwargs)


@dataclass(frozen=True)
class WorkerRun:
    """One configuration's result: ``wall_s`` of the timed runs, ``cpu_s`` the CPU time that
    this process and the workers used in them (None where it cannot be read), ``startup_s`` to
    start the pool and warm every worker."""

    spec: str
    workers: int
    episodes: int
    wall_s: float
    cpu_s: float | None
    startup_s: float
    won: int
    errors: int

    @property
    def episodes_per_minute(self) -> float:
        return 60.0 * self.episodes / self.wall_s

    @property
    def cores_used(self) -> float | None:
        """CPU seconds per wall second: how many cores the run really had."""
        return None if self.cpu_s is None else self.cpu_s / self.wall_s


@dataclass(frozen=True)
class Workload:
    """What every configuration plays."""

    env_id: str
    env_factory: str | None
    rounds: list[list[str]]
    warmup_tasks: list[str]
    policy: str
    max_turns: int
    note: str


def workload(episodes: int, policy: str, max_turns: int, rounds: int = 1) -> Workload:
    """ALFWorld test episodes (``rounds`` slices of ``episodes``, and 8 warm-up tasks from the
    end of the split), or the TextCraft fallback where ALFWorld cannot be made."""
    from agentenvs.registration import make

    try:
        env = make(ALFWORLD)
        tasks = env.task_ids("test")
        env.reset(options={"task_id": tasks[-1]})
        env.close()
        env_id, factory, note = ALFWORLD, None, "ALFWorld-v0"
    except Exception as exc:  # the extra or its data is missing: say so and fall back
        env = make(FALLBACK)
        tasks = env.task_ids("test")
        env.close()
        env_id, factory = FALLBACK, FALLBACK_FACTORY
        note = (
            f"ALFWorld-v0 unavailable ({type(exc).__name__}: {exc}); fallback: TextCraft with "
            f"{STEP_COST_S * 1e3:.0f} ms CPU per step and {RESET_COST_S * 1e3:.0f} ms per reset"
        )
    if len(tasks) < episodes * rounds + 8:
        raise ValueError(
            f"{env_id} has {len(tasks)} test tasks: too few for {rounds} x {episodes} timed "
            "episodes and 8 warm-up ones; ask for fewer"
        )
    slices = [tasks[r * episodes : (r + 1) * episodes] for r in range(rounds)]
    return Workload(env_id, factory, slices, tasks[-8:], policy, max_turns, note)


def measure(work: Workload, specs: list[str], *, cpus: int | None = None) -> list[WorkerRun]:
    """Play each round of ``work`` in a new pool of each of ``specs`` (``inprocess``,
    ``process:N``, ``ray:N``) in turn; totals per spec (start-up: the mean)."""
    cpus = cpus or os.cpu_count() or 1
    if any(s.startswith("ray") for s in specs):
        from agentenvs.agents.envworkers.ray_pool import import_ray

        ray = import_ray()
        if not ray.is_initialized():
            ray.init(num_cpus=cpus, include_dashboard=False)
    runs: dict[str, list[WorkerRun]] = {spec: [] for spec in specs}
    for tasks in work.rounds:
        for spec in specs:
            runs[spec].append(_measure_one(work, tasks, spec, cpus))
    return [_total(runs[spec]) for spec in specs]


def _total(runs: list[WorkerRun]) -> WorkerRun:
    return WorkerRun(
        spec=runs[0].spec,
        workers=runs[0].workers,
        episodes=sum(r.episodes for r in runs),
        wall_s=sum(r.wall_s for r in runs),
        cpu_s=None if any(r.cpu_s is None for r in runs) else sum(r.cpu_s for r in runs),
        startup_s=sum(r.startup_s for r in runs) / len(runs),
        won=sum(r.won for r in runs),
        errors=sum(r.errors for r in runs),
    )


def _measure_one(work: Workload, tasks: list[str], spec: str, cpus: int) -> WorkerRun:
    from agentenvs.agents.envworkers import make_env_pool, parse_env_workers
    from agentenvs.agents.registry import make_policy
    from agentenvs.agents.rollout import RolloutConfig, plan_episodes, run_rollouts

    parsed = parse_env_workers(spec)
    options: dict[str, Any] = {"env_factory": work.env_factory}
    if parsed.kind == "ray":
        options["cpus_per_worker"] = min(1.0, cpus / (parsed.workers or 1))
    env_kwargs = {"max_turns": work.max_turns}
    start = time.perf_counter()
    pool = make_env_pool(work.env_id, spec, env_kwargs, **options)
    try:
        workers = max(1, pool.workers)
        warm = plan_episodes(work.warmup_tasks[:workers], 1)
        config = RolloutConfig(max_turns=work.max_turns, max_active=workers)
        run_rollouts(make_policy(work.policy), work.env_id, warm, config, env_pool=pool)
        startup = time.perf_counter() - start
        config = RolloutConfig(max_turns=work.max_turns, max_active=len(tasks))
        pids = pool.worker_pids() if parsed.kind != "inprocess" else []
        cpu0 = _cpu_seconds(pids)
        t0 = time.perf_counter()
        played = run_rollouts(
            make_policy(work.policy),
            work.env_id,
            plan_episodes(tasks, 1),
            config,
            env_pool=pool,
        )
        wall = time.perf_counter() - t0
        cpu1 = _cpu_seconds(pids)
    finally:
        pool.close()
    return WorkerRun(
        spec=spec,
        workers=pool.workers,
        episodes=len(played),
        wall_s=wall,
        cpu_s=None if cpu0 is None or cpu1 is None else cpu1 - cpu0,
        startup_s=startup,
        won=sum(t.won for t in played),
        errors=sum(t.error is not None for t in played),
    )


def format_runs(runs: list[WorkerRun], cpus: int) -> str:
    """A Markdown table: throughput, speed-up against one worker of the same kind, the targets."""
    one = {r.spec.partition(":")[0]: r for r in runs if r.workers == 1}
    process = {r.workers: r for r in runs if r.spec.startswith("process")}
    lines = [
        "| workers | episodes/min | wall | speed-up vs 1 worker | target | met | CPU cores used "
        "| start-up | won |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        base = one.get(r.spec.partition(":")[0])
        speedup = base.wall_s / r.wall_s if base and r.workers else None
        target, met = _target(r, speedup, cpus, process)
        lines.append(
            f"| {r.spec} | {r.episodes_per_minute:.1f} | {r.wall_s:.2f} s | "
            f"{'' if speedup is None else f'{speedup:.2f}x'} | {target} | {met} | "
            f"{'' if r.cores_used is None else f'{r.cores_used:.2f}'} | "
            f"{r.startup_s:.1f} s | {r.won}/{r.episodes} |"
        )
    return "\n".join(lines)


def _target(
    run: WorkerRun, speedup: float | None, cpus: int, process: dict[int, WorkerRun]
) -> tuple[str, str]:
    if run.spec.startswith("ray") and run.workers in process:
        overhead = run.wall_s / process[run.workers].wall_s - 1.0
        ok = overhead <= RAY_OVERHEAD_TARGET
        return (
            f"Ray overhead {100 * overhead:+.1f}% vs process:{run.workers} "
            f"(<= {100 * RAY_OVERHEAD_TARGET:.0f}%)",
            "yes" if ok else "no",
        )
    if speedup is None or run.workers <= 1:
        return "", ""
    ideal = min(run.workers, cpus)
    goal = 0.8 * ideal
    return f">= {goal:.1f}x (ideal {ideal}x on {cpus} cores)", "yes" if speedup >= goal else "no"


def measure_transport(
    specs: list[str], *, episodes: int = 32, turns: int = 10, rounds: int = 3
) -> dict[str, float]:
    """Seconds per rollout turn of TextCraft's random agent (microsecond steps, so this is the
    pools' own cost: one ``act`` and one ``step`` batch over ``episodes`` episodes), best of
    ``rounds`` runs in one warm pool per spec."""
    from agentenvs.agents.envworkers import make_env_pool
    from agentenvs.agents.registry import make_policy
    from agentenvs.agents.rollout import RolloutConfig, RolloutStats, plan_episodes, run_rollouts
    from agentenvs.registration import make

    env = make(FALLBACK)
    tasks = env.task_ids("test")[:episodes]
    env.close()
    config = RolloutConfig(max_turns=turns, max_active=episodes)
    per_turn: dict[str, float] = {}
    for spec in specs:
        with make_env_pool(FALLBACK, spec, {"max_turns": turns}) as pool:
            best = float("inf")
            for _ in range(rounds + 1):  # the first run warms the pool
                stats = RolloutStats()
                plan = plan_episodes(tasks, 1)
                run_rollouts(
                    make_policy("random:0"), FALLBACK, plan, config, stats=stats, env_pool=pool
                )
                best = min(best, stats.wall_seconds / max(1, stats.generate_calls))
            per_turn[spec] = best
    return per_turn


def format_transport(per_turn: dict[str, float], episodes: int = 32) -> str:
    """A Markdown table of :func:`measure_transport`'s figures."""
    base = per_turn.get("inprocess")
    lines = [
        f"| pool | time per turn ({episodes} TextCraft episodes: one act + one step batch) "
        "| vs in-process |",
        "|---|---|---|",
    ]
    for spec, seconds in per_turn.items():
        ratio = f"{seconds / base:.1f}x" if base else ""
        lines.append(f"| {spec} | {seconds * 1e3:.2f} ms | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 episodes; 1 and 2 workers only")
    parser.add_argument("--episodes", type=int, default=None, help="episodes (default 16)")
    parser.add_argument("--policy", default="expert", help="expert (default) or random:SEED")
    parser.add_argument("--max-turns", type=int, default=50, help="turn limit (default 50)")
    parser.add_argument(
        "--rounds", type=int, default=None, help="rounds of all configurations (default 3; quick 1)"
    )
    parser.add_argument("--no-ray", action="store_true", help="local processes only")
    parser.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    args = parser.parse_args(argv)
    counts = [1, 2] if args.quick else [1, 2, 4]
    episodes = args.episodes or (8 if args.quick else 16)
    specs = ["inprocess"] + [f"process:{n}" for n in counts]
    if not args.no_ray:
        specs += [f"ray:{n}" for n in counts]
    cpus = os.cpu_count() or 1
    rounds = args.rounds or (1 if args.quick else 3)
    work = workload(episodes, args.policy, args.max_turns, rounds)
    load_before = os.getloadavg()[0]
    runs = measure(work, specs, cpus=cpus)
    header = (
        f"{work.note}: {rounds} round(s) of {episodes} episodes (all in flight), agent "
        f"{work.policy}, max {work.max_turns} turns; this machine has {cpus} CPU cores (1-minute "
        f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after)"
    )
    if max(load_before, os.getloadavg()[0]) > cpus:
        header += (
            "\nThe machine was shared (load average above the core count): throughput is "
            "bounded by the CPU share this run got, in the column 'CPU cores used' (Linux gives "
            "each session an equal share however many processes it runs)."
        )
    text = header + "\n\n" + format_runs(runs, cpus)
    transport = ["inprocess", "process:2"] + ([] if args.no_ray else ["ray:2"])
    text += (
        "\n\nThe pools' own cost per turn, on a microsecond environment:\n\n"
        + format_transport(measure_transport(transport))
    )
    report(text, args.out)
    return 0


def _cpu_seconds(pids: list[int]) -> float | None:
    """CPU time (user + system) of this process and of ``pids`` (local processes; read from
    ``/proc``, so Linux only), or None where it cannot be read."""
    total = time.process_time()
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            return None
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total


def _burn(seconds: float) -> None:
    """Use ``seconds`` of CPU time (not wall time: on a busy machine it takes longer)."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


if __name__ == "__main__":
    sys.exit(main())
