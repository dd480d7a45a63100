"""``agentenvs serve ENV_ID --api agentgym|openenv``: run the server (uvicorn).

``--workers N`` runs N independent server processes on ports ``port`` .. ``port+N-1``. Sessions
live in the process that created them, so a client must stay with one worker for a session: give
a client the list of URLs (AgentGym clients: ``env_server_bases``; ours: ``--env-workers``), and
it spreads episodes over them, sticky per episode, exactly as over several servers. (uvicorn's
own ``--workers`` shares one port through the kernel, which sends consecutive requests of one
session to different processes, so it cannot serve sticky sessions.) Session ids of worker ``i``
start with ``w<i>-``; a request that reaches the wrong worker gets a 404 that says so. The workers
share one snapshot key, so a snapshot token restores fast on any of them.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import secrets
import signal
import sys
import time
from typing import Any

from agentenvs.registration import ENVIRONMENTS

__all__ = ["serve_main", "worker_urls"]


def worker_urls(host: str, port: int, workers: int) -> list[str]:
    """The base URL of each worker of ``agentenvs serve --port port --workers workers``."""
    return [f"http://{host}:{port + i}" for i in range(workers)]


def _parser() -> argparse.ArgumentParser:
    from agentenvs.serve.settings import APIS, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_SESSIONS

    p = argparse.ArgumentParser(
        prog="agentenvs serve",
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
        "--api",
        choices=APIS,
        default="agentgym",
        help="agentgym: AgentGym's routes; openenv: OpenEnv's (default agentgym)",
    )
    p.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1 (this machine only)")
    p.add_argument("--port", type=int, default=8000, help="first worker's port (default 8000)")
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes, on ports PORT..PORT+N-1 (default 1)",
    )
    p.add_argument(
        "--max-sessions",
        type=int,
        default=DEFAULT_MAX_SESSIONS,
        help=f"open sessions per worker; more get 429 (default {DEFAULT_MAX_SESSIONS})",
    )
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=DEFAULT_IDLE_TIMEOUT,
        help="close a session after this many seconds without a request; 0: never "
        f"(default {DEFAULT_IDLE_TIMEOUT:g})",
    )
    p.add_argument(
        "--env-kwargs",
        type=json.loads,
        default=None,
        metavar="JSON",
        help='environment keywords for every session, e.g. \'{"rules": "fixed"}\'',
    )
    p.add_argument(
        "--snapshot-key",
        default=None,
        help="HMAC key of snapshot tokens (default $AGENTENVS_SERVE_KEY, else random)",
    )
    p.add_argument("--log-level", default="warning", help="uvicorn's log level (default warning)")
    return p


def _app_kwargs(args: argparse.Namespace, key: str | None, worker: int) -> dict[str, Any]:
    return {
        "env_kwargs": args.env_kwargs,
        "max_sessions": args.max_sessions,
        "idle_timeout": args.idle_timeout or None,
        "snapshot_key": key,
        "worker": worker,
        "workers": args.workers,
    }


def _run_worker(
    env_id: str, api: str, host: str, port: int, log_level: str, kwargs: dict[str, Any]
) -> None:
    import uvicorn

    from agentenvs.serve import build_app

    app = build_app(env_id, api, **kwargs)
    uvicorn.run(
        app, host=host, port=port, log_level=log_level, access_log=False, timeout_keep_alive=75
    )


def serve_main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.workers < 1:
        print("agentenvs serve: --workers must be at least 1", file=sys.stderr)
        return 2
    from agentenvs.serve import require_serve_deps

    require_serve_deps(*(("openenv",) if args.api == "openenv" else ()))  # one line if missing
    urls = worker_urls(args.host, args.port, args.workers)
    print(f"agentenvs serve {args.env_id} --api {args.api}: {' '.join(urls)}", flush=True)
    if args.workers == 1:
        _run_worker(
            args.env_id,
            args.api,
            args.host,
            args.port,
            args.log_level,
            _app_kwargs(args, args.snapshot_key, 0),
        )
        return 0
    # one key for all workers, so a token made by one restores (fast) on the others
    import os

    key = args.snapshot_key or os.environ.get("AGENTENVS_SERVE_KEY") or secrets.token_hex(32)
    context = multiprocessing.get_context("spawn")
    procs = [
        context.Process(
            target=_run_worker,
            args=(
                args.env_id,
                args.api,
                args.host,
                args.port + i,
                args.log_level,
                _app_kwargs(args, key, i),
            ),
            name=f"agentenvs-serve-{i}",
        )
        for i in range(args.workers)
    ]
    for proc in procs:
        proc.start()

    def stop(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    code = 0
    try:
        while all(p.is_alive() for p in procs):
            time.sleep(0.2)
        dead = [p.name for p in procs if not p.is_alive()]
        print(f"agentenvs serve: worker {dead} exited; stopping the others", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        pass
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
    return code


if __name__ == "__main__":
    sys.exit(serve_main(sys.argv[1:]))
