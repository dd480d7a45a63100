"""The distribution installs one top-level package, ``agentenvs``, whatever the caller's folder
holds (a research folder with its own ``train.py`` and ``agents/`` shadows nothing of ours)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("agents", "replay", "train", "benchmarks", "integrations")


def test_wheel_has_one_top_level_package(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert zf.read(top_level).decode().split() == ["agentenvs"]
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert tops == {"agentenvs"}
    for folder in FOLDERS:
        assert f"agentenvs/{folder}/__init__.py" in names
    # data folders without an __init__.py ship too
    assert "agentenvs/textcraft/data/recipes.json.gz" in names
    assert "agentenvs/agents/backends/cpu/kernels.c" in names
    for page in ("index.html", "viewer.js", "viewer.css"):  # agentenvs view's page
        assert f"agentenvs/benchmarks/view/static/{page}" in names


def test_every_package_folder_is_in_the_wheel(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    for folder in ("agentenvs", *FOLDERS):
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.relative_to(ROOT).as_posix()
            installed = rel if folder == "agentenvs" else f"agentenvs/{rel}"
            assert installed in names, rel


def test_cli_runs_from_a_folder_with_its_own_train_and_agents(tmp_path):
    (tmp_path / "train.py").write_text("raise SystemExit('the folder train.py was imported')\n")
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "__init__.py").write_text("raise ImportError('folder agents')\n")
    for args in (["train", "rl", "--help"], ["eval", "--help"], ["replay", "cuts", "--help"]):
        proc = subprocess.run(
            [sys.executable, "-m", "agentenvs.cli", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        assert "usage:" in proc.stdout


# OpenAI's Agents SDK installs the top-level package ``agents``: beside ours in either order, both
# keep working, and removing agentenvs leaves the SDK whole.
SDK = "openai-agents"
SDK_WORKS = "from agents import Agent, Runner; print(Agent(name='a', instructions='b').name)"
OURS_WORK = (
    "from agentenvs.agents.prompts import Conversation; import gymnasium as gym, agentenvs; "
    "env = gym.make('TextCraft-v0'); env.reset(seed=0); print(Conversation.__name__)"
)


@pytest.mark.slow
@pytest.mark.parametrize("sdk_first", [False, True], ids=["agentenvs-first", "sdk-first"])
def test_openai_agents_beside_agentenvs(wheel, fresh_venv, sdk_first):
    order = [[SDK], [str(wheel)]]
    for spec in order if sdk_first else order[::-1]:
        fresh_venv.pip("install", "-q", *spec)
    fresh_venv.check()
    assert fresh_venv.python_ok(SDK_WORKS).strip() == "a"
    assert fresh_venv.python_ok(OURS_WORK).strip() == "Conversation"
    for args in (["list"], ["eval", "--help"]):  # train needs torch: the [llm] extra
        fresh_venv.run(str(fresh_venv.bin / "agentenvs"), *args)
    fresh_venv.pip("uninstall", "-y", "-q", "agentenvs")
    assert fresh_venv.python_ok(SDK_WORKS).strip() == "a"
