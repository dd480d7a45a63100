"""HAProxy against nginx in front of one ``agentenvs serve`` worker, and neither (direct).

    python -m agentenvs.benchmarks.speed.serve_proxies [--sessions 1024] [--think 2]

The same sessions as ``serve_scale`` (its client and levels): native HTTP routes and OpenEnv's
``/ws``, ``--sessions`` at once, against one worker (``agentenvs serve TextCraft-v0 --api
openenv``) reached directly, through HAProxy (the configuration ``agentenvs serve --workers``
writes, with its session-id routing rules) and through nginx (a plain reverse proxy with
keep-alive upstream connections and WebSocket upgrade; stock nginx cannot read a request body to
route on it). Per front: success, p50/p99 latency, requests/s and the proxy's own RSS.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agentenvs.benchmarks.speed.serve_scale import (
    V1,
    Server,
    _free_port,
    _raise_fd_limit,
    ours,
    run_level,
)
from agentenvs.benchmarks.speed.serve_scale import (
    _parser as scale_parser,
)
from agentenvs.serve.proxy import haproxy_binary, haproxy_config

__all__ = ["main"]

NGINX_CONFIG = """
worker_processes auto;
worker_rlimit_nofile 20000;
error_log stderr error;
pid {dir}/nginx.pid;
daemon off;
events {{ worker_connections 9000; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    client_max_body_size 64m;
    map $http_upgrade $connection_upgrade {{ default upgrade; '' ''; }}
    upstream worker {{ server 127.0.0.1:{upstream}; keepalive 256; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://worker;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_read_timeout 1h;
            proxy_buffering off;
        }}
    }}
}}
"""


def _haproxy(upstream: int, directory: Path) -> Server:
    port = _free_port()
    path = directory / "haproxy.cfg"
    path.write_text(haproxy_config("127.0.0.1", port, [f"127.0.0.1:{upstream}"], 9000))
    return Server([str(haproxy_binary()), "-db", "-f", str(path)], port, V1 + "/health")


def _nginx(upstream: int, directory: Path) -> Server:
    port = _free_port()
    path = directory / "nginx.conf"
    path.write_text(NGINX_CONFIG.format(dir=directory, upstream=upstream, port=port))
    binary = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
    return Server([str(binary), "-p", str(directory), "-c", str(path)], port, V1 + "/health")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="serve_proxies", description=__doc__)
    p.add_argument("--sessions", type=int, default=1024)
    p.add_argument("--think", type=float, default=2.0)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--ramp-rate", type=float, default=200.0)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    scale_args = scale_parser().parse_args(
        ["--think", str(args.think), "--steps", str(args.steps), "--openenv-python", ""]
    )
    _raise_fd_limit()
    rows: list[dict[str, Any]] = []
    worker = ours("TextCraft-v0", 1, args.sessions + 64)
    upstream = int(worker.url.rsplit(":", 1)[1])
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, start in (("direct", None), ("haproxy", _haproxy), ("nginx", _nginx)):
                front = worker if start is None else start(upstream, Path(tmp))
                try:
                    base = front.rss() if start else 0
                    for transport in ("native", "ws"):
                        result = run_level(
                            f"{name} {transport}", transport, front, "TextCraft-v0",
                            args.sessions, scale_args, base, args.ramp_rate,
                        )  # fmt: skip
                        row = asdict(result)
                        row["proxy_rss_mib"] = round(front.rss() / 2**20, 1) if start else None
                        print(json.dumps(row), flush=True)
                        rows.append(row)
                finally:
                    if start is not None:
                        front.close()
    finally:
        worker.close()
    print("| front | transport | success | p50 ms | p99 ms | requests/s | proxy RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        front, transport = r["series"].split()
        print(
            f"| {front} | {transport} | {r['success'] * 100:.2f}% | {r['p50_ms']:g} | "
            f"{r['p99_ms']:g} | {r['requests_per_s']:g} | {r['proxy_rss_mib'] or ''} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
