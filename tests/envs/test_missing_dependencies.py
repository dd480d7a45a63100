"""A missing dependency is one error naming the extra to install, at ``gym.make``; ``agentenvs
list`` marks the environment; ``agentenvs eval`` stops with the fix, and a run whose episodes
errored is no result and is played again once the dependency is back.

Each case runs a real Python subprocess in which the dependency does not import (the
``without_modules`` fixture of tests/conftest.py blocks it the way Python blocks an import)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# the module each extra provides that the subprocess blocks, and the extra the error must name
BLOCKED = {"ALFWorld-v0": "textworld", "BabyAI-Text-v0": "minigrid", "WebShop-v0": "regex"}
EXTRAS = {"ALFWorld-v0": "alfworld", "BabyAI-Text-v0": "babyai", "WebShop-v0": "webshop"}

MAKE_ALL = """
import json
import gymnasium as gym
import agentenvs
from agentenvs.registration import MissingDependencyError

out = {}
for env_id in ["ALFWorld-v0", "BabyAI-Text-v0", "WebShop-v0", "TextCraft-v0"]:
    try:
        gym.make(env_id).close()
        out[env_id] = None
    except MissingDependencyError as exc:
        out[env_id] = str(exc)
print(json.dumps(out))
"""


def _run(args: list[str], env: dict[str, str], cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_gym_make_names_the_extra(without_modules) -> None:
    proc = _run(["-c", MAKE_ALL], without_modules(*BLOCKED.values()))
    assert proc.returncode == 0, proc.stderr
    errors = json.loads(proc.stdout)
    assert errors["TextCraft-v0"] is None  # the core environments need no extra
    for env_id, module in BLOCKED.items():
        message = errors[env_id]
        assert message.startswith(f"{env_id} needs the '{EXTRAS[env_id]}' extra"), message
        assert module in message and f"pip install 'agentenvs[{EXTRAS[env_id]}]'" in message
        assert "make install" not in message and "--no-deps" not in message


def test_list_marks_environments_whose_dependencies_do_not_import(without_modules) -> None:
    env = without_modules(*BLOCKED.values())
    proc = _run(["-m", "agentenvs.cli", "list", "--json"], env)
    assert proc.returncode == 0, proc.stderr
    rows = {row["env_id"]: row for row in json.loads(proc.stdout)}
    assert rows["TextCraft-v0"]["error"] is None and rows["TextCraft-v0"]["splits"]["test"] == 100
    for env_id, extra in EXTRAS.items():
        assert rows[env_id]["error"].startswith("not installed: "), rows[env_id]
        assert f"pip install 'agentenvs[{extra}]'" in rows[env_id]["error"]
    table = _run(["-m", "agentenvs.cli", "list"], env).stdout
    assert "ALFWorld-v0        not installed: " in table


def test_eval_without_the_engine_is_an_error_and_resumes_once_it_is_back(
    without_modules, tmp_path
) -> None:
    out = tmp_path / "alfworld-expert"
    args = ["-m", "agentenvs.cli", "eval", "ALFWorld-v0", "--agent", "expert"]
    args += ["--limit", "2", "-k", "1", "--no-progress", "--out", str(out)]
    fix = "pip install 'agentenvs[alfworld]'"

    # the engine missing here: one error at gym.make, before any episode, no table
    proc = _run(args, without_modules("textworld"))
    assert proc.returncode == 1 and fix in proc.stderr, proc.stderr
    assert "| **overall**" not in proc.stdout and not (out / "trajectories.jsonl").exists()

    # the engine missing in the environment workers only (a node without the extra): every
    # episode errors; not a score: exit 1 with the first error and its fix, the errors by type
    proc = _run([*args, "--env-workers", "1"], without_modules("textworld", children_only=True))
    assert proc.returncode == 1, proc.stderr
    assert "every episode ended in an error" in proc.stderr and fix in proc.stderr
    assert "| **overall** | 2 | 0 | 0 | - | - | 2 |" in proc.stdout
    assert "| reset: MissingDependencyError | 2 |" in proc.stdout
    results = json.loads((out / "results.json").read_text())
    assert [(e["type"], e["episodes"]) for e in results["errors"]] == [
        ("reset: MissingDependencyError", 2)
    ]
    assert results["rows"][-1]["avg_at_k"] is None and results["rows"][-1]["errors"] == 2
    assert results["protocol"] and results["variant"]

    # the engine back: the same command plays the two errored episodes again
    proc = _run([*args, "--env-workers", "1"], without_modules())
    assert proc.returncode == 0, proc.stderr
    assert "2 episodes (2 new)" in proc.stdout
    assert "| **overall** | 2 | 2 | 2 | 100.00 | 100.00 | 0 |" in proc.stdout
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 4  # the errored records stay, the played ones follow
    results = json.loads((out / "results.json").read_text())
    assert results["errors"] == [] and results["rows"][-1]["avg_at_k"] == 1.0
