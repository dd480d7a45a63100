"""The command line of ``agentenvs eval``: its options as a table, the settings they make, and
what the command prints and returns (:func:`main`)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from agentenvs.agents.envworkers import (
    DEFAULT_ENV_TIMEOUT_S,
    ENV_TIMEOUT_HELP,
    EnvWorkerError,
    parse_env_timeout,
    parse_env_workers,
)
from agentenvs.agents.policy import BackendUnavailableError
from agentenvs.benchmarks.eval.evaluate import EvalResult, evaluate
from agentenvs.benchmarks.eval.resume import resume_command, stopped_message
from agentenvs.benchmarks.eval.settings import EvalSettings
from agentenvs.benchmarks.eval.writers import format_errors, format_markdown
from agentenvs.registration import ENVIRONMENTS, MissingDependencyError

__all__ = ["OPTIONS", "build_parser", "default_out", "env_workers_spec", "key_value", "main"]


def key_value(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of a repeatable option; VALUE read as JSON when it parses, else a string."""
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"takes KEY=VALUE, got {text!r}")
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


def _env_timeout(text: str) -> float | None:
    try:
        return parse_env_timeout(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_DEFAULT = "default: the protocol's"

# (flags, argparse keywords): the options of `agentenvs eval`, in the order --help shows them
OPTIONS: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (("env_id",), {"help": "environment id, e.g. TextCraft-v0 (see 'agentenvs list')"}),
    (
        ("--agent",),
        {
            "required": True,
            "help": "expert | random[:SEED] | hf:<model> | vllm:<model> | openai:<model>@<url> "
            "| embedded",
        },
    ),
    (("--split",), {"default": "test", "help": "task split (default: test)"}),
    (("-k",), {"type": int, "default": 8, "help": "k of Avg@k / Pass@k (default 8)"}),
    (("-n",), {"type": int, "help": "samples per task (default: k; may exceed k)"}),
    (("--out",), {"type": Path, "help": "output directory (default: results/eval/<env>/<agent>)"}),
    (
        ("--protocol",),
        {
            "help": "benchmark protocol: prefix-grpo or ptgpo (default: the environment's own; "
            "see docs/protocols.md)",
        },
    ),
    (
        ("--limit",),
        {
            "type": int,
            "help": "N tasks of the split, a seeded sample spread over its task families",
        },
    ),
    (
        ("--task-seed",),
        {"type": int, "default": 0, "help": "seed of the --limit sample (default 0)"},
    ),
    (
        ("--history",),
        {
            "type": _history,
            "default": "default",
            "help": "history window: default, all, or N turns",
        },
    ),
    (("--max-turns",), {"type": int, "help": "turn limit (default: the protocol's)"}),
    (("--temperature",), {"type": float, "help": _DEFAULT}),
    (("--top-p",), {"type": float, "help": _DEFAULT}),
    (("--max-new-tokens",), {"type": int, "help": "tokens per reply (default: the protocol's)"}),
    (("--seed",), {"type": int, "default": 0, "help": "sampling seed (default 0)"}),
    (
        ("--env-workers", "--workers"),
        {
            "dest": "workers",
            "default": "0",
            "metavar": "SPEC",
            "help": "where environments step: 0 or inprocess (default), N or process:N (N local "
            "worker processes), ray[:N][@ADDRESS] (Ray actors, one per cluster CPU without N; "
            "needs agentenvs[ray]), http://HOST:PORT[,http://HOST2:PORT] (agentenvs serve "
            "servers, episodes spread over them; a server's --auth-token from "
            "AGENTENVS_AUTH_TOKEN)",
        },
    ),
    (
        ("--ray-address",),
        {
            "help": "the Ray cluster of --env-workers ray (auto, HOST:6379 or ray://HOST:10001; "
            "default: RAY_ADDRESS, else a new local Ray)",
        },
    ),
    (
        ("--env-timeout",),
        {
            "type": _env_timeout,
            "default": DEFAULT_ENV_TIMEOUT_S,
            "metavar": "SECONDS",
            "help": ENV_TIMEOUT_HELP,
        },
    ),
    (
        ("--max-active",),
        {
            "type": int,
            "default": 64,
            "help": "episodes in flight per generation batch (default 64)",
        },
    ),
    (
        ("--agent-opt",),
        {
            "type": key_value,
            "action": "append",
            "default": [],
            "metavar": "KEY=VALUE",
            "help": "backend option, e.g. device=cuda, dtype=bfloat16, concurrency=16 (repeatable)",
        },
    ),
    (("--fresh",), {"action": "store_true", "help": "discard a previous run in --out"}),
    (("--no-progress",), {"action": "store_true", "help": "no progress bar"}),
    (
        ("--skip-invalid",),
        {
            "action": "store_true",
            "help": "resume past trajectory lines that fail validation (they stay in the file) "
            "instead of stopping at the first",
        },
    ),
)


def build_parser() -> argparse.ArgumentParser:
    """The parser of :data:`OPTIONS`."""
    parser = argparse.ArgumentParser(
        prog="agentenvs eval",
        description="Avg@k / Pass@k of an agent on an environment split (resumable).",
    )
    for flags, keywords in OPTIONS:
        parser.add_argument(*flags, **keywords)
    return parser


def default_out(env_id: str, agent: str) -> Path:
    """``results/eval/<env>/<agent>``, the agent spec made a safe folder name."""
    return Path("results") / "eval" / env_id / re.sub(r"[^A-Za-z0-9._-]+", "_", agent).strip("_")


def env_workers_spec(spec: str, ray_address: str | None) -> str:
    """The ``--env-workers`` spec, checked, with ``--ray-address`` folded in."""
    parsed = parse_env_workers(spec)
    if ray_address is None:
        return spec
    if parsed.kind != "ray" or parsed.address is not None:
        raise ValueError(
            f"--ray-address goes with --env-workers ray or ray:N (without @ADDRESS), got {spec!r}"
        )
    count = f":{parsed.workers}" if parsed.workers is not None else ""
    return f"ray{count}@{ray_address}"


def settings_from_args(args: argparse.Namespace) -> EvalSettings:
    """The run the parsed command line asks for (an unknown protocol: ValueError)."""
    return EvalSettings(
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
        env_timeout=args.env_timeout,
        max_active=args.max_active,
        agent_options=dict(args.agent_opt),
        protocol=args.protocol,
        task_seed=args.task_seed,
    )


def _report(result: EvalResult, settings: EvalSettings, argv: list[str], out: Path) -> int:
    """Print the tables and where the run lies; 1 when every episode errored, else 0."""
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


def main(argv: list[str] | None = None) -> int:
    """``agentenvs eval``: 0 with a result, 1 when none could be had (every episode errored, the
    agent's server down, an extra missing), 2 for bad settings, 130 when interrupted."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    out = args.out or default_out(args.env_id, args.agent)
    if args.env_id not in ENVIRONMENTS:
        print(
            f"agentenvs eval: unknown environment {args.env_id!r}; "
            f"choose from {sorted(ENVIRONMENTS)}",
            file=sys.stderr,
        )
        return 2
    try:
        settings = settings_from_args(args)
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
    except (BackendUnavailableError, EnvWorkerError) as exc:  # a model or environment server
        print(f"agentenvs eval: {exc}\n{stopped_message(argv, out)}", file=sys.stderr)
        return 1
    except MissingDependencyError as exc:  # at gym.make, before any episode
        print(f"agentenvs eval: {exc}", file=sys.stderr)
        return 1
    except (ValueError, RuntimeError) as exc:
        print(f"agentenvs eval: {exc}", file=sys.stderr)
        return 2
    return _report(result, settings, argv, out)


if __name__ == "__main__":
    sys.exit(main())
