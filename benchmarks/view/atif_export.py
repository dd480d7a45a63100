"""``agentenvs export RUN --format atif OUT/``: one ATIF trajectory file per episode.

``RUN`` is what ``agentenvs view`` opens (:func:`agentenvs.benchmarks.view.load.load_run`): an
``agentenvs eval`` folder or trajectory file, a learning-benchmark unit's evaluation, or a
``agentenvs train rl`` run (its evaluation and saved sampled episodes). Each episode becomes
``OUT/<n>-<task>-<group>-<sample>.json``, an ATIF v1.8 document
(:func:`agentenvs.agents.atif.trajectory_to_atif`) that the ``atif`` package's models validate;
the run's model (from its ``run.json`` or agent spec) names the agent's model.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from agentenvs.agents.atif import trajectory_to_atif
from agentenvs.agents.trajectory import Trajectory
from agentenvs.cli_errors import CommandError

__all__ = ["FORMATS", "export_atif", "export_main"]

FORMATS = ("atif",)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def export_atif(run_path: str | Path, out: str | Path) -> list[Path]:
    """Write each episode of the run at ``run_path`` as an ATIF file under ``out``; returns the
    files written, in the run's episode order."""
    from agentenvs.benchmarks.view.load import load_run
    from agentenvs.benchmarks.view.runs import RunFormatError

    try:
        run = load_run(run_path)
    except RunFormatError as exc:
        raise CommandError(str(exc)) from exc
    if run.kind == "replay":
        raise CommandError(
            f"{run_path} is a replay stage file: its rows are cut states, not episodes"
        )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    width = len(str(len(run.episodes)))
    written = []
    for index, ref in enumerate(run.refs):
        traj = Trajectory.from_json(run.store.read(ref).decode("utf-8"))
        doc = trajectory_to_atif(traj, model=run.meta.get("model"), session_id=run.name)
        stem = f"{index:0{width}d}-{traj.task_id}-{traj.group_id}-{traj.sample_index}"
        path = out / f"{_UNSAFE.sub('_', stem)}.json"
        path.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        written.append(path)
    return written


def export_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="agentenvs export",
        description="Write a run's episodes in another format: one ATIF v1.8 trajectory "
        "(Harbor's Agent Trajectory Interchange Format) per episode.",
    )
    parser.add_argument("run", help="an eval folder or trajectory file, or a train rl run")
    parser.add_argument("out", help="the folder to write into (created if missing)")
    parser.add_argument("--format", choices=FORMATS, default="atif", help="default: atif")
    args = parser.parse_args(argv)
    written = export_atif(args.run, args.out)
    print(f"wrote {len(written)} ATIF trajectories to {args.out}")
    return 0
