"""Resuming ``agentenvs eval`` (:mod:`agentenvs.benchmarks.evaluate`): the run file, the finished
episodes on disk, and what an interrupted run prints.

``OUT/run.json`` records the settings; a rerun into the same ``OUT`` with other values of
:data:`RESUME_KEYS` is refused (:class:`EvalSettingsError`). ``OUT/trajectories.jsonl`` holds
the finished episodes: only a final line cut short by a kill is dropped (reported, and cut off
the file); any other invalid line stops the run with its file and line, the file untouched,
unless ``skip_invalid``.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

__all__ = [
    "RESUME_KEYS",
    "TRAJECTORIES",
    "EvalSettingsError",
    "check_run_file",
    "load_finished",
    "record_backend",
    "resume_command",
    "stopped_message",
]

TRAJECTORIES = "trajectories.jsonl"
RESUME_KEYS = (
    "env_id",
    "agent",
    "split",
    "protocol",
    "n",
    "history",
    "max_turns",
    "temperature",
    "top_p",
    "max_new_tokens",
    "seed",
    "seeding",
)
# what a run file written before a key existed meant by it
_RECORDED_BEFORE = {"seeding": "call"}


class EvalSettingsError(ValueError):
    """Resuming a run with settings that differ from the recorded ones."""


def check_run_file(
    out: Path, settings: Any, fresh: bool, meta: dict[str, Any] | None = None
) -> None:
    """Write ``out/run.json`` for ``settings`` (an :class:`agentenvs.benchmarks.evaluate.EvalSettings`),
    first refusing a recorded run with other :data:`RESUME_KEYS` (``fresh``: discard it)."""
    run_file = out / "run.json"
    record = {k: v for k, v in asdict(settings).items() if k != "agent_options"}
    record.update(meta or {})
    if fresh:
        for name in (TRAJECTORIES, "run.json"):
            (out / name).unlink(missing_ok=True)
    elif run_file.exists():
        previous = json.loads(run_file.read_text())
        recorded = {k: previous.get(k, _RECORDED_BEFORE.get(k)) for k in RESUME_KEYS}
        differing = {
            k: (recorded[k], record.get(k)) for k in RESUME_KEYS if recorded[k] != record.get(k)
        }
        if differing:
            raise EvalSettingsError(
                f"{out} holds a run with other settings {differing} (recorded, now); use the same "
                "settings to resume it, another --out, or --fresh to start over"
            )
    out.mkdir(parents=True, exist_ok=True)
    run_file.write_text(json.dumps(record, indent=2) + "\n")


def record_backend(out: Path, backend: dict[str, Any]) -> None:
    """Add what the backend reported (dtype, log-probs returned or not, ...) to ``run.json``."""
    run_file = out / "run.json"
    if backend and run_file.exists():
        record = json.loads(run_file.read_text())
        record["backend"] = backend
        run_file.write_text(json.dumps(record, indent=2) + "\n")


def load_finished(
    path: Path, tasks: set[str], skip_invalid: bool = False
) -> tuple[dict[tuple, Any], list[str]]:
    """The finished episodes already in ``path`` (of the planned tasks), first copy of each.

    Only a final line cut short by a kill is dropped (reported, and cut off the file so that new
    lines follow a complete one); any other invalid line stops the run with its file and line,
    the file untouched, unless ``skip_invalid`` (then it is reported and stays in the file)."""
    from agentenvs.agents.trajectory import drop_truncated_tail, read_trajectories

    if not path.exists():
        return {}, []
    errors: list[str] = []
    kept = list(
        read_trajectories(path, skip_invalid=skip_invalid, errors=errors, allow_truncated_tail=True)
    )
    dropped = drop_truncated_tail(path)  # the file is valid up to its tail: safe to append
    for message in errors:
        if not message.endswith("(a truncated final line)"):
            print(f"skipped an invalid line (left in the file): {message}", file=sys.stderr)
    if dropped:
        print(dropped, file=sys.stderr)
    done: dict[tuple, Any] = {}
    for traj in kept:
        if traj.task_id in tasks:
            done.setdefault(traj.episode_key, traj)
    return done, errors


def resume_command(argv: Sequence[str], out: Path) -> str:
    """The command line that resumes the run of ``argv`` (``--fresh`` dropped, ``--out`` set)."""
    args = [a for a in argv if a != "--fresh"]
    if not any(a == "--out" or a.startswith("--out=") for a in args):
        args += ["--out", str(out)]
    return shlex.join(["agentenvs", "eval", *args])


def stopped_message(argv: Sequence[str], out: Path) -> str:
    """How many episodes are on disk in ``out`` and the command that resumes the run."""
    from agentenvs.agents.trajectory import read_trajectories

    path = Path(out) / TRAJECTORIES
    count = 0
    if path.exists():
        count = sum(
            1 for _ in read_trajectories(path, skip_invalid=True, allow_truncated_tail=True)
        )
    return (
        f"{count} finished episodes are on disk in {path}; resume with:\n  "
        f"{resume_command(argv, Path(out))}"
    )
