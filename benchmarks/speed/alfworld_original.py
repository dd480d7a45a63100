"""The unmodified ALFWorld engine in a process of its own: plays jobs, reports text and times.

Run only as a child process through :func:`launch` (never imported by the child, never importing
agentenvs): the child executes this file with ``runpy``, in a fresh temporary working directory
(the engine's side effects stay there), and checks at exit that nothing of agentenvs was imported.

The engine is what alfworld 0.4.2's ``AlfredTWEnv`` builds: textworld 1.7's ``PddlEnv`` in
``AlfredDemangler(shuffle=False)`` and ``AlfredInfos``, with ``won`` and ``admissible_commands``
requested. Protocol, one JSON object per line each way:

* a job ``{"id", "game": <path of a game.tw-pddl or its JSON>, "episodes": [...]}``, each
  episode ``{"actions": [...]}`` (play these commands) or ``{"random": {"seed", "steps",
  "junk"}}`` (commands drawn from the admissible list, one in ``junk`` of them an invalid one
  from :data:`JUNK`, with Python's ``random.Random(seed)``) or ``{"walkthrough": true}`` (the
  game file's stored solution); an episode ends early when the game is won;
* its answer ``{"id", "load_s", "episodes": [{"reset_s", "actions", "step_s", "trace"}]}``:
  the game is loaded once (``load_s``), each episode resets it (``reset_s``) and plays its
  commands (``step_s``, one time per command); ``trace`` holds ``[feedback, admissible commands,
  score, won]`` after the reset and after every command;
* end of input: the child answers ``{"done": true, "agentenvs_imported": false}`` and exits.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["JUNK", "launch"]

JUNK = ("jump", "go to moon 1", "take the mug", "", "Look", "  look  ", "open door")
_LAUNCH = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"


def launch(cwd: str | os.PathLike[str] | None = None) -> subprocess.Popen:
    """Start the child (``python -c`` runs this file: the child's ``sys.path`` does not get this
    file's folder, whose module names would shadow the engine's); its cwd is a fresh temp dir
    unless ``cwd`` is given. Write jobs to its stdin, read answers from its stdout."""
    workdir = cwd or tempfile.mkdtemp(prefix="alfworld-original-")
    return subprocess.Popen(
        [sys.executable, "-c", _LAUNCH, str(Path(__file__).resolve())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=workdir,
        bufsize=1,
    )


def _engine() -> Any:
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    from textworld.envs.pddl import PddlEnv

    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    return AlfredInfos(AlfredDemangler(PddlEnv(infos), shuffle=False))


def _row(state: Any, score: float) -> list:
    return [state.feedback, list(state["admissible_commands"]), score, bool(state["won"])]


def _commands(episode: dict, walkthrough: list[str]) -> tuple[list[str] | None, Any]:
    """(fixed commands, None) or (None, the generator drawing random ones)."""
    if "actions" in episode:
        return list(episode["actions"]), None
    if episode.get("walkthrough"):
        return list(walkthrough), None
    spec = episode["random"]
    return None, (random.Random(spec["seed"]), int(spec["steps"]), int(spec["junk"]))


def _play(env: Any, episode: dict, walkthrough: list[str]) -> dict:
    start = time.perf_counter()
    state = env.reset()
    reset_s = time.perf_counter() - start
    trace, actions, step_s = [_row(state, 0.0)], [], []
    fixed, drawn = _commands(episode, walkthrough)
    n = len(fixed) if fixed is not None else drawn[1]
    for i in range(n):
        if fixed is not None:
            action = fixed[i]
        else:
            rng, _, junk = drawn
            pool = JUNK if junk and rng.randrange(junk) == 0 else state["admissible_commands"]
            action = rng.choice(list(pool))
        start = time.perf_counter()
        state, score, _ = env.step(action)
        step_s.append(time.perf_counter() - start)
        actions.append(action)
        trace.append(_row(state, float(score)))
        if state["won"]:
            break
    return {"reset_s": reset_s, "actions": actions, "step_s": step_s, "trace": trace}


def _serve() -> None:
    # Answers go to the original stdout; anything else written there (the engine's own prints,
    # its C library's) goes to stderr instead.
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    argv = sys.argv
    env = _engine()
    for line in sys.stdin:
        job = json.loads(line)
        game = job["game"]
        start = time.perf_counter()
        env.load(game)
        load_s = time.perf_counter() - start
        if isinstance(game, str):
            with open(game, encoding="utf-8") as f:
                walkthrough = json.load(f).get("walkthrough") or []
        else:
            walkthrough = game.get("walkthrough") or []
        episodes = [_play(env, e, walkthrough) for e in job["episodes"]]
        sys.argv = argv  # fast-downward's translator rewrote it
        out = {"id": job.get("id"), "load_s": load_s, "episodes": episodes}
        print(json.dumps(out), file=answers, flush=True)
    imported = any(name == "agentenvs" or name.startswith("agentenvs.") for name in sys.modules)
    print(json.dumps({"done": True, "agentenvs_imported": imported}), file=answers, flush=True)


if __name__ == "__main__":
    _serve()
