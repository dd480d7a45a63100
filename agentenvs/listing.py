"""``agentenvs list``: every registered environment with its splits and task counts, or, for an
environment whose dependencies do not import on this install, ``not installed`` and the extra
that installs them (its :class:`~agentenvs.registration.MissingDependencyError`), and every
environment plugin that does not load, with its distribution and the fault
(:class:`~agentenvs.plugins.PluginError`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from agentenvs.plugins import PluginError, broken_plugins
from agentenvs.registration import ENVIRONMENTS, MissingDependencyError, build_env

__all__ = ["describe_environments", "list_main"]


def describe_environments(env_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """One record per environment id (default: every plugin's, the broken ones last): splits
    with task counts, or why it is unavailable."""
    broken = broken_plugins()
    rows = []
    for env_id in env_ids or [*ENVIRONMENTS, *broken]:
        row: dict[str, Any] = {"env_id": env_id, "splits": {}, "error": None}
        if env_id in broken:
            row["error"] = f"broken plugin: {broken[env_id]}"
            rows.append(row)
            continue
        try:
            env = build_env(env_id)
        except MissingDependencyError as exc:
            row["error"] = f"not installed: {exc}"
            rows.append(row)
            continue
        except PluginError as exc:
            row["error"] = f"broken plugin: {exc}"
            rows.append(row)
            continue
        row["max_turns"] = env.max_turns
        for split in env.splits:
            try:
                row["splits"][split] = len(env.task_ids(split))
            except Exception as exc:  # e.g. a training split whose data is not downloaded
                row["splits"][split] = f"unavailable: {exc}"
        env.close()
        rows.append(row)
    return rows


def list_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="agentenvs list", description=__doc__)
    parser.add_argument("env_ids", nargs="*", help=f"default: all of {list(ENVIRONMENTS)}")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    unknown = [e for e in args.env_ids if e not in ENVIRONMENTS and e not in broken_plugins()]
    if unknown:
        parser.error(f"unknown environment ids {unknown}; choose from {list(ENVIRONMENTS)}")
    rows = describe_environments(args.env_ids or None)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        if row["error"]:
            print(f"{row['env_id']:<18} {row['error']}")
            continue
        splits = ", ".join(
            f"{name}: {n}" if isinstance(n, int) else f"{name}: {n.splitlines()[0][:80]}"
            for name, n in row["splits"].items()
        )
        print(f"{row['env_id']:<18} max_turns {row['max_turns']:<3} {splits}")
    return 0


if __name__ == "__main__":
    sys.exit(list_main(sys.argv[1:]))
