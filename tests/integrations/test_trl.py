"""TRL: agentenvs environments through GRPOTrainer's own environment_factory interface."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")

from agentenvs.integrations.trl import (  # noqa: E402
    EPISODE_OVER,
    TOOL_NOTE,
    environment_factory,
    train_dataset,
)

TASK = "seed/15"  # the task the tool model was taught on (conftest.TASK)
ENV_IDS = ("TextCraft-v0", "BabyAI-Text-v0", "Sokoban-v0", "WebShop-v0", "ALFWorld-v0")


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_every_environment_plays_through_the_trl_interface(env_id):
    from agentenvs.agents.episode import make_env
    from agentenvs.agents.prompts import Conversation, system_prompt
    from agentenvs.agents.protocol_rules import ProtocolRules

    rules = ProtocolRules.of(env_id)  # the environment's default protocol, as TRL plays it
    data = train_dataset(env_id, limit=2)
    assert data.column_names == ["prompt", "task_id"]
    row = data[0]
    system = system_prompt(env_id, rules.prompt_name)
    assert row["prompt"][:-1] == ([{"role": "system", "content": system}] if system else [])
    env = environment_factory(env_id, max_turns=2)()
    first = env.reset(**row)  # TRL passes every column of the row
    assert first.endswith(TOOL_NOTE)
    # the same task played directly (the protocol's keywords) gives the same observations
    direct, _ = make_env(env_id, 2, **rules.env_kwargs())
    observation, info = direct.reset(options={"task_id": row["task_id"]})
    ours = Conversation(env_id, rules.history("default"), rules.prompt_name)
    ours.start(observation, info)
    assert first == f"{ours.prompt()[-1]['content']}\n\n{TOOL_NOTE}"  # our prompt, as rendered
    action = (direct.admissible_actions() or ["look"])[0]
    expected, reward, *_ = direct.step(action)
    assert env.act(rules.format_reply("", action)).startswith(expected)
    assert env.get_reward() == pytest.approx(reward)
    env.act("a reply with two\nlines and no action")  # the protocol's handling, a turn used
    last = env._episode.steps[-1]
    assert last.valid is False and last.format_valid is False
    assert last.projected == (rules.unparseable == "project")
    assert env.act(action) == EPISODE_OVER  # max_turns=2 replies
    # what TRL calls once the rollout ends (a projected reply was stepped: its reward counts)
    assert env.get_reward() == pytest.approx(reward + last.reward)
    assert [e.turns for e in env.episodes] == [2]
    assert env.episodes[0].task_id == row["task_id"]


def test_grpo_trainer_trains_on_episode_rewards(tool_model, tmp_path):
    """Two GRPO steps of TRL's real trainer on CPU: the rewards TRL logs are the episode
    rewards of the environments it played, and the weights moved."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    model = AutoModelForCausalLM.from_pretrained(tool_model)
    tokenizer = AutoTokenizer.from_pretrained(tool_model)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    env_class = environment_factory("Sokoban-v0", max_turns=3, protocol=None)
    made = []

    def factory():
        made.append(env_class())
        return made[-1]

    data = train_dataset("Sokoban-v0", limit=16, protocol=None)
    data = data.filter(lambda r: r["task_id"] == TASK)
    data = data.select([0] * 8)
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=8,
        num_generations=8,
        max_steps=2,
        max_completion_length=48,
        max_tool_calling_iterations=3,
        learning_rate=5e-3,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=0,
        shuffle_dataset=False,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=args,
        train_dataset=data,
        environment_factory=factory,
    )
    trainer.train()

    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logs) == 2
    # each rollout got one pooled environment; environment k played episode `step` of step k
    played = [e for e in made if e.episodes]
    assert len(played) == 8
    for step, log in enumerate(logs):
        episodes = [e.episodes[step] for e in played]
        mean = sum(ep.reward for ep in episodes) / len(episodes)
        assert log["rewards/Sokoban_v0/mean"] == pytest.approx(mean, abs=1e-6)
        assert log["reward"] == pytest.approx(mean, abs=1e-6)
        assert all(ep.task_id == TASK for ep in episodes)
        assert any(ep.turns >= 1 for ep in episodes)  # the model acted through the tool
    moved = [k for k, v in trainer.model.named_parameters() if not torch.equal(v, before[k])]
    assert moved, "no weight changed in two GRPO steps"
