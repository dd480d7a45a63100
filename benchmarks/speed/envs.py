"""Environment speed benchmark: reset, step and snapshot/restore times, as one table.

    python -m agentenvs.benchmarks.speed.envs                 # every environment
    python -m agentenvs.benchmarks.speed.envs TextCraft-v0    # one
    python -m agentenvs.benchmarks.speed.envs --quick --out results/env_speed.md

Each environment's module in ``benchmarks/speed/`` has ``bench(quick: bool) -> list[SpeedRow]``;
its rows compare against a baseline measured in the same run (raw engine calls, replay from
reset) and name the bound each row is held to.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from agentenvs.benchmarks.speed.timing import SpeedRow, format_table, report

__all__ = ["BENCHES", "run", "main"]

# env id -> "module:function" returning list[SpeedRow]
BENCHES: dict[str, str] = {
    "TextCraft-v0": "agentenvs.benchmarks.speed.textcraft:bench",
    "Sokoban-v0": "agentenvs.benchmarks.speed.sokoban:bench",
    "ALFWorld-v0": "agentenvs.benchmarks.speed.alfworld:bench",
    "WebShop-v0": "agentenvs.benchmarks.speed.webshop:bench",
    "BabyAI-Text-v0": "agentenvs.benchmarks.speed.babyai:bench",
}


def run(env_ids: list[str], quick: bool = False) -> list[SpeedRow]:
    rows: list[SpeedRow] = []
    for env_id in env_ids:
        module, _, fn = BENCHES[env_id].partition(":")
        try:
            bench = getattr(importlib.import_module(module), fn)
        except ImportError as exc:  # an optional extra that is not installed
            print(f"skipping {env_id}: {exc}", file=sys.stderr)
            continue
        rows.extend(bench(quick=quick))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env_ids", nargs="*", help=f"default: all of {sorted(BENCHES)}")
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    args = parser.parse_args(argv)
    unknown = [e for e in args.env_ids if e not in BENCHES]
    if unknown:
        parser.error(f"no speed benchmark for {unknown}; choose from {sorted(BENCHES)}")
    table = format_table(run(args.env_ids or list(BENCHES), quick=args.quick))
    report(table, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
