"""One address for ``agentenvs serve --workers N``: HAProxy in front of N worker processes.

The workers listen on Unix sockets in a private directory; HAProxy listens on ``--host:--port``
and sends each request to the worker that holds its session:

* native routes: the worker named by the session id's ``w<i>-`` prefix, read from the request
  body's first ``"session": "w<i>-...`` (a batch goes to its first item's worker, so a batch's
  sessions must live on one worker: create them with the same ``X-Agentenvs-Affinity``);
* AgentGym's routes: AgentGym's integer id (body ``id`` / ``env_idx``, or the same query
  parameter) modulo N, since worker ``i`` hands out ids ``n * N + i``;
* MCP (``--api mcp``, at ``/mcp``): the worker that answered the session's first request with
  its ``Mcp-Session-Id`` header, by HAProxy's own stickiness: a stick table stores the header of
  that answer with the worker, and every request carrying the header goes where the table says
  (and refreshes the entry). The stick table lives in one HAProxy process, so MCP runs one;
* everything else (creating a session, OpenEnv's ``/ws``, one-shot and listing routes, an MCP
  ``initialize``): the least-loaded worker, or with an ``X-Agentenvs-Affinity: <key>`` header
  the worker that key hashes to.

A WebSocket stays on the worker it opened on for its whole life, which is OpenEnv's session.
Requests carry their ``Authorization`` header through to the workers, which check it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

__all__ = [
    "AFFINITY_HEADER",
    "haproxy_binary",
    "haproxy_config",
    "haproxy_plan",
    "start_haproxy",
]

FDS_PER_CONNECTION = 2
"""A proxied connection holds two descriptors in HAProxy: the client's and the worker's."""
FD_MARGIN = 200
"""Descriptors an HAProxy process keeps for its listeners, logs and checks."""
AFFINITY_HEADER = "X-Agentenvs-Affinity"
"""A request header whose value picks the worker for requests that name no session."""
MCP_PATH = "/mcp"
"""Where ``--api mcp`` serves (:data:`agentenvs.serve.mcp_http.MCP_PATH`): its JSON-RPC bodies
carry an ``"id"`` that is no AgentGym id, and its sessions are routed by their header."""
MCP_SESSION_HEADER = "mcp-session-id"
"""The header naming an MCP session, set by the worker's answer to ``initialize``."""
MCP_STICK_ENTRIES = 1_048_576
"""Room in HAProxy's stick table for MCP sessions: more than all workers' ``--max-sessions``
could hold (HAProxy allocates an entry only when it stores one)."""
MCP_STICK_EXPIRE = "48h"
"""An MCP session's entry outlives this long without a request: longer than any idle timeout
a worker keeps a session for by default (an hour), so a live session never loses its worker."""
BODY_BUFFER_BYTES = 16_384
"""What HAProxy reads of a body before choosing the worker (its ``tune.bufsize``): a session id
comes in a request's first bytes."""


def haproxy_binary() -> str | None:
    """The ``haproxy`` executable on PATH (or in /usr/sbin), or None."""
    return shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")


def haproxy_plan(connections: int) -> tuple[int, int]:
    """(processes, maxconn each) for ``connections`` concurrent client connections under this
    process's open-file hard limit (which HAProxy inherits and cannot raise without
    CAP_SYS_RESOURCE). The processes share the port (SO_REUSEPORT, HAProxy's default on Linux):
    the kernel spreads connections over them, and each routes any request the same way."""
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    hard = 1_048_576 if hard == resource.RLIM_INFINITY else hard
    maxconn = max((hard - FD_MARGIN) // FDS_PER_CONNECTION, 256)
    return max(1, -(-connections // maxconn)), maxconn


def haproxy_config(host: str, port: int, servers: list[str], maxconn: int) -> str:
    """The HAProxy configuration routing ``host:port`` to the workers at ``servers`` (HAProxy
    addresses: ``unix@/path/w0.sock`` or ``127.0.0.1:8001``), worker ``i`` at ``servers[i]``."""
    n = len(servers)
    lines = [
        "global",
        f"    maxconn {maxconn}",
        f"    tune.bufsize {BODY_BUFFER_BYTES * 2}",
        "    log stderr format short local0 err",
        "defaults",
        "    mode http",
        "    log global",
        "    option http-buffer-request",
        f"    maxconn {maxconn}",
        "    timeout connect 5s",
        "    timeout client 1h",
        "    timeout server 1h",
        "    timeout tunnel 24h",
        "    timeout http-request 60s",
        "    timeout http-keep-alive 75s",
        "    http-reuse always",
        "frontend agentenvs",
        f"    bind {host}:{port}",
        "    default_backend workers",
        "backend workers",
        "    balance leastconn",
        # MCP: the worker that named the session (a use-server rule would win over it)
        f"    acl mcp path {MCP_PATH} {MCP_PATH}/",
        f"    stick-table type string len 128 size {MCP_STICK_ENTRIES} expire {MCP_STICK_EXPIRE}",
        f"    stick on req.hdr({MCP_SESSION_HEADER}) if mcp",
        f"    stick store-response res.hdr({MCP_SESSION_HEADER})",
        # AgentGym's integer id, from the body or the query string
        "    http-request set-var(txn.gid) req.body,json_query('$.id','int')"
        ' if !mcp { req.body -m reg "\\"id\\" *: *[0-9]" }',
        "    http-request set-var(txn.gid) req.body,json_query('$.env_idx','int')"
        ' if !mcp { req.body -m reg "\\"env_idx\\" *: *[0-9]" }',
        "    http-request set-var(txn.gid) url_param(id) if !mcp { url_param(id) -m reg ^[0-9]+$ }",
        "    http-request set-var(txn.gid) url_param(env_idx)"
        " if !mcp { url_param(env_idx) -m reg ^[0-9]+$ }",
        f"    http-request set-var(txn.worker) var(txn.gid),mod({n})"
        " if { var(txn.gid) -m found }",
        # a client's affinity key, for requests that name no session
        f"    http-request set-var(txn.worker) req.hdr({AFFINITY_HEADER}),djb2,mod({n})"
        f" if {{ req.hdr({AFFINITY_HEADER}) -m found }} !{{ var(txn.worker) -m found }}",
    ]
    for i in range(n):  # the native session id's worker prefix (checked last: it wins)
        lines.append(
            f"    http-request set-var(txn.worker) int({i})"
            f' if !mcp {{ req.body -m reg "\\"session\\" *: *\\"w{i}-" }}'
        )
    for i in range(n):
        lines.append(f"    use-server w{i} if {{ var(txn.worker) -m int {i} }}")
    for i, address in enumerate(servers):
        lines.append(f"    server w{i} {address} maxconn {maxconn}")
    return "\n".join(line for line in lines if line) + "\n"


def start_haproxy(
    config: str, directory: Path, processes: int = 1
) -> list[subprocess.Popen[bytes]]:
    """``processes`` HAProxy processes in the foreground with ``config`` (written to
    ``directory``), sharing its port; raises FileNotFoundError naming the package when it is
    not installed, ValueError for a config HAProxy refuses."""
    binary = haproxy_binary()
    if binary is None:
        raise FileNotFoundError(
            "agentenvs serve --workers N needs HAProxy as its one address: "
            "apt-get install haproxy (or --proxy none: one port per worker)"
        )
    path = directory / "haproxy.cfg"
    path.write_text(config)
    check = subprocess.run([binary, "-c", "-q", "-f", str(path)], capture_output=True, text=True)
    if check.returncode != 0:
        raise ValueError(f"HAProxy refused its configuration: {check.stderr.strip()}")
    return [subprocess.Popen([binary, "-db", "-f", str(path)]) for _ in range(processes)]
