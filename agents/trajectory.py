"""Trajectory records and their JSONL files.

One episode is one JSON line (docs/architecture.md, "Trajectories"): the schema version, which
environment, task, group and sample it was, which agent played it, the full message list, a record
per step, the outcome, and, for LLM policies, the token ids and log-probs of every generated turn.

Schema versions: 2 adds ``protocol`` (the benchmark protocol's name,
:mod:`agentenvs.agents.protocols`; None: none) and ``variant`` (the environment's outcome-changing
settings, ``env.variant``). Only version 2 is read: a line of another version is an error that
says which agentenvs wrote it.

Files are append-only JSONL; :func:`append_trajectory` writes and flushes one line at a time, so
an interrupted run loses nothing it finished. :func:`read_trajectories` validates every line and
names the file and line of a corrupt one (or skips it, counting, when asked); it also reads the
gzipped files the RL trainer writes.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "TRAJECTORY_SCHEMA_VERSION",
    "StepRecord",
    "Trajectory",
    "TrajectoryFormatError",
    "append_trajectory",
    "drop_truncated_tail",
    "read_trajectories",
    "write_trajectories",
]

TRAJECTORY_SCHEMA_VERSION = 2
# Who wrote the versions this one replaced (named in the error a line of that version gets).
_WRITTEN_BY = {1: "agentenvs 0.1.0 before benchmark protocols were recorded (commit cc338a5)"}


class TrajectoryFormatError(ValueError):
    """A trajectory line or record that does not follow the schema (the message says where)."""


@dataclass
class StepRecord:
    """One turn of an episode.

    ``anchor`` is the observation the action was chosen from (GiGPO/PTGPO group steps by it);
    ``observation`` what the environment answered (for an unparseable reply: the format-error
    feedback, with ``valid`` False and ``action`` None, the environment not stepped; for a
    reply a protocol projected to an action, verl-agent's way: the environment's answer to the
    projected ``action``, with ``valid`` False and ``info["format_error"]`` saying why).
    ``completion`` is the policy's raw reply; ``token_ids`` / ``logprobs`` its generated tokens
    and their log-probabilities under the rollout engine (None for scripted agents).
    """

    anchor: str
    action: str | None
    observation: str
    reward: float
    valid: bool
    fields: dict[str, Any] = field(default_factory=dict)
    completion: str | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepRecord:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        missing = [
            k for k in ("anchor", "action", "observation", "reward", "valid") if k not in data
        ]
        if missing:
            raise TrajectoryFormatError(f"step record lacks {missing}")
        return cls(**known)


@dataclass
class Trajectory:
    """One episode (see the module docstring for the fields' meaning).

    ``group_id`` names the group of k samples of one task (same value for all of them);
    ``sample_index`` is this sample's index in the group. ``error`` is set when the episode
    stopped on an environment or backend error (its steps up to then are kept). ``protocol``:
    the benchmark protocol the episode was played under (None: none); ``variant``: the
    environment's ``variant``.
    """

    env_id: str
    task_id: str
    family: str
    group_id: str
    sample_index: int
    agent: str
    messages: list[dict[str, str]] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    total_reward: float = 0.0
    won: bool = False
    turns: int = 0
    terminated: bool = False
    truncated: bool = False
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    protocol: str | None = None
    variant: dict[str, Any] | None = None
    schema_version: int = TRAJECTORY_SCHEMA_VERSION

    @property
    def episode_key(self) -> tuple[str, str, int]:
        """(task id, group id, sample index): what identifies an episode within a run."""
        return (self.task_id, self.group_id, self.sample_index)

    @property
    def actions(self) -> list[str]:
        """The actions sent to the environment, in order (unparseable turns left out)."""
        return [s.action for s in self.steps if s.action is not None]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        if not isinstance(data, dict):
            raise TrajectoryFormatError(f"a trajectory is a JSON object, got {type(data).__name__}")
        version = data.get("schema_version")
        if version != TRAJECTORY_SCHEMA_VERSION:
            writer = _WRITTEN_BY.get(version, "another agentenvs")  # type: ignore[arg-type]
            raise TrajectoryFormatError(
                f"schema_version {version!r} (written by {writer}); this agentenvs reads "
                f"schema_version {TRAJECTORY_SCHEMA_VERSION} only: play the episodes again"
            )
        required = ("env_id", "task_id", "family", "group_id", "sample_index", "agent")
        missing = [k for k in required if k not in data]
        if missing:
            raise TrajectoryFormatError(f"trajectory lacks {missing}")
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data and k != "steps"}
        steps = data.get("steps", [])
        if not isinstance(steps, list):
            raise TrajectoryFormatError("'steps' must be a list")
        traj = cls(**known, steps=[StepRecord.from_dict(s) for s in steps])
        if not isinstance(traj.messages, list) or not all(
            isinstance(m, dict) and "role" in m and "content" in m for m in traj.messages
        ):
            raise TrajectoryFormatError("'messages' must be a list of {role, content} objects")
        return traj

    @classmethod
    def from_json(cls, line: str) -> Trajectory:
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TrajectoryFormatError(f"not JSON: {exc}") from exc
        try:
            return cls.from_dict(data)
        except TypeError as exc:  # wrong field types reaching the dataclass
            raise TrajectoryFormatError(str(exc)) from exc


def append_trajectory(path: str | Path, trajectory: Trajectory) -> None:
    """Append one trajectory as one line, flushed and synced (an interrupted run keeps it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(trajectory.to_json() + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def write_trajectories(path: str | Path, trajectories: Iterable[Trajectory]) -> int:
    """Write trajectories to a new file (replacing it); returns how many."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    n = 0
    with tmp.open("w", encoding="utf-8") as fh:
        for traj in trajectories:
            fh.write(traj.to_json() + "\n")
            n += 1
    tmp.replace(path)
    return n


def read_trajectories(
    path: str | Path,
    *,
    skip_invalid: bool = False,
    errors: list[str] | None = None,
    allow_truncated_tail: bool = False,
) -> Iterator[Trajectory]:
    """Yield the trajectories of a JSONL file, validating each line.

    An invalid line raises :class:`TrajectoryFormatError` naming the file and line number, unless
    ``skip_invalid``: then it is skipped and its description appended to ``errors`` (if given).
    ``allow_truncated_tail``: a last line cut by an interrupted write (no final newline, not
    complete JSON) is skipped and reported in ``errors`` whatever ``skip_invalid`` says; any
    other invalid line (a complete one with a newer ``schema_version``, say) still raises.
    Blank lines are ignored. The file is only read; a name ending in ``.gz`` is read as gzip
    (the RL trainer's ``episodes/step-<n>.jsonl.gz``).
    """
    path = Path(path)
    with gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                yield Trajectory.from_json(_decode_line(raw))
            except TrajectoryFormatError as exc:
                message = f"{path}:{lineno}: {exc}"
                if allow_truncated_tail and _is_truncated_tail(raw):
                    if errors is not None:
                        errors.append(f"{message} (a truncated final line)")
                    continue
                if not skip_invalid:
                    raise TrajectoryFormatError(
                        message + " (use --skip-invalid on the command line, skip_invalid=True "
                        "in Python, to skip invalid lines)"
                    ) from exc
                if errors is not None:
                    errors.append(message)


def drop_truncated_tail(path: str | Path) -> str | None:
    """Make ``path`` end with a complete line before more lines are appended to it.

    A last line without its newline that is not complete JSON (a write cut by a kill) is cut
    off the file and described in the returned message; a complete last line lacking only its
    newline gets one (None is returned); every other line is left as it is, byte for byte.
    """
    path = Path(path)
    if not path.exists():
        return None
    with path.open("rb+") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size == 0:
            return None
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return None
        start = _last_line_start(fh, size)
        fh.seek(start)
        tail = fh.read()
        try:
            json.loads(_decode_line(tail))
        except (TrajectoryFormatError, json.JSONDecodeError) as exc:
            lineno = _count_lines(fh, start) + 1
            fh.truncate(start)
            fh.flush()
            os.fsync(fh.fileno())
            return f"{path}:{lineno}: dropped a truncated final line ({len(tail)} bytes: {exc})"
        fh.seek(size)
        fh.write(b"\n")
        return None


def _decode_line(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TrajectoryFormatError(f"not UTF-8: {exc}") from exc


def _is_truncated_tail(raw: bytes) -> bool:
    """Whether ``raw`` (a line as read) is a last line cut short: no newline (only the file's
    last line lacks one) and not complete JSON."""
    if raw.endswith(b"\n"):
        return False
    try:
        json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return True
    return False


def _last_line_start(fh: Any, size: int) -> int:
    block = 1 << 16
    pos = size
    while pos > 0:
        step = min(block, pos)
        pos -= step
        fh.seek(pos)
        chunk = fh.read(step)
        newline = chunk.rfind(b"\n")
        if newline >= 0 and pos + newline < size - 1:
            return pos + newline + 1
    return 0


def _count_lines(fh: Any, end: int) -> int:
    fh.seek(0)
    count, read = 0, 0
    while read < end:
        chunk = fh.read(min(1 << 20, end - read))
        count += chunk.count(b"\n")
        read += len(chunk)
    return count
