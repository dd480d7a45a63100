"""verl: our agent loop plays an episode through verl's AgentLoopBase machinery (its
continuous-token builder, AgentLoopOutput) against a real generation backend on CPU.

verl's own server (``LLMServerClient`` over vLLM / SGLang replicas on Ray) needs a GPU build of
its engine; :class:`TransformersServer` serves the same ``generate(request_id, prompt_ids=...,
sampling_params=...) -> TokenOutput`` interface from a transformers model on CPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("verl")

TASK = "seed/15"  # conftest.TASK: "right" solves it in one move

sys.path.insert(0, str(Path(__file__).parent))
from verl_helpers import TransformersServer, make_agent_loop  # noqa: E402


@pytest.mark.parametrize(
    ("seed", "response_length", "turns"),
    [
        (0, 256, 1),  # samples "right": solved in one move (reward 10.9)
        (1, 256, 1),  # samples "left" (-0.1); the next observation overruns the budget
        (1, 4096, 3),  # three replies, the observations between them masked out
    ],
)
def test_agent_loop_plays_one_episode(reply_model, seed, response_length, turns):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentenvs.agents.episode import TextEpisode
    from agentenvs.integrations.verl.dataset import dataset_rows

    tokenizer = AutoTokenizer.from_pretrained(reply_model)
    model = AutoModelForCausalLM.from_pretrained(reply_model).eval()
    server = TransformersServer(model, tokenizer, seed=seed)
    loop = make_agent_loop(tokenizer, server, response_length=response_length)
    row = next(
        r
        for r in dataset_rows("Sokoban-v0", "train", limit=16, protocol=None)
        if r["extra_info"]["task_id"] == TASK
    )
    out = loop.loop.run_until_complete(loop.run({"temperature": 1.0, "max_tokens": 16}, **row))

    extra = out.extra_fields
    spans = extra["agentenvs_turn_spans"]
    assert len(spans) == server.calls == turns
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs)
    # generated tokens carry mask 1, the observation turns between them 0
    covered = set()
    replies = []
    for start, end in spans:
        assert all(m == 1 for m in out.response_mask[start:end])
        covered.update(range(start, end))
        replies.append(tokenizer.decode(out.response_ids[start:end], skip_special_tokens=True))
    assert all(m == 0 for k, m in enumerate(out.response_mask) if k not in covered)
    if turns > 1:
        assert out.response_mask[spans[0][1]] == 0  # an observation follows the first reply
    # the same replies played directly give the same steps and episode reward
    ref = TextEpisode("Sokoban-v0", max_turns=3, protocol=None)
    ref.start(TASK)
    for reply in replies:
        ref.reply(reply)
    assert out.reward_score == pytest.approx(ref.reward)
    assert extra["agentenvs_step_rewards"] == [s.reward for s in ref.steps]
    assert extra["agentenvs_actions"] == [s.action for s in ref.steps]
    assert extra["agentenvs_anchors"] == [s.anchor for s in ref.steps]
    assert extra["agentenvs_task_id"] == TASK
    # verl's own conversion: the reward lands on the last response token as rm_scores
    as_dict = out.as_dict()
    assert as_dict["rm_scores"][-1].item() == pytest.approx(ref.reward)
    assert as_dict["response_mask"].tolist() == out.response_mask


def test_agent_loop_stops_at_the_response_budget(reply_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentenvs.integrations.verl.dataset import dataset_rows

    tokenizer = AutoTokenizer.from_pretrained(reply_model)
    model = AutoModelForCausalLM.from_pretrained(reply_model).eval()
    loop = make_agent_loop(tokenizer, TransformersServer(model, tokenizer), response_length=3)
    row = dataset_rows("Sokoban-v0", "train", limit=1, protocol=None)[0]
    out = loop.loop.run_until_complete(loop.run({"temperature": 1.0, "max_tokens": 16}, **row))
    assert len(out.response_ids) == len(out.response_mask) <= 3
    assert out.extra_fields["agentenvs_turn_spans"] == [[0, 3]]


def test_agent_loop_needs_the_dataset_row(reply_model):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(reply_model)
    loop = make_agent_loop(tokenizer, server=None)
    with pytest.raises(ValueError, match="extra_info"):
        loop.loop.run_until_complete(loop.run({}, raw_prompt=[]))


def test_agent_loop_outputs_feed_ptgpo_through_verls_compute_advantage(reply_model):
    """Four episodes of one task, batched the way verl's AgentLoopWorker._postprocess batches
    them (right-padded responses, extra_fields as object arrays), then verl's compute_advantage
    with adv_estimator=ptgpo: every turn's tokens carry our PTGPO advantage of that step."""
    import numpy as np
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl import DataProto
    from verl.trainer.ppo import ray_trainer

    from agentenvs.integrations.verl import install
    from agentenvs.integrations.verl.dataset import dataset_rows
    from agentenvs.integrations.verl.estimators import STEP_KEYS
    from agentenvs.train.advantages import AdvantageBatch, get_advantage_estimator

    tokenizer = AutoTokenizer.from_pretrained(reply_model)
    model = AutoModelForCausalLM.from_pretrained(reply_model).eval()
    row = dataset_rows("Sokoban-v0", "train", limit=16, protocol=None)[15]
    outs = []
    for seed in range(4):
        loop = make_agent_loop(tokenizer, TransformersServer(model, tokenizer, seed=seed), 1024, 2)
        outs.append(loop.loop.run_until_complete(loop.run({"temperature": 1.0}, **row)))
    width = 1024
    mask = torch.zeros(len(outs), width, dtype=torch.int64)
    scores = torch.zeros(len(outs), width)
    for i, out in enumerate(outs):
        mask[i, : len(out.response_mask)] = torch.tensor(out.response_mask)
        scores[i, len(out.response_mask) - 1] = out.reward_score
    non_tensor = {"uid": np.array(["task"] * len(outs), dtype=object)}
    for key in STEP_KEYS:
        non_tensor[key] = np.empty(len(outs), dtype=object)
        non_tensor[key][:] = [out.extra_fields[key] for out in outs]
    data = DataProto.from_dict(
        tensors={"response_mask": mask, "token_level_rewards": scores}, non_tensors=non_tensor
    )
    install()
    result = ray_trainer.compute_advantage(data, adv_estimator="ptgpo", gamma=1.0)

    steps = [
        [(a, b, r) for a, b, r in zip(*(o.extra_fields[k] for k in STEP_KEYS[1:]), strict=True)]
        for o in outs
    ]
    est = get_advantage_estimator("ptgpo")
    ours = est(AdvantageBatch.from_groups([steps]), est.make_config(gamma=1.0))
    assert len({o.reward_score for o in outs}) > 1  # the episodes differ, so advantages do
    k = 0
    for i, out in enumerate(outs):
        for start, end in out.extra_fields["agentenvs_turn_spans"]:
            span = result.batch["advantages"][i, start:end]
            assert torch.equal(span, ours.step_advantages[k].expand(end - start))
            k += 1
    assert torch.all(result.batch["advantages"][mask == 0] == 0)
    assert result.batch["advantages"].abs().sum() > 0


def test_agent_loop_config_entry_resolves_to_our_class():
    """The agent-loop config file of docs/integrations.md names a class hydra can import."""
    from hydra.utils import get_class
    from omegaconf import OmegaConf

    from agentenvs.integrations.verl.agent_loop import AgentenvsAgentLoop

    (entry,) = OmegaConf.create(AGENT_LOOP_YAML)
    assert entry.name == "agentenvs_agent"
    assert get_class(entry._target_) is AgentenvsAgentLoop


AGENT_LOOP_YAML = """
- name: agentenvs_agent
  _target_: agentenvs.integrations.verl.agent_loop.AgentenvsAgentLoop
"""


def test_agent_loop_plays_the_rows_protocol(reply_model):
    """A row of the dataset command's default protocol (Sokoban: ``ptgpo``): the loop plays it
    as TextEpisode does under that protocol (verl-agent's projection: the tiny model's replies
    carry no ``<think>`` tags, so they are projected and stepped) and hands verl the penalty
    keys: ``agentenvs_format_valid`` per turn and the protocol's penalty."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentenvs.agents.episode import TextEpisode
    from agentenvs.integrations.verl.dataset import dataset_rows

    tokenizer = AutoTokenizer.from_pretrained(reply_model)
    model = AutoModelForCausalLM.from_pretrained(reply_model).eval()
    loop = make_agent_loop(tokenizer, TransformersServer(model, tokenizer, seed=0), 4096, 2)
    row = next(
        r
        for r in dataset_rows("Sokoban-v0", "train", limit=16)
        if r["extra_info"]["task_id"] == TASK
    )
    assert row["extra_info"]["protocol"] == "ptgpo"
    out = loop.loop.run_until_complete(loop.run({"temperature": 1.0, "max_tokens": 16}, **row))
    extra = out.extra_fields
    replies = [
        tokenizer.decode(out.response_ids[a:b], skip_special_tokens=True)
        for a, b in extra["agentenvs_turn_spans"]
    ]
    ref = TextEpisode("Sokoban-v0", max_turns=2, protocol="ptgpo")
    ref.start(TASK)
    for reply in replies:
        ref.reply(reply)
    assert extra["agentenvs_protocol"] == "ptgpo"
    assert extra["agentenvs_invalid_penalty"] == pytest.approx(0.1)
    assert extra["agentenvs_actions"] == [s.action for s in ref.steps]
    assert extra["agentenvs_step_rewards"] == [s.reward for s in ref.steps]
    assert extra["agentenvs_format_valid"] == [s.format_valid for s in ref.steps]
    assert replies and not any(extra["agentenvs_format_valid"])  # no <think>: all projected
    assert out.reward_score == pytest.approx(ref.reward)
