"""Resuming ``agentenvs eval`` (:mod:`agentenvs.benchmarks.eval`): the run file, the finished
episodes on disk, and what an interrupted run prints.

``OUT/run.json`` records the settings; a rerun into the same ``OUT`` with other values of
:data:`RESUME_KEYS` is refused (:class:`EvalSettingsError`). ``OUT/trajectories.jsonl`` holds
the finished episodes: only a final line cut short by a kill is dropped (reported, and cut off
the file); any other invalid line stops the run with its file and line, the file untouched,
unless ``skip_invalid``. An episode that ended in an error is not finished: it stays in the file
(its record) and a resumed run plays it again; the new copy is appended after it.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "RESUME_KEYS",
    "SEEDING",
    "TRAJECTORIES",
    "EvalSettingsError",
    "OnDisk",
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
# what a run file without a key means by it: a run file without "seeding" was drawn with one
# seed per generation call ("call"), which cannot resume under per-episode seeding
_RECORDED_BEFORE = {"seeding": "call"}
SEEDING = "episode"  # each reply drawn with a seed of its episode and turn (recorded in run.json)


class EvalSettingsError(ValueError):
    """Resuming a run with settings that differ from the recorded ones."""


def check_run_file(
    out: Path, settings: Any, fresh: bool, meta: dict[str, Any] | None = None
) -> None:
    """Write ``out/run.json`` for ``settings`` (an
    :class:`~agentenvs.benchmarks.eval.settings.EvalSettings`), first refusing a recorded run with
    other :data:`RESUME_KEYS` (``fresh``: discard it)."""
    run_file = out / "run.json"
    record = {k: v for k, v in asdict(settings).items() if k != "agent_options"}
    record.update(seeding=SEEDING, **(meta or {}))
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


@dataclass
class OnDisk:
    """The episodes of a run's trajectory file, by episode key: ``done`` (played to the end, the
    first copy of each) and ``errored`` (keys with no played copy: the latest errored one), and
    ``invalid``, the descriptions of the lines that were dropped or skipped."""

    done: dict[tuple, Any]
    errored: dict[tuple, Any]
    invalid: list[str]


def load_finished(path: Path, tasks: set[str], skip_invalid: bool = False) -> OnDisk:
    """The episodes already in ``path`` (of the planned tasks): finished ones and errored ones
    (to be played again).

    Only a final line cut short by a kill is dropped (reported, and cut off the file so that new
    lines follow a complete one); any other invalid line stops the run with its file and line,
    the file untouched, unless ``skip_invalid`` (then it is reported and stays in the file)."""
    from agentenvs.agents.trajectory import drop_truncated_tail, read_trajectories

    if not path.exists():
        return OnDisk({}, {}, [])
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
    errored: dict[tuple, Any] = {}
    for traj in kept:
        if traj.task_id not in tasks:
            continue
        if traj.error is None:
            done.setdefault(traj.episode_key, traj)
        else:
            errored[traj.episode_key] = traj
    return OnDisk(done, {k: t for k, t in errored.items() if k not in done}, errors)


def resume_command(argv: Sequence[str], out: Path) -> str:
    """The command line that resumes the run of ``argv`` (``--fresh`` dropped, ``--out`` set)."""
    args = [a for a in argv if a != "--fresh"]
    if not any(a == "--out" or a.startswith("--out=") for a in args):
        args += ["--out", str(out)]
    return shlex.join(["agentenvs", "eval", *args])


def stopped_message(argv: Sequence[str], out: Path) -> str:
    """How many finished episodes are on disk in ``out`` and the command that resumes the run
    (errored episodes are not counted: the resumed run plays them again)."""
    from agentenvs.agents.trajectory import read_trajectories

    path = Path(out) / TRAJECTORIES
    count = 0
    if path.exists():
        keys = {
            t.episode_key
            for t in read_trajectories(path, skip_invalid=True, allow_truncated_tail=True)
            if t.error is None
        }
        count = len(keys)
    return (
        f"{count} finished episodes are on disk in {path}; resume with:\n  "
        f"{resume_command(argv, Path(out))}"
    )
