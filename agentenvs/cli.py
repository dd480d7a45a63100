"""The ``agentenvs`` console script: a dispatcher, nothing more.

Each subcommand is a function ``f(argv) -> int`` in its own module; this file imports that
module only when the subcommand runs, so ``agentenvs list`` never imports torch and the layering
of docs/architecture.md holds (this is its one sanctioned exception: it may name modules of any
package).
Every subcommand runs through :func:`agentenvs.cli_errors.run_command`: a bad setting or a missing
extra is one line on stderr, never a traceback.
"""

from __future__ import annotations

import sys

from agentenvs.cli_errors import run_command

__all__ = ["COMMANDS", "main"]

# name -> ("module:function", one-line help); the function takes argv and returns an exit code.
# A two-word name ("replay cuts") is a subcommand of a group.
COMMANDS: dict[str, tuple[str, str]] = {
    "list": ("agentenvs.listing:list_main", "list environments: ids, splits and task counts"),
    "play": (
        "agentenvs.agents.play:play_main",
        "play an environment in the terminal, with the expert's hint",
    ),
    "replay cuts": ("agentenvs.replay.cli:cuts_main", "teacher trajectories -> cut-state queries"),
    "replay validate": ("agentenvs.replay.cli:validate_main", "replay-validate cut-state queries"),
    "replay sidecar": ("agentenvs.replay.cli:sidecar_main", "canonical prompts + prefix sidecars"),
    "eval": (
        "agentenvs.benchmarks.eval.cli:main",
        "Avg@k / Pass@k of an agent on a split (resumable; tables + plot)",
    ),
    "view": (
        "agentenvs.benchmarks.view.cli:view_main",
        "see eval, train rl and replay runs in a browser; compare two (served or --export)",
    ),
    "export": (
        "agentenvs.benchmarks.view.atif_export:export_main",
        "write a run's episodes as ATIF trajectories (one file per episode)",
    ),
    "train sft": (
        "agentenvs.train.sft_cli:sft_main",
        "supervised fine-tuning on trajectories (assistant turns)",
    ),
    "models fetch": (
        "agentenvs.agents.models:fetch_main",
        "get a model's weights into the local cache (the embedded model) for offline runs",
    ),
    "serve": (
        "agentenvs.serve.cli:serve_main",
        "serve an environment over HTTP (AgentGym's or OpenEnv's API)",
    ),
    "mcp": (
        "agentenvs.serve.mcp_cli:mcp_main",
        "serve an environment as MCP tools over stdio (for local MCP clients)",
    ),
    "train rl": (
        "agentenvs.train.rl.cli:rl_main",
        "RL: grpo, dapo, grpo-mis, gigpo, ptgpo, prefix-grpo",
    ),
}


def _usage() -> str:
    width = max(len(n) for n in COMMANDS)
    lines = ["usage: agentenvs <command> [options]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run 'agentenvs <command> --help' for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if argv[0] in ("-V", "--version"):
        from agentenvs import __version__

        print(f"agentenvs {__version__}")
        return 0
    # the longest registered name that prefixes argv ("replay cuts" before "replay")
    for n_words in (2, 1):
        name = " ".join(argv[:n_words])
        if name in COMMANDS:
            return run_command(f"agentenvs {name}", COMMANDS[name][0], argv[n_words:])
    print(f"agentenvs: unknown command {argv[0]!r}\n\n{_usage()}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
