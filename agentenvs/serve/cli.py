"""``agentenvs serve ENV_ID --api agentgym|openenv``: run the server (uvicorn).

``--workers N`` (N > 1) runs N server processes behind HAProxy at one address, ``--host:--port``:
each request reaches the worker that holds its session (:mod:`agentenvs.serve.proxy`), so a
client that knows one URL (AgentGym's, OpenEnv's, ours) uses every worker. Stopping the command
(Ctrl-C or SIGTERM) stops HAProxy and every worker; if any of them exits, the rest are stopped.
``--proxy none`` instead serves the workers on ports ``port`` .. ``port+N-1`` for clients given
the list of URLs. (uvicorn's own ``--workers`` shares one port through the kernel, which sends
consecutive requests of one session to different processes.) Session ids of worker ``i`` start
with ``w<i>-``; a request that reaches the wrong worker gets a 404 that says so. The workers share
one snapshot key, so a snapshot token restores fast on any of them.

``--auth-token TOKEN`` (or ``$AGENTENVS_AUTH_TOKEN``): every request of every API must carry
``Authorization: Bearer TOKEN`` (a WebSocket in its handshake); others get 401.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import multiprocessing
import os
import secrets
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentenvs.registration import ENVIRONMENTS

__all__ = ["bind_warning", "serve_main", "worker_urls"]


def worker_urls(host: str, port: int, workers: int) -> list[str]:
    """The base URL of each worker of ``agentenvs serve --port port --workers workers
    --proxy none``."""
    return [f"http://{host}:{port + i}" for i in range(workers)]


def bind_warning(host: str, auth_token: str | None) -> str | None:
    """The warning for serving on ``host`` without a token: None for a loopback address or
    when a token is set."""
    if auth_token:
        return None
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        loopback = False
    if loopback:
        return None
    return (
        f"agentenvs serve: WARNING: listening on {host} without --auth-token: anyone who "
        "reaches this port can open sessions; set --auth-token or $AGENTENVS_AUTH_TOKEN"
    )


def _parser() -> argparse.ArgumentParser:
    from agentenvs.serve.settings import (
        APIS,
        AUTH_TOKEN_ENV,
        DEFAULT_IDLE_TIMEOUT,
        DEFAULT_MAX_SESSIONS,
        MAX_BODY_BYTES,
    )

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
        choices=(*APIS, "mcp"),
        default="agentgym",
        help="agentgym: AgentGym's routes; openenv: OpenEnv's; mcp: MCP tools at /mcp "
        "(streamable HTTP) (default agentgym)",
    )
    p.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1 (this machine only)")
    p.add_argument("--port", type=int, default=8000, help="the port (default 8000)")
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes behind one address (HAProxy; default 1)",
    )
    p.add_argument(
        "--proxy",
        choices=("haproxy", "none"),
        default="haproxy",
        help="with --workers N: haproxy (one address) or none (ports PORT..PORT+N-1)",
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
    p.add_argument(
        "--auth-token",
        default=None,
        help=f"require 'Authorization: Bearer TOKEN' on every request (default ${AUTH_TOKEN_ENV})",
    )
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=MAX_BODY_BYTES,
        help=f"larger request bodies get 413 (default {MAX_BODY_BYTES})",
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
        "auth_token": args.auth_token,
        "max_body_bytes": args.max_body_bytes,
    }


def _run_worker(
    env_id: str, api: str, where: dict[str, Any], log_level: str, kwargs: dict[str, Any]
) -> None:
    """One worker: ``where`` is ``{"host", "port"}`` or ``{"uds"}`` (a Unix socket path)."""
    import uvicorn

    if api == "mcp":
        from agentenvs.serve.mcp_http import build_mcp_app

        app = build_mcp_app(env_id, **kwargs)
    else:
        from agentenvs.serve import build_app

        app = build_app(env_id, api, **kwargs)
    uvicorn.run(
        app,
        **where,
        log_level=log_level,
        access_log=False,
        timeout_keep_alive=75,
        backlog=4096,
        # no per-message compression: its zlib state costs every WebSocket session memory and
        # every message CPU, for observations of a few hundred bytes
        ws_per_message_deflate=False,
    )


def _raise_fd_limit() -> None:
    """The soft open-file limit up to the hard one (a worker holds a socket per session)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def serve_main(argv: list[str]) -> int:
    from agentenvs.serve.settings import AUTH_TOKEN_ENV

    args = _parser().parse_args(argv)
    if args.workers < 1:
        print("agentenvs serve: --workers must be at least 1", file=sys.stderr)
        return 2
    from agentenvs.serve import require_serve_deps

    require_serve_deps(*{"openenv": ("openenv",), "mcp": ("mcp",)}.get(args.api, ()))
    args.auth_token = args.auth_token or os.environ.get(AUTH_TOKEN_ENV) or None
    warning = bind_warning(args.host, args.auth_token)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    _raise_fd_limit()
    if args.workers == 1:
        print(
            f"agentenvs serve {args.env_id} --api {args.api}: http://{args.host}:{args.port}",
            flush=True,
        )
        _run_worker(
            args.env_id,
            args.api,
            {"host": args.host, "port": args.port},
            args.log_level,
            _app_kwargs(args, args.snapshot_key, 0),
        )
        return 0
    # one key for all workers, so a token made by one restores (fast) on the others
    key = args.snapshot_key or os.environ.get("AGENTENVS_SERVE_KEY") or secrets.token_hex(32)
    if args.proxy == "none":
        places = [{"host": args.host, "port": args.port + i} for i in range(args.workers)]
        urls = worker_urls(args.host, args.port, args.workers)
        print(f"agentenvs serve {args.env_id} --api {args.api}: {' '.join(urls)}", flush=True)
        return _supervise(args, key, places, None)
    from agentenvs.serve.proxy import haproxy_binary

    if haproxy_binary() is None:
        print(
            "agentenvs serve: --workers N needs HAProxy as its one address: apt-get install "
            "haproxy (or --proxy none: one port per worker)",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="agentenvs-serve-") as tmp:
        sockets = [Path(tmp) / f"w{i}.sock" for i in range(args.workers)]
        places = [{"uds": str(sock)} for sock in sockets]
        print(
            f"agentenvs serve {args.env_id} --api {args.api}: http://{args.host}:{args.port} "
            f"({args.workers} workers behind HAProxy)",
            flush=True,
        )
        return _supervise(args, key, places, (Path(tmp), sockets))


def _supervise(
    args: argparse.Namespace,
    key: str,
    places: list[dict[str, Any]],
    proxy: tuple[Path, list[Path]] | None,
) -> int:
    """Start the workers (and HAProxy once they listen); stop them all when one exits or on
    SIGTERM / Ctrl-C."""
    context = multiprocessing.get_context("spawn")
    procs: list[Any] = [
        context.Process(
            target=_run_worker,
            args=(args.env_id, args.api, where, args.log_level, _app_kwargs(args, key, i)),
            name=f"agentenvs-serve-{i}",
        )
        for i, where in enumerate(places)
    ]
    for proc in procs:
        proc.start()

    def stop(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    proxies: list[Any] = []
    code = 0
    try:
        if proxy is not None:
            proxies = _start_proxy(args, proxy, procs)
        while all(p.is_alive() for p in procs) and all(h.poll() is None for h in proxies):
            time.sleep(0.2)
        dead = [p.name for p in procs if not p.is_alive()]
        dead += ["haproxy" for h in proxies if h.poll() is not None]
        print(f"agentenvs serve: {dead} exited; stopping the others", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        pass
    finally:
        for h in proxies:
            if h.poll() is None:
                h.terminate()
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
        for h in proxies:
            try:
                h.wait(timeout=10)
            except Exception:
                h.kill()
    return code


def _start_proxy(
    args: argparse.Namespace, proxy: tuple[Path, list[Path]], procs: list[Any]
) -> list[Any]:
    """HAProxy in front of the workers' sockets, once every socket exists: as many processes
    as the workers' sessions need under the open-file limit."""
    from agentenvs.serve.proxy import haproxy_config, haproxy_plan, start_haproxy

    directory, sockets = proxy
    deadline = time.monotonic() + 300  # a worker builds its environment before it listens
    while not all(sock.exists() for sock in sockets):
        if not all(p.is_alive() for p in procs):
            return []  # a worker died before listening: the caller stops the rest
        if time.monotonic() > deadline:
            raise TimeoutError("the workers did not listen within 300 s")
        time.sleep(0.05)
    processes, maxconn = haproxy_plan(args.workers * args.max_sessions)
    if args.api == "mcp":  # MCP sessions stick by a table that lives in one HAProxy process
        processes = 1
    config = haproxy_config(args.host, args.port, [f"unix@{s}" for s in sockets], maxconn)
    return start_haproxy(config, directory, processes)


if __name__ == "__main__":
    sys.exit(serve_main(sys.argv[1:]))
