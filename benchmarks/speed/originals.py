"""The original benchmarks' environments in a process of their own, for the steps/s table.

Run only as a child process through :func:`launch` (never imported by the child, which never
imports agentenvs): the child executes this file with ``runpy``, with a Python that has the
original's requirements (a scratch venv), and imports the original's code from the copy named in
its setup. Their code is not part of agentenvs; the table
(:mod:`agentenvs.benchmarks.speed.steps_table`) says "not measured" where a copy is absent.

Protocol, one JSON object per line each way:

* a setup ``{"original": KEY, ...}`` (the keys of :data:`ORIGINALS`, with the fields their
  player needs: the copy's folder, the task, the actions); the answer ``{"ready": true,
  "trace": [...]}`` (what one episode showed, for the parent to check it is the same episode
  as ours) or ``{"error": "..."}`` (it cannot run here, and why);
* then ``{"seconds": S}``, as often as the parent likes: play the episode again and again (its
  reset, then its actions) for ``S`` seconds; the answer ``{"steps", "seconds",
  "reset_seconds"}`` (the time its resets took, within ``seconds``);
* end of input: the child stops what it started, answers ``{"done": true,
  "agentenvs_imported": false}`` and exits.

:func:`agentgym_client` (AgentGym's routes: ``/create``, ``/reset``, ``/step``) is the client that
plays AgentGym's server here; the parent plays our ``--api agentgym`` routes with it too.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import os
import select
import socket
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["ORIGINALS", "agentgym_client", "launch", "stderr_tail"]

_LAUNCH = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"


def launch(python: str) -> subprocess.Popen:
    """Start the child with ``python`` (``-c`` runs this file, so the child's ``sys.path`` does
    not get this file's folder); write setups and runs to its stdin, read answers from its
    stdout. Its cwd is a fresh temporary folder (what an original writes stays there), and its
    stderr (the originals' own prints) goes to ``stderr.log`` there (:func:`stderr_tail`)."""
    import tempfile

    workdir = Path(tempfile.mkdtemp(prefix="agentenvs-original-"))
    with open(workdir / "stderr.log", "w") as log:
        proc = subprocess.Popen(
            [python, "-c", _LAUNCH, str(Path(__file__).resolve())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            cwd=workdir,
            bufsize=1,
        )
    proc.workdir = workdir  # type: ignore[attr-defined]
    return proc


def stderr_tail(proc: subprocess.Popen, chars: int = 600) -> str:
    """The end of what the child of :func:`launch` wrote to its stderr."""
    try:
        return (proc.workdir / "stderr.log").read_text()[-chars:]  # type: ignore[attr-defined]
    except OSError:
        return ""


# ----- AgentGym's routes ---------------------------------------------------------------------


def _post(conn: http.client.HTTPConnection, path: str, body: dict[str, Any]) -> Any:
    if conn.sock is not None and select.select([conn.sock], [], [], 0)[0]:
        conn.close()  # the server closed it while idle (uvicorn's keep-alive timeout): reopen
    conn.request("POST", path, json.dumps(body).encode(), {"content-type": "application/json"})
    response = conn.getresponse()
    payload = json.loads(response.read())
    if response.status != 200 or (isinstance(payload, dict) and "error" in payload):
        raise RuntimeError(f"POST {path} answered {response.status}: {payload}")
    return payload


def agentgym_client(
    host: str, port: int, data_idx: int, actions: list[str]
) -> tuple[Callable[[], list[str]], Callable[[], None]]:
    """(play, close) on AgentGym's TextCraft routes at ``host:port``, one keep-alive
    connection: ``play()`` resets environment ``data_idx`` (``/reset``) and steps the actions
    (``/step``), returning the observations."""
    conn = http.client.HTTPConnection(host, port, timeout=120)
    env_id = _post(conn, "/create", {})["id"]

    def play() -> list[str]:
        reset = _timed(lambda: _post(conn, "/reset", {"id": env_id, "data_idx": data_idx}))
        trace = [reset["observation"]]
        for action in actions:
            trace.append(_post(conn, "/step", {"id": env_id, "action": action})["observation"])
        return trace

    def close() -> None:
        with contextlib.suppress(Exception):
            _post(conn, "/close", {"id": env_id})
        conn.close()

    return play, close


# ----- the originals -------------------------------------------------------------------------


def _package(name: str, path: Path) -> None:
    """Make ``name`` a package over folder ``path`` without running its ``__init__``."""
    module = types.ModuleType(name)
    module.__path__ = [str(path)]
    sys.modules[name] = module


def _adapt_textcraft(setup: dict) -> tuple[Callable[[], list], Callable[[], None]]:
    """ADaPT's ``TextCraft/env.py`` (its package name is ``textcraft``), recipes from
    ``setup["minecraft_dir"]``: ``reset(seed)`` is ADaPT's task ``seed``."""
    _package("textcraft", Path(setup["source"]) / "TextCraft")
    from textcraft.env import TextCraft

    env = TextCraft(minecraft_dir=setup["minecraft_dir"])
    seed, actions = setup["seed"], setup["actions"]

    return _observations_of(lambda: env.reset(seed=seed), env.step, actions), lambda: None


def _agentgym_textcraft(setup: dict) -> tuple[Callable[[], list], Callable[[], None]]:
    """AgentGym's ``agentenv-textcraft`` server (uvicorn, its own process, its cwd the
    package's folder as its wrapper expects), played through :func:`agentgym_client`."""
    folder = Path(setup["source"]) / "agentenv-textcraft"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "agentenv_textcraft.server:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(folder)},
    )
    deadline = time.monotonic() + 120
    while True:
        if server.poll() is not None:
            raise RuntimeError(f"AgentGym's server exited: {server.stderr.read()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline:
                server.kill()
                raise RuntimeError("AgentGym's server did not start in 120 s") from None
            time.sleep(0.2)
    play, close_client = agentgym_client("127.0.0.1", port, setup["data_idx"], setup["actions"])

    def close() -> None:
        close_client()
        server.terminate()
        server.wait(timeout=20)

    return play, close


def _minigrid(setup: dict) -> tuple[Callable[[], list], Callable[[], None]]:
    """minigrid's level (no text): ``reset(seed)`` and the primitive actions that our text
    actions ran; the trace is the rewards and ends."""
    import gymnasium as gym
    import minigrid  # noqa: F401 (registers the levels)

    env = gym.make(setup["minigrid_id"], disable_env_checker=True).unwrapped
    seed, primitives = setup["seed"], setup["primitives"]

    def play() -> list:
        with contextlib.redirect_stdout(io.StringIO()):  # some levels print while they generate
            _timed(lambda: env.reset(seed=seed))
        trace = []
        for primitive in primitives:
            _, reward, terminated, truncated, _ = env.step(primitive)
            trace.append([float(reward), bool(terminated), bool(truncated)])
        return trace

    return play, env.close


def _verl_agent_sokoban(setup: dict) -> tuple[Callable[[], list], Callable[[], None]]:
    """verl-agent's ``SokobanEnv`` (gym-sokoban underneath), its ``tiny_rgb_array`` text;
    imported without its package's ``__init__`` (which imports Ray)."""
    root = Path(setup["source"])
    sys.path.insert(0, str(root))
    base = root / "agent_system" / "environments" / "env_package" / "sokoban"
    _package("agent_system", root / "agent_system")
    _package("agent_system.environments", root / "agent_system" / "environments")
    _package("agent_system.environments.env_package", base.parent)
    _package("agent_system.environments.env_package.sokoban", base)
    from agent_system.environments.env_package.sokoban.sokoban.env import SokobanEnv

    env = SokobanEnv(
        "tiny_rgb_array",
        dim_room=tuple(setup["dim_room"]),
        num_boxes=setup["num_boxes"],
        max_steps=10**9,
        search_depth=setup["search_depth"],
    )
    seed, actions = setup["seed"], setup["actions"]

    return _observations_of(lambda: env.reset(seed=seed), env.step, actions), lambda: None


def _webshop_text(setup: dict) -> tuple[Callable[[], list], Callable[[], None]]:
    """WebShop's ``WebAgentTextEnv`` (``observation_mode="text"``, 1,000 products), its Lucene
    search through pyserini (the index its ``search_engine/run_indexing.sh`` builds under the
    copy), ``reset(session=n)`` for goal ``n``. The global generator is seeded with
    ``setup["seed"]`` first: WebShop draws prices and price ceilings from it unseeded."""
    import random

    sys.path.insert(0, setup["source"])
    random.seed(setup["seed"])
    from web_agent_site.envs.web_agent_text_env import WebAgentTextEnv

    env = WebAgentTextEnv(observation_mode="text", num_products=1000)
    session, actions = setup["session"], setup["actions"]

    return _observations_of(lambda: env.reset(session=session), env.step, actions), env.close


ORIGINALS: dict[str, Callable[[dict], tuple[Callable[[], list], Callable[[], None]]]] = {
    "adapt-textcraft": _adapt_textcraft,
    "agentgym-textcraft": _agentgym_textcraft,
    "minigrid": _minigrid,
    "verl-agent-sokoban": _verl_agent_sokoban,
    "webshop-text": _webshop_text,
}


def _run(play: Callable[[], list], steps: int, seconds: float) -> dict[str, float]:
    clock = time.perf_counter
    done = 0
    start = clock()
    _RESETS[0] = 0.0
    while clock() - start < seconds:
        play()
        done += steps
    return {"steps": done, "seconds": clock() - start, "reset_seconds": _RESETS[0]}


_RESETS = [0.0]  # seconds spent in resets since the run began (each player adds its own)


def _timed(reset: Callable[[], Any]) -> Any:
    """``reset()``, its time added to :data:`_RESETS`."""
    start = time.perf_counter()
    try:
        return reset()
    finally:
        _RESETS[0] += time.perf_counter() - start


def _observations_of(
    reset: Callable[[], tuple], step: Callable[[str], tuple], actions: list[str]
) -> Callable[[], list]:
    """An episode player for an original whose reset and step return the observation first:
    reset (timed apart), then every action; the observations, for the text check."""

    def play() -> list:
        trace = [_timed(reset)[0]]
        for action in actions:
            trace.append(step(action)[0])
        return trace

    return play


def _serve() -> None:
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # the originals' own prints go to stderr
    close: Callable[[], None] = lambda: None  # noqa: E731
    play: Callable[[], list] | None = None
    try:
        for line in sys.stdin:
            job = json.loads(line)
            if "original" in job:
                play = None
                try:
                    play, close = ORIGINALS[job["original"]](job)
                    out: dict[str, Any] = {"ready": True, "trace": play()}
                except Exception as exc:  # it cannot run here: say why
                    out = {"error": f"{type(exc).__name__}: {exc}"}
                steps = job.get("steps_per_episode", len(job.get("actions", ())))
            elif play is None:
                out = {"error": "no original is set up"}
            else:
                out = _run(play, steps, float(job["seconds"]))
            print(json.dumps(out), file=answers, flush=True)
    finally:
        close()
    imported = any(name == "agentenvs" or name.startswith("agentenvs.") for name in sys.modules)
    print(json.dumps({"done": True, "agentenvs_imported": imported}), file=answers, flush=True)


if __name__ == "__main__":
    _serve()
