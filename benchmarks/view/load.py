"""Which kind of run a path is, and reading it (``agentenvs view RUN``).

Kinds, told apart by their files (:func:`load_run`):

* ``eval``: ``trajectories.jsonl`` (``agentenvs eval``, with its ``run.json``), here or in an
  ``eval/`` folder (where a learning-benchmark unit keeps its held-out evaluation), or a
  trajectory file itself;
* ``train``: ``metrics.jsonl`` beside ``protocol.json`` (``agentenvs train rl``; read by
  :mod:`agentenvs.benchmarks.view.training`);
* ``replay``: a replay stage file (``replay.query``, ``replay.validated`` or ``replay.sample``
  rows), or a folder holding one (the latest stage: ``samples.jsonl``, else
  ``validated.jsonl``, else ``queries.jsonl``).
* ATIF: ``.json`` ATIF trajectories, one episode each (a folder of them, or one file; read by
  :mod:`agentenvs.benchmarks.view.atif_run`), shown as an ``eval`` run.

Anything else is a :class:`~agentenvs.benchmarks.view.runs.RunFormatError` naming what was
expected.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from agentenvs.benchmarks.view.atif_run import atif_files, load_atif
from agentenvs.benchmarks.view.records import query_summary
from agentenvs.benchmarks.view.runs import (
    Run,
    RunFormatError,
    add_eval_episodes,
    finish_meta,
    learning_unit_settings,
)
from agentenvs.benchmarks.view.training import load_train

__all__ = ["EXPECTED", "KINDS", "REPLAY_STAGES", "default_name", "load_run"]

KINDS = ("eval", "train", "replay")
EXPECTED = (
    "an eval output folder (trajectories.jsonl, from 'agentenvs eval'), a train rl run "
    "(metrics.jsonl and protocol.json, from 'agentenvs train rl') or a replay output (a "
    "queries.jsonl, validated.jsonl or samples.jsonl stage file, from 'agentenvs replay') or ATIF "
    "trajectories (.json files, from 'agentenvs export --format atif' or another harness)"
)
REPLAY_STAGES = ("samples.jsonl", "validated.jsonl", "queries.jsonl")  # latest stage first


def load_run(path: str | Path, name: str | None = None) -> Run:
    """The run at ``path`` (a folder, or a trajectory or replay stage file); see the module
    docstring for how its kind is told."""
    path = Path(path)
    if not path.exists():
        raise RunFormatError(f"{path} does not exist; expected {EXPECTED}")
    name = name or default_name(path)
    if path.is_file() and path.suffix == ".json" and atif_files(path):
        return load_atif(path, name, [path])
    if path.is_file():
        if _first_row(path).get("schema", "").startswith("replay."):
            return _load_replay(path, name)
        return _load_eval(path, name)
    if (path / "trajectories.jsonl").is_file():
        return _load_eval(path / "trajectories.jsonl", name)
    if (path / "metrics.jsonl").is_file() and (path / "protocol.json").is_file():
        return load_train(path, name)
    if (path / "eval" / "trajectories.jsonl").is_file():
        return _load_eval(path / "eval" / "trajectories.jsonl", name)
    for stage in REPLAY_STAGES:
        if (path / stage).is_file():
            return _load_replay(path / stage, name)
    atif = atif_files(path)
    if atif:  # ATIF trajectories (ours exported, or another harness's)
        return load_atif(path, name, atif)
    present = sorted(p.name for p in path.iterdir())[:12]
    raise RunFormatError(
        f"{path} is not a run: expected {EXPECTED}; it holds {present or 'nothing'}"
    )


def default_name(path: Path) -> str:
    parts = path.resolve().parts
    if path.is_file():
        parts = parts[:-1] if path.name == "trajectories.jsonl" else (*parts[:-1], path.stem)
    if parts and parts[-1] == "eval":
        parts = parts[:-1]
    return "/".join(parts[-2:])


def _first_row(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise RunFormatError(f"{path}: the first line is not JSON ({exc})") from exc
                if not isinstance(row, dict):
                    raise RunFormatError(f"{path}: a line is a JSON object, got {row!r:.40}")
                return row
    raise RunFormatError(f"{path} is empty; expected {EXPECTED}")


def _load_eval(path: Path, name: str) -> Run:
    folder = path.parent
    recorded: dict[str, Any] = {}
    for meta_file in ("results.json", "run.json"):  # run.json wins: the settings themselves
        if (folder / meta_file).is_file():
            recorded |= {
                k: v
                for k, v in json.loads((folder / meta_file).read_text()).items()
                if k not in ("rows", "errors")
            }
    if folder.name == "eval":  # a learning-benchmark unit's evaluation
        recorded = learning_unit_settings(folder.parent) | recorded
    run = Run(name, folder, "eval", {})
    add_eval_episodes(run, path, recorded.get("task_ids"))
    finish_meta(run, recorded)
    if not run.episodes:
        raise RunFormatError(f"{path} holds no episodes yet; expected {EXPECTED}")
    return run


def _load_replay(path: Path, name: str) -> Run:
    from agentenvs.replay.io import SCHEMA_VERSIONS

    run = Run(name, path.parent, "replay", {"stage": None})
    for ref, raw, lineno in run.store.lines(path):
        where = f"{path}:{lineno}"
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise RunFormatError(f"{where}: not JSON ({exc})") from exc
        schema = row.get("schema")
        if SCHEMA_VERSIONS.get(schema) != row.get("schema_version"):
            raise RunFormatError(
                f"{where}: a replay row of schema {schema!r} version "
                f"{row.get('schema_version')!r}; this agentenvs reads {SCHEMA_VERSIONS}"
            )
        if run.meta["stage"] not in (None, schema):
            raise RunFormatError(f"{where}: a {schema} row in a {run.meta['stage']} file")
        run.meta["stage"] = schema
        try:
            summary = query_summary(row)
        except KeyError as exc:
            raise RunFormatError(f"{where}: a replay row lacks {exc}") from exc
        run.add({**summary, "part": "replay", "iteration": None}, ref)
        for key in ("env_id", "agent"):
            run.meta.setdefault(key, row.get(key))
    if not run.episodes:
        raise RunFormatError(f"{path} holds no queries")
    run.meta["file"] = path.name
    return run
