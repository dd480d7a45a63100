"""``agentenvs eval``: Avg@k / Pass@k of an agent on an environment split, resumable.

    agentenvs eval TextCraft-v0 --agent expert --split test -k 8 --out results/tc-expert
    agentenvs eval TextCraft-v0 --agent hf:Qwen/Qwen3-1.7B -k 8 --agent-opt dtype=bfloat16
    agentenvs eval Sokoban-v0 --agent openai:my-model@http://127.0.0.1:8000/v1 -k 8 -n 16
    agentenvs eval ALFWorld-v0 --agent expert --env-workers ray --ray-address auto
    agentenvs eval ALFWorld-v0 --protocol prefix-grpo --agent hf:Qwen/Qwen3-1.7B -k 8

Every task of the split (with ``--limit N``: N of them, a seeded sample spread over the task
families, :func:`agentenvs.agents.task_sample.sample_tasks`) is played ``-n`` times (default ``-k``), all
episodes batched together (:func:`agentenvs.agents.rollout.run_rollouts`), under a benchmark protocol
(``--protocol``, default the environment's own: :mod:`agentenvs.agents.protocols`), which fixes the
environment variant, prompt, parser, handling of unparseable replies, turn limit, history and
sampling; an explicit flag (``--max-turns``, ``--temperature``, ``--top-p``,
``--max-new-tokens``, ``--history``) overrides its setting and is recorded in ``overrides``.
Each finished episode is appended to ``OUT/trajectories.jsonl`` at once; a rerun with the same
``--out`` reads that file and plays only the episodes it lacks (a corrupt last line from a killed
run is dropped; :mod:`agentenvs.benchmarks.eval_resume`), so an interrupted run resumes without repeating
or losing an episode; each reply is drawn with a seed of its episode and turn, so the resumed run samples
the replies the unbroken one would have (a run recorded before that seeding cannot resume).
``OUT/run.json`` records the settings; resuming with different ones is refused (pass ``--fresh``
to start over); it also names the protocol, every setting the protocol fixed
(``protocol_settings``), the overrides, the environment's ``variant`` and the chosen task ids.
Environments step where ``--env-workers`` says (:mod:`agentenvs.agents.envworkers`: this process, local
worker processes, or Ray actors on a cluster).

At the end: ``OUT/results.md`` and ``OUT/results.csv`` (Avg@k and Pass@k per task family and
overall; :mod:`agentenvs.benchmarks.metrics`), ``OUT/results.png`` (a bar plot, when matplotlib
is installed: the ``train`` extra) and ``OUT/results.json`` (the rows with the run's metadata:
protocol, its settings, overrides, variant, task ids, errors); ``results.md`` states the
protocol and variant under its title.

An episode that ended in an error (its environment, worker or policy failed) is not a result:
it is left out of Avg@k and Pass@k, counted beside them and per error type (the table, the
``errors`` of ``results.json``), and played again by the next run into the same ``--out``. An
environment whose dependency does not import stops the run before any episode, naming the extra
to install (:class:`agentenvs.registration.MissingDependencyError`); a run whose every episode
errored exits 1 with the first error.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentenvs.benchmarks.eval_resume import (
    SEEDING,
    TRAJECTORIES,
    EvalSettingsError,
    check_run_file,
    load_finished,
    record_backend,
    resume_command,
    stopped_message,
)
from agentenvs.benchmarks.metrics import (
    OVERALL,
    ErrorCount,
    MetricRow,
    count_errors,
    summarize,
    task_outcomes,
)
from agentenvs.benchmarks.result_plot import plot_rows

__all__ = [
    "EvalResult",
    "EvalSettings",
    "EvalSettingsError",
    "evaluate",
    "format_markdown",
    "main",
    "resume_command",
]

_PROTOCOL_FIELDS = ("max_turns", "history", "temperature", "top_p", "max_new_tokens")


@dataclass
class EvalSettings:
    """Everything that defines an evaluation run (recorded in ``run.json``).

    ``protocol``: a benchmark protocol (None: the environment's default one); the settings
    left at None (or ``history="default"``) take its evaluation values, the others are
    ``overrides``. ``limit``: play a sample of that many tasks across the families, drawn with
    ``task_seed`` (:func:`agentenvs.agents.task_sample.sample_tasks`). Each reply is drawn with its
    own seed (:func:`agentenvs.agents.rollout.episode_seed` of ``seed``, the episode and its turn),
    so an episode samples the same replies whatever shares its batch, ``max_active``, or whether
    the run was interrupted and resumed (with a backend whose rows are batch-independent, as the
    transformers backend's bfloat16 paths and the embedded agent are).
    """

    env_id: str
    agent: str
    split: str = "test"
    k: int = 8
    n: int | None = None
    limit: int | None = None
    history: int | None | str = "default"
    max_turns: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_new_tokens: int | None = None
    seed: int | None = 0
    workers: int | str = 0
    max_active: int = 64
    agent_options: dict[str, Any] = field(default_factory=dict)
    protocol: str | None = None
    task_seed: int = 0
    overrides: dict[str, Any] = field(default_factory=dict)
    protocol_settings: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from agentenvs.agents.protocols import default_protocol, env_protocol

        self.n = self.n if self.n is not None else self.k
        if self.k < 1 or self.n < self.k:
            raise ValueError(f"need 1 <= k <= n, got k={self.k}, n={self.n}")
        if self.protocol is None:
            self.protocol = default_protocol(self.env_id)
        setup = env_protocol(self.protocol, self.env_id)  # bad names: an error listing them
        self.protocol_settings = setup.settings("eval")
        given = {
            name: getattr(self, name)
            for name in _PROTOCOL_FIELDS
            if getattr(self, name) not in (None, "default")
        }
        self.overrides = {k: v for k, v in given.items() if v != self.protocol_settings[k]}
        for name in _PROTOCOL_FIELDS:
            if name not in given:
                setattr(self, name, self.protocol_settings[name])


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
    """Run (or resume) an evaluation and write its tables and plot; see the module docstring.
    ``skip_invalid``: resume past trajectory lines that fail validation (left in the file)
    instead of stopping at the first (:func:`agentenvs.benchmarks.eval_resume.load_finished`)."""
    from agentenvs.registration import make
    from agentenvs.agents.policy import SamplingParams
    from agentenvs.agents.registry import make_policy
    from agentenvs.agents.rollout import RolloutConfig, RolloutStats, plan_episodes, run_rollouts
    from agentenvs.agents.task_sample import sample_tasks
    from agentenvs.agents.trajectory import append_trajectory
    from agentenvs.benchmarks.progress import RunProgress

    out = Path(out_dir)
    path = out / TRAJECTORIES
    env = make(settings.env_id, **settings.protocol_settings["env_kwargs"])
    tasks = sample_tasks(
        env.task_ids(settings.split), env.family, settings.limit, settings.task_seed
    )
    meta = {"variant": dict(env.variant), "task_ids": list(tasks)}
    family_of = env.family  # task data only: works on the closed environment
    env.close()
    check_run_file(out, settings, fresh, meta)
    on_disk = load_finished(path, set(tasks), skip_invalid)
    done, errored = on_disk.done, on_disk.errored  # errored episodes are played again
    plan = [spec for spec in plan_episodes(tasks, settings.n) if spec.key not in done]
    config = RolloutConfig(
        max_turns=settings.max_turns,
        history=settings.history,
        sampling=SamplingParams(
            settings.temperature, settings.top_p, settings.max_new_tokens, settings.seed
        ),
        max_active=settings.max_active,
        workers=settings.workers,
        protocol=settings.protocol,
        episode_seeds=True,
    )
    bar = RunProgress(
        len(tasks) * settings.n,
        list(done.values()),
        f"{settings.env_id} {settings.agent}",
        enabled=progress,
        planned=len(plan),
        max_active=settings.max_active,
    )

    def record(traj: Any) -> None:
        append_trajectory(path, traj)
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
                run_rollouts(policy, settings.env_id, plan, config, on_episode=record, stats=stats)
            finally:
                record_backend(out, policy.run_metadata())
                policy.close()
    episodes = _ordered([*done.values(), *errored.values()], tasks)
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
    return EvalResult(rows, out, len(episodes), len(plan), on_disk.invalid, errors, first, note)


def _ordered(episodes: list[Any], tasks: Sequence[str]) -> list[Any]:
    rank = {t: i for i, t in enumerate(tasks)}
    return sorted(
        episodes, key=lambda t: (rank.get(t.task_id, len(rank)), t.group_id, t.sample_index)
    )


# --------------------------------------------------------------------------------------------
# Tables and plot


def _figure(value: float | None, over: int, tasks: int) -> str:
    """A percentage; ``-`` when no task qualified; with the tasks it covers when not all."""
    if value is None:
        return "-"
    return f"{100 * value:.2f}" + (f" ({over}/{tasks} tasks)" if over != tasks else "")


def format_markdown(rows: Sequence[MetricRow], title: str = "") -> str:
    """A Markdown table of ``rows`` (percentages). ``samples`` are the played episodes; the
    ``errors`` beside them (episodes that ended in an error) are left out of Avg@k and Pass@k,
    which then name the tasks they cover."""
    k = rows[0].k if rows else 0
    lines = [f"### {title}", ""] if title else []
    lines += [
        f"| family | tasks | samples | successes | Avg@{k} | Pass@{k} | errors |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        name = f"**{r.family}**" if r.family == OVERALL else r.family
        lines.append(
            f"| {name} | {r.tasks} | {r.samples} | {r.successes} | "
            f"{_figure(r.avg_at_k, r.avg_tasks, r.tasks)} | "
            f"{_figure(r.pass_at_k, r.pass_tasks, r.tasks)} | {r.errors} |"
        )
    return "\n".join(lines)


def format_errors(errors: Sequence[ErrorCount]) -> str:
    """The errored episodes per error type, with the first message of each (empty: none)."""
    if not errors:
        return ""
    total = sum(e.episodes for e in errors)
    lines = [
        f"{total} episode(s) ended in an error: not results, left out of Avg@k and Pass@k, "
        "played again by the next run into the same --out.",
        "",
        "| error | episodes | first message |",
        "|---|---:|---|",
    ]
    for e in errors:
        first = " ".join(e.first.split()).replace("|", "\\|")
        lines.append(f"| {e.type} | {e.episodes} | {first} |")
    return "\n".join(lines)


def run_metadata(settings: EvalSettings, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a result table records besides its rows: the protocol, every setting it fixed, the
    overrides, the environment variant and the tasks."""
    return {
        "env_id": settings.env_id,
        "agent": settings.agent,
        "split": settings.split,
        "n": settings.n,
        "k": settings.k,
        "protocol": settings.protocol,
        "protocol_settings": settings.protocol_settings,
        "overrides": settings.overrides,
        "limit": settings.limit,
        "task_seed": settings.task_seed,
        "seed": settings.seed,
        "seeding": SEEDING,
        **(meta or {}),
    }


def _describe(metadata: dict[str, Any]) -> str:
    variant = metadata.get("variant") or {}
    parts = [f"protocol `{metadata['protocol']}`"]
    parts.append("variant " + (", ".join(f"`{k}={v}`" for k, v in variant.items()) or "default"))
    if metadata.get("overrides"):
        parts.append(
            "overrides " + ", ".join(f"`{k}={v}`" for k, v in metadata["overrides"].items())
        )
    if metadata.get("limit") is not None:
        parts.append(
            f"{len(metadata.get('task_ids', []))} sampled tasks (task seed {metadata['task_seed']})"
        )
    return "; ".join(parts)


def write_tables(
    rows: Sequence[MetricRow],
    out: Path,
    settings: EvalSettings,
    meta: dict[str, Any] | None = None,
    errors: Sequence[ErrorCount] = (),
) -> str | None:
    """``results.md``, ``results.csv``, ``results.json`` and ``results.png`` in ``out``;
    returns why the PNG was not drawn (matplotlib not installed), or None."""
    title = (
        f"{settings.env_id} / {settings.agent} / {settings.split} (n={settings.n}, k={settings.k})"
    )
    metadata = run_metadata(settings, meta)
    table = format_markdown(rows, title)
    head, sep, body = table.partition("\n\n")
    error_table = format_errors(errors)
    error_part = f"\n{error_table}\n" if error_table else ""  # after the table's newline
    (out / "results.md").write_text(f"{head}\n\n{_describe(metadata)}\n\n{body}\n{error_part}")
    record = {
        **metadata,
        "rows": [asdict(r) for r in rows],
        "errors": [asdict(e) for e in errors],
    }
    (out / "results.json").write_text(json.dumps(record, indent=2) + "\n")
    with (out / "results.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        k = settings.k
        writer.writerow(
            [
                "family",
                "tasks",
                "samples",
                "successes",
                "errors",
                f"avg@{k}",
                f"pass@{k}",
                "avg_tasks",
                "pass_tasks",
            ]
        )
        for r in rows:
            writer.writerow(
                [
                    r.family,
                    r.tasks,
                    r.samples,
                    r.successes,
                    r.errors,
                    "" if r.avg_at_k is None else f"{r.avg_at_k:.6f}",
                    "" if r.pass_at_k is None else f"{r.pass_at_k:.6f}",
                    r.avg_tasks,
                    r.pass_tasks,
                ]
            )
    return plot_rows(rows, out / "results.png", title)


# --------------------------------------------------------------------------------------------
# Command line


def _option(text: str) -> tuple[str, Any]:
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"--agent-opt takes KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _history(text: str) -> int | None | str:
    if text in ("default", "all"):
        return "default" if text == "default" else None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--history takes default, all or a number, got {text!r}"
        ) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentenvs eval",
        description="Avg@k / Pass@k of an agent on an environment split (resumable).",
    )
    parser.add_argument("env_id", help="environment id, e.g. TextCraft-v0 (see 'agentenvs list')")
    parser.add_argument(
        "--agent",
        required=True,
        help="expert | random[:SEED] | hf:<model> | vllm:<model> | openai:<model>@<url> | embedded",
    )
    parser.add_argument("--split", default="test", help="task split (default: test)")
    parser.add_argument("-k", type=int, default=8, help="k of Avg@k / Pass@k (default 8)")
    parser.add_argument(
        "-n", type=int, default=None, help="samples per task (default: k; may exceed k)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output directory (default: results/eval/<env>/<agent>)",
    )
    parser.add_argument(
        "--protocol",
        default=None,
        help="benchmark protocol: prefix-grpo or ptgpo (default: the environment's own; see "
        "docs/protocols.md)",
    )
    parser.add_argument(
        "--limit",
        type=int,
        default=None,
        help="N tasks of the split, a seeded sample spread over its task families",
    )
    parser.add_argument(
        "--task-seed", type=int, default=0, help="seed of the --limit sample (default 0)"
    )
    parser.add_argument(
        "--history",
        type=_history,
        default="default",
        help="history window: default, all, or N turns",
    )
    parser.add_argument(
        "--max-turns", type=int, default=None, help="turn limit (default: the protocol's)"
    )
    parser.add_argument("--temperature", type=float, default=None, help="default: the protocol's")
    parser.add_argument("--top-p", type=float, default=None, help="default: the protocol's")
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="tokens per reply (default: the protocol's)",
    )
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument(
        "--env-workers",
        "--workers",
        dest="workers",
        default="0",
        metavar="SPEC",
        help="where environments step: 0 or inprocess (default), N or process:N (N local "
        "worker processes), ray[:N][@ADDRESS] (Ray actors, one per cluster CPU without N; "
        "needs agentenvs[ray]), http://HOST:PORT[,http://HOST2:PORT] (agentenvs serve "
        "servers, episodes spread over them)",
    )
    parser.add_argument(
        "--ray-address",
        default=None,
        help="the Ray cluster of --env-workers ray (auto, HOST:6379 or ray://HOST:10001; "
        "default: RAY_ADDRESS, else a new local Ray)",
    )
    parser.add_argument(
        "--max-active",
        type=int,
        default=64,
        help="episodes in flight per generation batch (default 64)",
    )
    parser.add_argument(
        "--agent-opt",
        type=_option,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="backend option, e.g. device=cuda, dtype=bfloat16, concurrency=16 (repeatable)",
    )
    parser.add_argument("--fresh", action="store_true", help="discard a previous run in --out")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--skip-invalid",
        action="store_true",
        help="resume past trajectory lines that fail validation (they stay in the file) "
        "instead of stopping at the first",
    )
    return parser


def default_out(env_id: str, agent: str) -> Path:
    return Path("results") / "eval" / env_id / re.sub(r"[^A-Za-z0-9._-]+", "_", agent).strip("_")


def env_workers_spec(spec: str, ray_address: str | None) -> str:
    """The ``--env-workers`` spec, checked, with ``--ray-address`` folded in."""
    from agentenvs.agents.envworkers import parse_env_workers

    parsed = parse_env_workers(spec)
    if ray_address is None:
        return spec
    if parsed.kind != "ray" or parsed.address is not None:
        raise ValueError(
            f"--ray-address goes with --env-workers ray or ray:N (without @ADDRESS), got {spec!r}"
        )
    count = f":{parsed.workers}" if parsed.workers is not None else ""
    return f"ray{count}@{ray_address}"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    from agentenvs.agents.policy import BackendUnavailableError
    from agentenvs.registration import ENVIRONMENTS, MissingDependencyError

    out = args.out or default_out(args.env_id, args.agent)
    if args.env_id not in ENVIRONMENTS:
        print(
            f"agentenvs eval: unknown environment {args.env_id!r}; "
            f"choose from {sorted(ENVIRONMENTS)}",
            file=sys.stderr,
        )
        return 2
    try:
        settings = EvalSettings(
            env_id=args.env_id,
            agent=args.agent,
            split=args.split,
            k=args.k,
            n=args.n,
            limit=args.limit,
            history=args.history,
            max_turns=args.max_turns,
            temperature=args.temperature,
            top_p=args.top_p,
            max_new_tokens=args.max_new_tokens,
            seed=args.seed,
            workers=env_workers_spec(args.workers, args.ray_address),
            max_active=args.max_active,
            agent_options=dict(args.agent_opt),
            protocol=args.protocol,
            task_seed=args.task_seed,
        )
        result = evaluate(
            settings,
            out,
            fresh=args.fresh,
            progress=not args.no_progress,
            skip_invalid=args.skip_invalid,
        )
    except KeyboardInterrupt:
        print(f"\nagentenvs eval: interrupted; {stopped_message(argv, out)}", file=sys.stderr)
        return 130
    except BackendUnavailableError as exc:  # a server down for longer than its retry window
        print(f"agentenvs eval: {exc}\n{stopped_message(argv, out)}", file=sys.stderr)
        return 1
    except MissingDependencyError as exc:  # at gym.make, before any episode
        print(f"agentenvs eval: {exc}", file=sys.stderr)
        return 1
    except (ValueError, RuntimeError) as exc:
        print(f"agentenvs eval: {exc}", file=sys.stderr)
        return 2
    title = f"{settings.env_id} / {settings.agent} / {settings.split} ({settings.protocol})"
    print(format_markdown(result.rows, title))
    if result.errors:
        print("\n" + format_errors(result.errors))
    print(f"\n{result.episodes} episodes ({result.new_episodes} new) in {out}")
    print(f"see them: agentenvs view {out}")
    if result.plot_note:
        print(result.plot_note)
    if result.all_errored:
        print(
            f"agentenvs eval: every episode ended in an error; no result. The first:\n"
            f"  {result.first_error}\nFix its cause, then rerun the same command to play "
            f"them again:\n  {resume_command(argv, out)}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
