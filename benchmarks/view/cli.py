"""``agentenvs view``: see runs in a browser, served or exported as one offline HTML file.

    agentenvs view results/eval/TextCraft-v0/expert
    agentenvs view runs/sft/seed-0 runs/ptgpo/seed-0 --port 8080
    agentenvs view runs/sft/seed-0 runs/ptgpo/seed-0 --export compare.html

A RUN is an ``agentenvs eval`` output folder, an ``agentenvs train rl`` run, or a replay stage
file or its folder (:mod:`agentenvs.benchmarks.view.runs`). Served (``--host``, default
127.0.0.1; ``--port``, 0 for any free one), the page loads each episode when it is shown;
exported, everything is in the file (episodes gzipped) and it opens from disk with no network.
Two or more runs are compared pairwise, the later against the earlier.
"""

from __future__ import annotations

import argparse
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["build_parser", "view_main"]

DEFAULT_PORT = 8080


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentenvs view",
        description="See eval, train rl and replay runs in a browser: served, or exported as "
        "one self-contained HTML file.",
    )
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="run folders or files")
    parser.add_argument("--export", type=Path, metavar="FILE.html", help="write the page here")
    parser.add_argument("--host", default="127.0.0.1", help="address to serve on (127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port ({DEFAULT_PORT}; 0: any free one)"
    )
    return parser


def _names(paths: Sequence[Path]) -> list[str | None]:
    """Default names, made unique by a number where two runs would share one."""
    from agentenvs.benchmarks.view.load import default_name

    names = [default_name(p) if p.exists() else None for p in paths]
    out: list[str | None] = []
    for i, name in enumerate(names):
        out.append(f"{name} ({i + 1})" if name is not None and names.count(name) > 1 else name)
    return out


def serve(runs: Sequence, host: str, port: int) -> None:
    """Serve the page of ``runs`` until interrupted (prints the address it listens on)."""
    import uvicorn

    from agentenvs.benchmarks.view.server import create_app

    app = create_app(runs)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    shown = f"[{host}]" if ":" in host else host
    print(f"serving {len(runs)} run(s) at http://{shown}:{sock.getsockname()[1]}/", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    server.run(sockets=[sock])


def view_main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    from agentenvs.benchmarks.view.load import load_run
    from agentenvs.benchmarks.view.runs import RunFormatError

    try:
        runs = [load_run(p, n) for p, n in zip(args.runs, _names(args.runs), strict=True)]
    except RunFormatError as exc:
        print(f"agentenvs view: {exc}", file=sys.stderr)
        return 2
    for run in runs:
        print(f"{run.name}: {run.kind} run, {len(run.episodes)} episodes ({run.path})")
        for note in run.notes:
            print(f"  note: {note}")
    if args.export:
        from agentenvs.benchmarks.view.page import export_html

        path = export_html(runs, args.export)
        print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB); open it in a browser")
        return 0
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        print(
            f"agentenvs view: serving needs {exc.name}: pip install 'agentenvs[serve]' (or "
            "write a file with --export FILE.html, which needs nothing more)",
            file=sys.stderr,
        )
        return 1
    try:
        serve(runs, args.host, args.port)
    except OSError as exc:
        print(f"agentenvs view: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0
