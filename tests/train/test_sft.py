"""SFT: assistant-only labels, the loss falls, checkpoints reload and resume exactly."""

from __future__ import annotations

import json

import pytest
import torch

from agentenvs.agents.tiny_model import build_tiny_model
from agentenvs.agents.trajectory import StepRecord, Trajectory, write_trajectories
from agentenvs.train.config import ConfigError, load_config
from agentenvs.train.sft import (
    IGNORE_INDEX,
    SFTConfig,
    _collate,
    _token_loss_sum,
    build_examples,
    train_sft,
    training_conversations,
)

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def expert_trajectory(task_id: str) -> Trajectory:
    from agentenvs.textcraft import TextCraftEnv
    from agentenvs.textcraft.expert import TextCraftExpert

    env, expert = TextCraftEnv(), TextCraftExpert()
    obs, _ = env.reset(options={"task_id": task_id})
    messages = [{"role": "system", "content": "Craft the goal."}, {"role": "user", "content": obs}]
    steps = []
    while not env.done:
        decision = expert.act(env)
        reply = f"Think: {decision.thought}\nAction: [[ {decision.action} ]]"
        messages.append({"role": "assistant", "content": reply})
        anchor = env.observation
        obs, reward, *_, info = env.step(decision.action)
        messages.append({"role": "user", "content": obs})
        steps.append(StepRecord(anchor, decision.action, obs, reward, info["valid"]))
    return Trajectory(
        "TextCraft-v0",
        task_id,
        env.family(task_id),
        task_id,
        0,
        "expert",
        messages,
        steps,
        float(env.won),
        env.won,
        env.turn,
        True,
        False,
    )


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "traj.jsonl"
    trajs = [expert_trajectory(f"agentgym/{i}") for i in (0, 1, 2, 3, 140, 141)]
    failed = expert_trajectory("agentgym/4")
    failed.won = False
    write_trajectories(path, trajs + [failed])
    return path


def config(tiny, data_file, out, **overrides) -> SFTConfig:
    base = {
        "model": str(tiny),
        "data": str(data_file),
        "out_dir": str(out),
        "epochs": "4",
        "batch_size": "4",
        "micro_batch_size": "2",
        "lr": "3e-3",
        "tensorboard": "false",
    }
    base.update({k: str(v) for k, v in overrides.items()})
    return load_config(SFTConfig, None, [f"{k}={v}" for k, v in base.items()])


def test_labels_cover_exactly_the_assistant_replies(tiny):
    tok = transformers.AutoTokenizer.from_pretrained(tiny)
    traj = expert_trajectory("agentgym/0")
    (example,) = build_examples([traj], tok, max_length=10_000)
    labelled = [t for t in example.labels if t != IGNORE_INDEX]
    replies = [m["content"] for m in traj.messages if m["role"] == "assistant"]
    expected = []
    for reply in replies:
        expected += tok(reply, add_special_tokens=False)["input_ids"]
        expected.append(tok.convert_tokens_to_ids("<|im_end|>"))
    assert labelled == expected


def test_template_prompt_trains_each_reply_after_its_own_prompt():
    """Sokoban's prompt is one user message per step restating the history: SFT must train each
    reply after that message (what the policy is given), not after the whole conversation."""
    from agentenvs.agents.prompts import prompt_messages
    from agentenvs.agents.registry import make_policy
    from agentenvs.agents.rollout import plan_episodes, run_rollouts
    from agentenvs.registration import env_class

    task = env_class("Sokoban-v0")().task_ids("train")[0]
    (traj,) = run_rollouts(make_policy("expert"), "Sokoban-v0", plan_episodes([task], 1))
    conversations = training_conversations(traj)
    replies = [m for m in traj.messages if m["role"] == "assistant"]
    assert len(conversations) == len(replies) == traj.turns > 1
    for turn, (messages, reply) in enumerate(zip(conversations, replies, strict=True)):
        history = traj.metadata["history"]
        assert messages[:-1] == prompt_messages("Sokoban-v0", traj.messages, turn, history)
        assert messages[-1] == reply and [m["role"] for m in messages] == ["user", "assistant"]
    # a chat-style prompt with the whole history stays one conversation
    chat = expert_trajectory("agentgym/0")
    assert training_conversations(chat) == [chat.messages]


def test_loss_reads_logits_at_label_positions_only(tiny):
    """The summed loss equals the cross-entropy of a full forward's logits."""
    tok = transformers.AutoTokenizer.from_pretrained(tiny)
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny).float()
    examples = build_examples(
        [expert_trajectory(f"agentgym/{i}") for i in (0, 140)], tok, max_length=10_000
    )
    batch = _collate(examples, tok.pad_token_id)
    with torch.no_grad():
        ours = _token_loss_sum(model, batch)
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        full = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.size(-1)),
            batch["labels"][:, 1:].reshape(-1),
            ignore_index=IGNORE_INDEX,
            reduction="sum",
        )
    assert torch.allclose(ours, full, rtol=1e-5)


def test_loss_falls_on_a_repeated_batch(tiny, data_file, tmp_path):
    cfg = config(
        tiny,
        data_file,
        tmp_path / "run",
        epochs=8,
        batch_size=8,
        micro_batch_size=4,
        schedule="constant",
        warmup_ratio=0,
    )
    train_sft(cfg, progress=False)
    losses = [json.loads(line)["train/loss"] for line in (tmp_path / "run/metrics.jsonl").open()]
    assert len(losses) == 8  # 6 won episodes (the failed one is left out): one batch per epoch
    assert losses[-1] < 0.8 * losses[0]
    assert all(later < earlier + 0.05 for earlier, later in zip(losses, losses[1:], strict=False))


def test_checkpoint_reloads_and_resume_equals_uninterrupted(tiny, data_file, tmp_path):
    full = train_sft(config(tiny, data_file, tmp_path / "full"), progress=False)
    # the same run, stopped after 3 steps (mid-epoch), then resumed in a new session
    part = config(tiny, data_file, tmp_path / "part")
    stopped = train_sft(part, progress=False, stop_at=3)
    assert stopped.name == "step-0000003"
    resumed = train_sft(part, resume=True, progress=False)
    assert full.name == resumed.name == "step-0000008"  # 6 examples / 4 per step, 4 epochs
    a = transformers.AutoModelForCausalLM.from_pretrained(full / "model").state_dict()
    b = transformers.AutoModelForCausalLM.from_pretrained(resumed / "model").state_dict()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-6)
    steps = [json.loads(line)["step"] for line in (tmp_path / "part/metrics.jsonl").open()]
    assert steps == list(range(1, 9))


def test_config_errors(tiny, data_file, tmp_path):
    with pytest.raises(ConfigError, match="Did you mean 'lr'"):
        load_config(SFTConfig, None, ["lrr=1"])
    with pytest.raises(ConfigError, match="multiple of micro_batch_size"):
        load_config(SFTConfig, None, ["batch_size=6", "micro_batch_size=4"])
    with pytest.raises(ValueError, match="no usable trajectories"):
        cfg = config(tiny, data_file, tmp_path / "x")
        cfg.data = [str(tmp_path / "empty.jsonl")]
        (tmp_path / "empty.jsonl").write_text("")
        train_sft(cfg, progress=False)
