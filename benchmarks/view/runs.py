"""A run as ``agentenvs view`` holds it: what it records about itself, a summary per episode,
and where each episode's line is, read again when the page asks for it.

A run keeps a summary and the byte span of every episode's line, not the episodes:
:meth:`Run.record` reads one when it is shown (a gzipped iteration file is read whole, the last
few kept in memory). :mod:`agentenvs.benchmarks.view.load` tells a path's kind and fills a run.

Evaluation episodes are counted as ``agentenvs eval`` counts them (:func:`add_eval_episodes`):
one per episode key (task, group, sample), the first copy that finished, else the latest one
that errored. A last line cut short by an interrupted write is left out and noted; any other
invalid line is an error naming its file and line.
"""

from __future__ import annotations

import gzip
import json
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentenvs.agents.trajectory import Trajectory, TrajectoryFormatError
from agentenvs.benchmarks.view.records import query_record, trajectory_record, trajectory_summary

__all__ = [
    "LineRef",
    "LineStore",
    "Run",
    "RunFormatError",
    "add_eval_episodes",
    "finish_meta",
    "learning_unit_settings",
    "scan_trajectories",
]

GZIP_FILES_KEPT = 4  # decompressed iteration files held in memory for episode reads


class RunFormatError(ValueError):
    """A path that is not a run, or a run file that does not read (the message says which)."""


@dataclass(frozen=True)
class LineRef:
    """Where one episode's line is: a source file of the store and its byte span."""

    source: int
    start: int
    end: int


class LineStore:
    """Line spans in files (plain or gzipped), read back one line at a time."""

    def __init__(self) -> None:
        self.sources: list[Path] = []
        self._unzipped: OrderedDict[int, bytes] = OrderedDict()

    def lines(self, path: Path) -> Iterator[tuple[LineRef, bytes, int]]:
        """Add ``path`` as a source; yield each non-blank line's span, bytes and number."""
        source = len(self.sources)
        self.sources.append(path)
        if path.suffix == ".gz":
            data = self._data(source)
            start = 0
            for lineno, raw in enumerate(data.splitlines(keepends=True), start=1):
                if raw.strip():
                    yield LineRef(source, start, start + len(raw)), raw, lineno
                start += len(raw)
            return
        with path.open("rb") as fh:
            start = 0
            for lineno, raw in enumerate(fh, start=1):
                if raw.strip():
                    yield LineRef(source, start, start + len(raw)), raw, lineno
                start += len(raw)

    def read(self, ref: LineRef) -> bytes:
        path = self.sources[ref.source]
        if path.suffix == ".gz":
            return self._data(ref.source)[ref.start : ref.end]
        with path.open("rb") as fh:
            fh.seek(ref.start)
            return fh.read(ref.end - ref.start)

    def _data(self, source: int) -> bytes:
        if source in self._unzipped:
            self._unzipped.move_to_end(source)
            return self._unzipped[source]
        data = gzip.decompress(self.sources[source].read_bytes())
        self._unzipped[source] = data
        while len(self._unzipped) > GZIP_FILES_KEPT:
            self._unzipped.popitem(last=False)
        return data


@dataclass
class Run:
    """One run: its kind, what it records about itself (``meta``), a summary per episode
    (``episodes``; ``part`` says ``eval``, ``train`` or ``replay``, ``iteration`` the training
    step of a sampled one), where each episode's line is, and for a training run its metrics
    and evaluation points (``training``)."""

    name: str
    path: Path
    kind: str
    meta: dict[str, Any]
    episodes: list[dict[str, Any]] = field(default_factory=list)
    refs: list[LineRef] = field(default_factory=list)
    store: LineStore = field(default_factory=LineStore)
    training: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def add(self, summary: dict[str, Any], ref: LineRef) -> int:
        self.episodes.append(summary)
        self.refs.append(ref)
        return len(self.episodes) - 1

    def record(self, index: int) -> dict[str, Any]:
        """The full record of episode ``index`` (:mod:`agentenvs.benchmarks.view.records`)."""
        if not 0 <= index < len(self.episodes):
            raise IndexError(f"run {self.name!r} has episodes 0..{len(self.episodes) - 1}")
        data = json.loads(self.store.read(self.refs[index]))
        if self.kind == "replay":
            record = query_record(data)
        else:
            record = trajectory_record(Trajectory.from_dict(data))
        summary = self.episodes[index]
        return {**record, "id": index, "part": summary["part"], "iteration": summary["iteration"]}


def scan_trajectories(
    run: Run, path: Path, part: str, iteration: int | None = None
) -> list[tuple[dict[str, Any], LineRef]]:
    """The summaries and spans of a trajectory file's episodes, tagged with ``part`` and
    ``iteration``; notes the environments, agents, protocols and variants of each part's
    episodes (for :func:`finish_meta`)."""
    seen = run.meta.setdefault("seen", {}).setdefault(part, {})
    out = []
    for ref, raw, lineno in run.store.lines(path):
        try:
            traj = Trajectory.from_json(raw.decode("utf-8"))
        except (TrajectoryFormatError, UnicodeDecodeError) as exc:
            if not raw.endswith(b"\n") and _cut_short(raw):
                run.notes.append(f"{path}:{lineno}: left out a last line cut short by a kill")
                continue
            raise RunFormatError(f"{path}:{lineno}: {exc}") from exc
        for key, value in (
            ("env_id", traj.env_id),
            ("agent", traj.agent),
            ("protocol", traj.protocol),
            ("variant", json.dumps(traj.variant, sort_keys=True)),
        ):
            seen.setdefault(key, set()).add(value)
        summary = trajectory_summary(traj)
        out.append(({**summary, "part": part, "iteration": iteration}, ref))
    return out


def _cut_short(raw: bytes) -> bool:
    try:
        json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return True
    return False


def add_eval_episodes(run: Run, path: Path, task_order: list[str] | None = None) -> None:
    """The evaluation episodes of ``path`` into ``run``, one per episode key (see the module
    docstring), ordered by task (``task_order`` first, then as first seen), group, sample."""
    done: dict[tuple, tuple] = {}
    errored: dict[tuple, tuple] = {}
    for summary, ref in scan_trajectories(run, path, "eval"):
        key = (summary["task_id"], summary["group_id"], summary["sample"])
        if summary["error"] is None:
            done.setdefault(key, (summary, ref))
        else:
            errored[key] = (summary, ref)
    kept = [*done.values(), *(v for k, v in errored.items() if k not in done)]
    rank = {t: i for i, t in enumerate(task_order or [])}
    for summary, _ in kept:
        rank.setdefault(summary["task_id"], len(rank))
    kept.sort(key=lambda e: (rank[e[0]["task_id"]], e[0]["group_id"], e[0]["sample"]))
    for summary, ref in kept:
        run.add(summary, ref)


def finish_meta(run: Run, recorded: dict[str, Any]) -> None:
    """``run.meta`` from what its episodes say (the evaluation episodes', else the sampled
    ones': environment, agent, protocol, variant) and what its files record (``recorded``:
    ``run.json`` and the like), which fills in the rest."""
    seen = run.meta.pop("seen", {})
    episodes = seen.get("eval") or seen.get("train") or {}

    def one(key: str) -> Any:
        values = episodes.get(key, set())
        if len(values) > 1:
            run.notes.append(f"episodes of more than one {key}: {sorted(map(str, values))}")
        return sorted(values, key=str)[0] if values else None

    variant = one("variant")
    meta = {
        "env_id": one("env_id") or recorded.get("env_id"),
        "agent": one("agent") or recorded.get("agent"),
        "protocol": one("protocol") or recorded.get("protocol"),
        "variant": json.loads(variant) if variant else recorded.get("variant"),
    }
    meta["model"] = recorded.get("model") or _model_of(meta["agent"])
    for key in ("split", "k", "n", "overrides", "protocol_settings", "backend", "algo"):
        if recorded.get(key) is not None:
            meta[key] = recorded[key]
    if "train" in seen:  # a training run: the protocol it trained under
        trained = seen["train"].get("protocol") or {recorded.get("protocol")}
        meta["training_protocol"] = sorted(trained, key=str)[0]
    run.meta.update(meta)


def _model_of(agent: str | None) -> str | None:
    """The model of an LLM agent spec (``hf:<model>``, ``openai:<model>@<url>``, ...)."""
    if not agent or ":" not in agent:
        return None
    kind, _, rest = agent.partition(":")
    if kind in ("hf", "vllm", "openai"):
        return rest.split("@")[0]
    return None


def learning_unit_settings(unit: Path) -> dict[str, Any]:
    """What a learning-benchmark unit (``OUT/<arm>/seed-<s>``) records of its evaluation: the
    benchmark's k and samples per task (``OUT/settings.json``); empty for any other folder."""
    path = unit.parent.parent / "settings.json"
    if not unit.name.startswith("seed-") or not path.is_file():
        return {}
    settings = json.loads(path.read_text())
    return {"k": settings.get("eval_k"), "n": settings.get("eval_n")}
