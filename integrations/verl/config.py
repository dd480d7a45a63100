"""Where verl finds our agent loop: the agent-loop config file that ships inside the package.

``python -m agentenvs.integrations.verl.config`` prints the installed file's absolute path (give it
to ``actor_rollout_ref.rollout.agent.agent_loop_config_path=``); ``--write DIR`` copies it to
``DIR/agentenvs_agent_loop.yaml`` (e.g. a shared filesystem every Ray node reads) and prints that
path instead. Importing this module imports no verl module.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["AGENT_LOOP_CONFIG", "agent_loop_config_path", "main", "write_agent_loop_config"]

AGENT_LOOP_CONFIG = "agentenvs_agent_loop.yaml"


def agent_loop_config_path() -> Path:
    """The absolute path of the shipped agent-loop config file."""
    return Path(__file__).resolve().with_name(AGENT_LOOP_CONFIG)


def write_agent_loop_config(out_dir: str | Path) -> Path:
    """Copy the agent-loop config file into ``out_dir`` (created if missing); returns the copy's
    absolute path."""
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copyfile(agent_loop_config_path(), out / AGENT_LOOP_CONFIG))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agentenvs.integrations.verl.config",
        description="Print the path of agentenvs' verl agent-loop config file "
        "(actor_rollout_ref.rollout.agent.agent_loop_config_path), or copy it with --write.",
    )
    parser.add_argument(
        "--write",
        metavar="DIR",
        default=None,
        help=f"copy the file to DIR/{AGENT_LOOP_CONFIG} and print that path",
    )
    args = parser.parse_args(argv)
    try:
        if args.write is None:
            path = agent_loop_config_path()
        else:
            path = write_agent_loop_config(args.write)
    except OSError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
