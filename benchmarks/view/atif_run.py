"""A folder of ATIF trajectories (or one ATIF file) as a run for ``agentenvs view``.

Every ``*.json`` file of the folder whose ``schema_version`` says ATIF is one episode, validated
by the ``atif`` package's models and read as a trajectory
(:func:`agentenvs.agents.atif.atif_to_trajectory`): ours (``agentenvs export --format atif``)
come back as the episodes they were; another harness's (tool calls, no environment fields) show
each agent step as a turn. The episode page is the same as an evaluation's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentenvs.agents.atif import AtifFormatError, atif_to_trajectory, is_atif, read_atif
from agentenvs.agents.trajectory import Trajectory
from agentenvs.benchmarks.view.records import trajectory_record, trajectory_summary
from agentenvs.benchmarks.view.runs import LineRef, Run, RunFormatError, finish_meta

__all__ = ["AtifRun", "atif_files", "load_atif"]


class AtifRun(Run):
    """A run whose episodes are whole ATIF files (each ref spans one file)."""

    def record(self, index: int) -> dict[str, Any]:
        if not 0 <= index < len(self.episodes):
            raise IndexError(f"run {self.name!r} has episodes 0..{len(self.episodes) - 1}")
        path = self.store.sources[self.refs[index].source]
        record = trajectory_record(_read(path)[1])
        summary = self.episodes[index]
        return {**record, "id": index, "part": summary["part"], "iteration": summary["iteration"]}


def _read(path: Path) -> tuple[dict[str, Any], Trajectory]:
    try:
        doc = read_atif(path)
        return doc, atif_to_trajectory(doc, name=path.stem)
    except AtifFormatError as exc:
        raise RunFormatError(str(exc)) from exc


def atif_files(path: Path) -> list[Path]:
    """The ATIF files at ``path`` (a file, or a folder's ``*.json`` files): those whose JSON
    says ATIF in its ``schema_version``."""
    candidates = [path] if path.is_file() else sorted(path.glob("*.json"))
    return [c for c in candidates if _says_atif(c)]


def _says_atif(path: Path) -> bool:
    try:
        return is_atif(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False


def load_atif(path: Path, name: str, files: list[Path]) -> Run:
    """The run of ATIF ``files`` (from :func:`atif_files`), one episode each, in name order."""
    run = AtifRun(name, path if path.is_dir() else path.parent, "eval", {})
    seen = run.meta.setdefault("seen", {}).setdefault("eval", {})
    models = set()
    for source, file in enumerate(files):
        doc, traj = _read(file)
        run.store.sources.append(file)
        summary = trajectory_summary(traj)
        run.add({**summary, "part": "eval", "iteration": None}, LineRef(source, 0, 0))
        for key, value in (
            ("env_id", traj.env_id),
            ("agent", traj.agent),
            ("protocol", traj.protocol),
            ("variant", json.dumps(traj.variant, sort_keys=True)),
        ):
            seen.setdefault(key, set()).add(value)
        models.add(doc["agent"].get("model_name"))
    model = sorted(m for m in models if m)[0] if any(models) else None
    finish_meta(run, {"model": model, "format": "ATIF"})
    run.meta["format"] = "ATIF"
    return run
