"""``agentenvs mcp ENV_ID``: one environment as MCP tools over stdio, for local MCP clients.

The client starts this command and speaks MCP on its stdin/stdout (one MCP session, one
environment session, closed when the client closes the pipe). The tools are those of
``agentenvs serve ENV_ID --api mcp`` (reset, step, admissible_actions, list_tasks, snapshot,
restore); see docs/serving.md. Logs go to stderr. A desktop client's configuration, e.g.::

    {"mcpServers": {"textcraft": {"command": "agentenvs", "args": ["mcp", "TextCraft-v0"]}}}
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from agentenvs.registration import ENVIRONMENTS

__all__ = ["mcp_main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="agentenvs mcp",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "env_id",
        choices=sorted(ENVIRONMENTS),
        metavar="ENV_ID",
        help=f"one of {sorted(ENVIRONMENTS)}",
    )
    p.add_argument(
        "--env-kwargs",
        type=json.loads,
        default=None,
        metavar="JSON",
        help='environment keywords, e.g. \'{"rules": "fixed"}\'',
    )
    p.add_argument(
        "--snapshot-key",
        default=None,
        help="HMAC key of snapshot tokens (default $AGENTENVS_SERVE_KEY, else random)",
    )
    p.add_argument("--log-level", default="warning", help="log level on stderr (default warning)")
    return p


def mcp_main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    from agentenvs.cli_errors import require_extra

    require_extra("mcp")  # one line naming the extra when it is missing
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper())
    import anyio

    from agentenvs.serve.mcp import make_service, run_stdio

    # the process is the one session: no other client waits for its slot, so no idle timeout
    service = make_service(
        args.env_id,
        env_kwargs=args.env_kwargs,
        max_sessions=1,
        idle_timeout=None,
        snapshot_key=args.snapshot_key,
    )
    anyio.run(run_stdio, service)
    return 0


if __name__ == "__main__":
    sys.exit(mcp_main(sys.argv[1:]))
