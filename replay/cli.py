"""``agentenvs replay cuts | validate | sidecar``: the replay stages from the command line.

    agentenvs replay cuts expert.jsonl -o queries.jsonl --model SFT_DIR
    agentenvs replay cuts expert.jsonl -o q.jsonl --strategy fixed-ratio --ratios paper-b
    agentenvs replay validate queries.jsonl -o validated.jsonl
    agentenvs replay validate queries.jsonl -o validated.jsonl --env-workers http://h:8000
    agentenvs replay sidecar validated.jsonl -o samples.jsonl --model SFT_DIR

Each prints a progress bar while it runs and a summary table at the end; ``--limit N`` stops
after N input records for a quick run. The exit code is 1 when the sidecar stage found any
invariant violation (the rows are written, flagged), else 0.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentenvs.agents.envworkers.pool import DEFAULT_ENV_TIMEOUT_S

__all__ = ["cuts_main", "sidecar_main", "validate_main"]


def _ratios(text: str) -> tuple[float, ...]:
    from agentenvs.replay.cuts import FIXED_RATIO_PRESETS

    if text in FIXED_RATIO_PRESETS:
        return FIXED_RATIO_PRESETS[text]
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a preset ({sorted(FIXED_RATIO_PRESETS)}) nor comma-separated "
            "numbers such as 0.1,0.3,0.5"
        ) from None


def _run_stage(parser: argparse.ArgumentParser, out: Path, stage: Callable[[], Any]) -> Any:
    """Run a stage and print its summary table; bad input (a ``ValueError`` or a missing file)
    is a usage error with the message, not a traceback. Returns the summary."""
    from agentenvs.agents.models import ModelNotFoundError

    try:
        summary = stage()
    except ModelNotFoundError as exc:  # one line, no usage text: the argument is well-formed
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    except (ValueError, FileNotFoundError) as exc:
        parser.error(str(exc))
    print(summary.table())
    print(f"wrote {out}")
    return summary


def _model(name: str | None) -> str | None:
    """``--model``: embedded, a local directory or a hub id
    (:func:`agentenvs.agents.models.resolve_model`; a bad one is a ``ValueError``, printed as a
    usage error)."""
    from agentenvs.agents.models import resolve_model

    return None if name is None else resolve_model(name)


def _model_options(parser: argparse.ArgumentParser, required: bool) -> None:
    parser.add_argument(
        "--model", required=required, help="SFT model directory, hub id, or embedded"
    )
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument(
        "--batch-tokens",
        type=int,
        default=16_384,
        help="rows x longest row of one forward pass (default 16384)",
    )


def _env_timeout(text: str) -> float | None:
    from agentenvs.agents.envworkers import parse_env_timeout

    try:
        return parse_env_timeout(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--out", type=Path, required=True, help="output JSONL file")
    parser.add_argument("--limit", type=int, help="stop after this many input records")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def cuts_main(argv: list[str]) -> int:
    """``agentenvs replay cuts``: teacher trajectories -> cut-state queries."""
    from agentenvs.replay.cuts import CutConfig, CutStrategy
    from agentenvs.replay.stages import run_cuts

    parser = argparse.ArgumentParser(
        prog="agentenvs replay cuts",
        description="Teacher trajectories -> cut-state queries (one raw query per trajectory "
        "plus each strategy's cuts).",
    )
    parser.add_argument("trajectories", nargs="+", type=Path, help="trajectory JSONL files")
    parser.add_argument(
        "--strategy",
        action="append",
        choices=[s.value for s in CutStrategy],
        help="cut strategy; repeat for several (default: entropy-change)",
    )
    parser.add_argument("--window", type=int, default=11, help="entropy-change window (11)")
    parser.add_argument("-k", "--k", type=int, default=3, help="cuts per trajectory (3)")
    parser.add_argument(
        "--ratios",
        type=_ratios,
        default="paper-a",
        help="fixed-ratio depths: paper-a (0.1,0.3,0.5), paper-b (0.25,0.5,0.7) "
        "or a list like 0.2,0.6",
    )
    parser.add_argument("--only-won", action="store_true", help="skip unsuccessful trajectories")
    parser.add_argument(
        "--skip-invalid",
        action="store_true",
        help="skip (and count) trajectory lines that fail validation instead of stopping",
    )
    _model_options(parser, required=False)
    _common(parser)
    args = parser.parse_args(argv)
    ratios = _ratios(args.ratios) if isinstance(args.ratios, str) else args.ratios

    def stage() -> Any:
        configs = [
            CutConfig(CutStrategy(s), window=args.window, k=args.k, ratios=ratios)
            for s in dict.fromkeys(args.strategy or [CutStrategy.ENTROPY_CHANGE.value])
        ]
        return run_cuts(
            args.trajectories,
            args.out,
            configs,
            model_path=_model(args.model),
            device=args.device,
            dtype=args.dtype,
            batch_tokens=args.batch_tokens,
            limit=args.limit,
            only_won=args.only_won,
            skip_invalid=args.skip_invalid,
            progress=not args.no_progress,
        )

    _run_stage(parser, args.out, stage)
    return 0


def validate_main(argv: list[str]) -> int:
    """``agentenvs replay validate``: cut-state queries -> replay-validated queries."""
    from agentenvs.replay.stages import run_validate

    parser = argparse.ArgumentParser(
        prog="agentenvs replay validate",
        description="Replay each query's prefix in its environment and give it a status "
        "(validated, mismatch, unverifiable, error).",
    )
    parser.add_argument("queries", type=Path, help="a replay.query JSONL file (from 'cuts')")
    parser.add_argument(
        "--no-snapshot-reuse",
        action="store_true",
        help="replay every cut from reset (slower; same statuses)",
    )
    parser.add_argument(
        "--env-workers",
        metavar="URLS",
        help="replay on agentenvs serve servers instead of in process: "
        "http://HOST:PORT[,http://HOST2:PORT] (same rows); for servers started with "
        "--auth-token, set AGENTENVS_AUTH_TOKEN to the token",
    )
    parser.add_argument(
        "--env-timeout",
        type=_env_timeout,
        default=DEFAULT_ENV_TIMEOUT_S,
        metavar="SECONDS",
        help=f"seconds each request to --env-workers servers may take before the server counts "
        f"as dead and its trajectories move to the next; 0: no limit "
        f"(default {DEFAULT_ENV_TIMEOUT_S:g})",
    )
    _common(parser)
    args = parser.parse_args(argv)
    from agentenvs.agents.envworkers.pool import EnvWorkerError

    try:
        _run_stage(
            parser,
            args.out,
            lambda: run_validate(
                args.queries,
                args.out,
                limit=args.limit,
                reuse_snapshots=not args.no_snapshot_reuse,
                progress=not args.no_progress,
                env_workers=args.env_workers,
                env_timeout=args.env_timeout,
            ),
        )
    except EnvWorkerError as exc:  # a dead or wrong server: one line with its fix
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    return 0


def sidecar_main(argv: list[str]) -> int:
    """``agentenvs replay sidecar``: validated queries -> canonical prompts with sidecars."""
    from agentenvs.replay.stages import STATUSES, run_sidecar

    parser = argparse.ArgumentParser(
        prog="agentenvs replay sidecar",
        description="Canonical prompts (system + prefix + replayed cut observation) with prefix "
        "span, mask and old log-probs under the SFT model.",
    )
    parser.add_argument("validated", type=Path, help="a replay.validated JSONL file")
    parser.add_argument(
        "--status",
        action="append",
        choices=list(STATUSES),
        help="statuses to keep; repeat for several (default: validated)",
    )
    _model_options(parser, required=True)
    _common(parser)
    args = parser.parse_args(argv)
    summary = _run_stage(
        parser,
        args.out,
        lambda: run_sidecar(
            args.validated,
            args.out,
            model_path=_model(args.model),
            device=args.device,
            dtype=args.dtype,
            batch_tokens=args.batch_tokens,
            statuses=args.status or ["validated"],
            limit=args.limit,
            progress=not args.no_progress,
        ),
    )
    return 1 if summary.violation_rows else 0
