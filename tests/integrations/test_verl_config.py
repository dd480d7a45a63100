"""docs/integrations.md's verl command runs as written: verl's own trainer config (Hydra compose of
``ppo_trainer``, as ``python -m verl.trainer.main_ppo`` does) with exactly the doc's overrides
passes verl's ``validate_config``, and our agent loop is instantiated from it the way verl's
``AgentLoopWorker`` does (the shipped config file, ``hydra.utils.instantiate``) and plays an
episode. No GPU: the rollout server is :class:`verl_helpers.TransformersServer`."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
verl = pytest.importorskip("verl")

sys.path.insert(0, str(Path(__file__).parent))
from verl_helpers import TransformersServer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIG_COMMAND = "$(python -m agentenvs.integrations.verl.config)"
TASK = "seed/15"  # conftest.TASK: "right" solves it in one move


def readme_verl_overrides() -> list[str]:
    """The Hydra overrides of docs/integrations.md's whole ``main_ppo`` command, the config
    command's output in place of its ``$(...)``."""
    doc = (ROOT / "docs" / "integrations.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", doc, re.S)
    (block,) = [
        b
        for b in blocks
        if "python -m agentenvs.integrations.verl.dataset" in b
        and "agentenvs.integrations.verl.config)" in b
    ]
    command = block[block.index("python -m verl.trainer.main_ppo") :].replace("\\\n", " ")
    command = command.split("\n", 1)[0]
    assert "..." not in command
    printed = subprocess.run(
        [sys.executable, "-m", "agentenvs.integrations.verl.config"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert Path(printed).is_file()
    words = shlex.split(command.replace(CONFIG_COMMAND, printed))
    assert words[:3] == ["python", "-m", "verl.trainer.main_ppo"]
    return words[3:]


def test_config_command_prints_and_writes_the_shipped_file(tmp_path):
    from agentenvs.integrations.verl.config import agent_loop_config_path, main

    assert main(["--write", str(tmp_path / "shared")]) == 0
    copy = tmp_path / "shared" / "agentenvs_agent_loop.yaml"
    assert copy.read_text() == agent_loop_config_path().read_text()


def test_doc_command_composes_and_instantiates_our_agent_loop(reply_model):
    import hydra
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.trainer.main_ppo import validate_config
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.import_utils import resolve_config_path

    from agentenvs.integrations.verl.agent_loop import AgentenvsAgentLoop
    from agentenvs.integrations.verl.dataset import dataset_rows

    overrides = readme_verl_overrides()
    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        config = compose(config_name="ppo_trainer", overrides=overrides)
    validate_config(
        config=config,
        use_reference_policy=need_reference_policy(config),
        use_critic=need_critic(config),
    )
    assert config.algorithm.adv_estimator in ("ptgpo", "gigpo")
    hook = config.ray_kwargs.ray_init.runtime_env.worker_process_setup_hook
    assert hook == "agentenvs.integrations.verl.install"

    # what AgentLoopWorker does with the config: load the file, register its loops by name,
    # instantiate the default one with hydra
    agent = config.actor_rollout_ref.rollout.agent
    loops = OmegaConf.load(resolve_config_path(agent.agent_loop_config_path))
    registry = {c.name: c for c in loops}
    tokenizer = AutoTokenizer.from_pretrained(reply_model)
    model = AutoModelForCausalLM.from_pretrained(reply_model).eval()
    server = TransformersServer(model, tokenizer, seed=0)
    loop = hydra.utils.instantiate(
        config=registry[agent.default_agent_loop],
        trainer_config=DictConfigWrap(config=config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type="qwen3",
        dataset_cls=None,
        data_config=DictConfigWrap(config.data),
    )
    assert isinstance(loop, AgentenvsAgentLoop)

    row = next(
        r
        for r in dataset_rows("Sokoban-v0", "train", limit=16, protocol=None)
        if r["extra_info"]["task_id"] == TASK
    )
    out = loop.loop.run_until_complete(loop.run({"temperature": 1.0, "max_tokens": 16}, **row))
    assert out.reward_score > 10  # "right" solves the task in one move
    assert len(out.response_ids) <= config.actor_rollout_ref.rollout.response_length
