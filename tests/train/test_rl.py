"""The RL loop end to end with a small TextCraft policy: each algorithm, resume, NaN, env errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from agentenvs.agents.envworkers import EnvWorkerError
from agentenvs.train.config import ConfigError, load_config
from agentenvs.train.rl import RLConfig, RLTrainer
from agentenvs.train.rl.config import RolloutSettings
from agentenvs.train.runtime import NonFiniteLossError, latest_checkpoint

transformers = pytest.importorskip("transformers")

ALGOS = ("grpo", "dapo", "grpo-mis", "gigpo", "ptgpo", "prefix-grpo")


def rl_config(fx, out: Path, algo: str, **overrides) -> RLConfig:
    settings = {
        "algo": algo,
        "model": fx.sft_model,
        "out_dir": out,
        "iterations": 2,
        "prompts_per_iteration": 2,
        "samples_per_prompt": 4,
        "rollout.max_turns": 3,
        "rollout.max_new_tokens": 24,
        "optim.lr": 1e-3,
        "micro_batch_size": 8,
        "save_every": 1,
        "tensorboard": "true",
        "data.tasks": "agentgym/0,agentgym/1,agentgym/3",
    }
    if algo == "prefix-grpo":
        settings.pop("data.tasks")
        settings["data.queries"] = fx.samples
        settings["prompts_per_iteration"] = 8  # every query (4 raw, 4 with a prefix) each time
    settings.update(overrides)
    return load_config(RLConfig, None, [f"{k}={v}" for k, v in settings.items()])


def state_dict(path: Path) -> dict[str, torch.Tensor]:
    return transformers.AutoModelForCausalLM.from_pretrained(path).state_dict()


def metric_lines(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("algo", ALGOS)
def test_two_iterations(rl_fixture, tmp_path, algo):
    out = tmp_path / algo
    final = RLTrainer(rl_config(rl_fixture, out, algo), progress=False).train()
    assert final.name == "step-0000002"
    lines = metric_lines(out)
    assert [m["step"] for m in lines] == [1, 2]
    for m in lines:
        for key in (
            "rollout/reward_mean",
            "rollout/success_rate",
            "rollout/turns_mean",
            "rollout/response_tokens_per_turn",
            "actor/pg_loss",
            "actor/clipfrac",
            "actor/kl",
            "actor/grad_norm",
            "actor/entropy",
            "actor/kl_to_initial",
            "actor/entropy_sampled",
            "perf/train_tokens_per_s",
            "time_share/rollout",
            "time_share/update",
            "time_share/advantage",
            "rollout/env_worker_restarts",
        ):
            assert key in m and math.isfinite(m[key]), key
        assert m["rollout/error_episodes"] == 0 and m["rollout/env_worker_restarts"] == 0
    assert any(m["adv/abs_mean"] > 0 for m in lines), "no reward variance: nothing to learn"
    # the first iteration is played by the initial policy itself; an update moves it away
    assert abs(lines[0]["actor/kl_to_initial"]) < 1e-5
    if lines[0]["actor/optimizer_steps"] > 0:
        assert lines[1]["actor/kl_to_initial"] > lines[0]["actor/kl_to_initial"]
    protocol = json.loads((out / "protocol.json").read_text())
    estimator = rl_config(rl_fixture, out, algo).spec.estimator
    assert protocol["advantage"]["estimator"] == estimator
    if algo == "ptgpo":
        assert protocol["advantage"]["settings"]["root_spread"] == "paper"
    if algo == "prefix-grpo":
        assert all(m["prefix/token_count"] > 0 for m in lines)
    if algo == "dapo":
        assert all(m["dapo/kept_group_frac"] <= 1 for m in lines)
    if algo == "grpo-mis":
        assert "rollout/rejected_seq_frac" in lines[0]
    if algo == "ptgpo":
        assert lines[0]["adv/tree_nodes"] > 0
    before, after = state_dict(rl_fixture.sft_model), state_dict(final / "model")
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed, "the update left every weight unchanged"
    assert all(torch.isfinite(v).all() for v in after.values())
    assert list((out / "tensorboard").iterdir())


def test_the_oracle_on_an_environment_without_step_credit_is_a_clear_error(rl_fixture, tmp_path):
    trainer = RLTrainer(rl_config(rl_fixture, tmp_path / "oracle", "oracle"), progress=False)
    with pytest.raises(ValueError, match=r"step 0 \(action .*\) has no info\['step_credit'\]"):
        trainer.train()


def test_resume_equals_an_uninterrupted_run(rl_fixture, tmp_path):
    full = RLTrainer(rl_config(rl_fixture, tmp_path / "full", "ptgpo"), progress=False).train()
    part_cfg = rl_config(rl_fixture, tmp_path / "part", "ptgpo")
    stopped = RLTrainer(part_cfg, progress=False).train(stop_at=1)
    assert stopped.name == "step-0000001"
    resumed = RLTrainer(part_cfg, progress=False).train(resume=True)
    assert resumed.name == full.name == "step-0000002"
    a, b = state_dict(full / "model"), state_dict(resumed / "model")
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-6)
    left, right = metric_lines(tmp_path / "full"), metric_lines(tmp_path / "part")
    assert [m["step"] for m in right] == [1, 2]
    for key in ("rollout/reward_mean", "rollout/generated_tokens", "actor/pg_loss", "adv/mean"):
        assert [m[key] for m in left] == pytest.approx([m[key] for m in right], abs=1e-6)


def test_trainer_log_probs_match_the_rollout_and_the_sidecars(rl_fixture):
    """With the policy equal to the SFT model that wrote the sidecars, the trainer's reply
    log-probs equal the rollout engine's and its prefix log-probs the sidecar's old ones, in a
    left-padded batch of prompts of different lengths (prefix ratio 1, prefix KL 0)."""
    from agentenvs.agents.backends.transformers_backend import TransformersPolicy
    from agentenvs.agents.policy import SamplingParams
    from agentenvs.agents.rollout import RolloutConfig
    from agentenvs.train.rl import build_rows, collate, collect_episodes, load_query_starts
    from agentenvs.train.rl.update import token_log_probs

    model = transformers.AutoModelForCausalLM.from_pretrained(rl_fixture.sft_model)
    tokenizer = transformers.AutoTokenizer.from_pretrained(rl_fixture.sft_model)
    starts, _ = load_query_starts(rl_fixture.samples, "TextCraft-v0")
    assert any(not s.is_raw for s in starts) and any(s.is_raw for s in starts)
    config = RolloutConfig(max_turns=3, sampling=SamplingParams(max_new_tokens=24, seed=3))
    policy = TransformersPolicy.from_model(model, tokenizer)
    episodes = collect_episodes(policy, "TextCraft-v0", starts, 2, config)
    rows, _ = build_rows(episodes, tokenizer)
    with_prefix = [r for r in rows if r.prefix is not None]
    assert len(with_prefix) == 2 * sum(not s.is_raw for s in starts)
    assert len({len(r.prompt_ids) for r in rows}) > 1  # really left-padded
    batch = collate(rows, tokenizer.pad_token_id, torch.device("cpu"))
    with torch.no_grad():
        reply, prefix_lp, _ = token_log_probs(model, batch)
    mask = batch["response_mask"]
    torch.testing.assert_close(reply * mask, batch["rollout_log_probs"] * mask, atol=1e-4, rtol=0)
    pre = batch["prefix"]
    assert pre is not None and float(pre.mask.sum()) > 0
    torch.testing.assert_close(
        prefix_lp * pre.mask, pre.old_log_probs * pre.mask, atol=1e-4, rtol=0
    )


def test_query_starts_in_a_process_pool_equal_in_process(rl_fixture):
    """Query episodes whose prefixes are replayed in worker processes are the in-process ones,
    token for token; each one's prefix turns count against the turn budget."""
    from agentenvs.agents.backends.transformers_backend import TransformersPolicy
    from agentenvs.agents.policy import SamplingParams
    from agentenvs.agents.rollout import RolloutConfig, make_rollout_pool
    from agentenvs.train.rl import collect_episodes, load_query_starts

    model = transformers.AutoModelForCausalLM.from_pretrained(rl_fixture.sft_model)
    tokenizer = transformers.AutoTokenizer.from_pretrained(rl_fixture.sft_model)
    starts, _ = load_query_starts(rl_fixture.samples, "TextCraft-v0")
    config = RolloutConfig(max_turns=3, sampling=SamplingParams(max_new_tokens=24, seed=7))
    played = []
    for workers in ("inprocess", "process:2"):
        policy = TransformersPolicy.from_model(model, tokenizer)
        pool_config = RolloutConfig(max_turns=3, workers=workers)
        with make_rollout_pool("TextCraft-v0", pool_config) as pool:
            played.append(
                collect_episodes(policy, "TextCraft-v0", starts, 2, config, env_pool=pool)
            )
    here, there = played
    assert [e.trajectory.to_dict() for e in here] == [e.trajectory.to_dict() for e in there]
    assert all(e.error is None for e in here) and any(not e.start.is_raw for e in here)
    for ep in here:
        used = ep.start.prefix_turns + ep.trajectory.turns
        assert used <= 3 and (used == 3) == (ep.trajectory.truncated and not ep.trajectory.won)
        assert ep.trajectory.metadata["prefix_turns"] == ep.start.prefix_turns


class _PoolWatcher(RLTrainer):
    """The real trainer, noting the environment pool (and its workers) of every rollout."""

    def rollout_step(self, iteration):
        self.seen = [*getattr(self, "seen", []), (self.env_pool, self.env_pool.worker_pids())]
        return super().rollout_step(iteration)


def test_one_process_pool_serves_the_whole_run(rl_fixture, tmp_path):
    here = rl_config(rl_fixture, tmp_path / "here", "prefix-grpo")
    pooled = rl_config(
        rl_fixture, tmp_path / "pool", "prefix-grpo", **{"rollout.env_workers": "process:2"}
    )
    RLTrainer(here, progress=False).train()
    trainer = _PoolWatcher(pooled, progress=False)
    trainer.train()
    (pool, pids), again = trainer.seen[0], trainer.seen[1:]
    assert pool.kind == "process" and again == [(pool, pids)] and trainer.env_pool is None
    with pytest.raises(EnvWorkerError, match="closed"):  # train() closed it
        pool.reset([(0, "agentgym/0")])
    left, right = metric_lines(tmp_path / "here"), metric_lines(tmp_path / "pool")
    for key in ("rollout/reward_mean", "rollout/generated_tokens", "actor/pg_loss"):
        assert [m[key] for m in left] == pytest.approx([m[key] for m in right], abs=1e-6)
    assert [m["rollout/env_worker_restarts"] for m in right] == [0, 0]


def test_micro_batches_give_the_same_update(rl_fixture):
    """Gradient accumulation divides by the whole mini-batch's token counts: micro-batches of
    one row and one micro-batch of every row give the same gradient (prefix branch included).
    The loop's parts are called one by one here, as a distributed trainer would."""
    import copy

    from agentenvs.agents.backends.transformers_backend import TransformersPolicy
    from agentenvs.agents.policy import SamplingParams
    from agentenvs.agents.rollout import RolloutConfig
    from agentenvs.train.losses import PolicyLossConfig
    from agentenvs.train.prefix_loss import PrefixConfig
    from agentenvs.train.rl import (
        build_rows,
        collect_episodes,
        compute_advantages,
        load_query_starts,
    )
    from agentenvs.train.rl.update import (
        UpdateSettings,
        apply_correction,
        ppo_update,
        recompute_old_log_probs,
    )
    from agentenvs.train.runtime import make_scheduler

    model = transformers.AutoModelForCausalLM.from_pretrained(rl_fixture.sft_model)
    tokenizer = transformers.AutoTokenizer.from_pretrained(rl_fixture.sft_model)
    starts, _ = load_query_starts(rl_fixture.samples, "TextCraft-v0")
    config = RolloutConfig(max_turns=3, sampling=SamplingParams(max_new_tokens=24, seed=5))
    policy = TransformersPolicy.from_model(model, tokenizer)
    rows, _ = build_rows(collect_episodes(policy, "TextCraft-v0", starts, 4, config), tokenizer)
    compute_advantages(rows, "grpo", {})
    assert any(float(r.advantages.abs().sum()) > 0 for r in rows)
    assert any(r.prefix is not None for r in rows)
    device = torch.device("cpu")
    recompute_old_log_probs(
        model,
        rows,
        micro_batch_size=16,
        pad_id=tokenizer.pad_token_id,
        device=device,
        precision="fp32",
    )
    apply_correction(rows, None)
    deltas = []
    for micro in (1, len(rows)):
        copy_ = copy.deepcopy(model)
        before = [p.detach().clone() for p in copy_.parameters()]
        optimizer = torch.optim.SGD(copy_.parameters(), lr=1.0)
        prefix = PrefixConfig(advantage_mode="constant")  # a prefix signal in every group
        settings = UpdateSettings(
            PolicyLossConfig(),
            prefix,
            None,
            1,
            1,
            micro,
            max_grad_norm=1e9,
            precision="fp32",
            seed=0,
            loss="prefix_grpo",
        )
        ppo_update(
            copy_,
            optimizer,
            make_scheduler(optimizer, 1, 0.0, "constant"),
            rows,
            settings,
            iteration=0,
            pad_id=tokenizer.pad_token_id,
            device=device,
            last_checkpoint=None,
        )
        deltas.append(
            torch.cat(
                [
                    (a - b.detach()).flatten()
                    for a, b in zip(before, copy_.parameters(), strict=True)
                ]
            )
        )
    assert float(deltas[0].detach().abs().max()) > 1e-4
    torch.testing.assert_close(deltas[0], deltas[1], atol=1e-6, rtol=1e-4)


class _PoisonedAdvantages(RLTrainer):
    """The real trainer whose second iteration gets a NaN advantage (a broken estimator)."""

    def advantage_step(self, rows):
        metrics = super().advantage_step(rows)
        if self.state.step == 1:
            rows[0].advantages[0] = float("nan")
        return metrics


def test_nan_loss_stops_with_the_last_good_checkpoint(rl_fixture, tmp_path):
    out = tmp_path / "nan"
    trainer = _PoisonedAdvantages(rl_config(rl_fixture, out, "grpo"), progress=False)
    with pytest.raises(NonFiniteLossError, match="step-0000001"):
        trainer.train()
    good = latest_checkpoint(out)
    assert good is not None and good.name == "step-0000001"
    weights = state_dict(good / "model")
    assert all(torch.isfinite(v).all() for v in weights.values())
    live = trainer.model.state_dict()  # the failed step was never applied
    for key, value in weights.items():
        torch.testing.assert_close(live[key].cpu(), value, rtol=0, atol=0)


def test_an_environment_error_marks_the_episode_and_the_run_goes_on(rl_fixture, tmp_path):
    """A task that cannot reset fails its episodes on every retry: its group is left out and
    counted, and below rollout.max_failed_fraction the run trains on the others."""
    out = tmp_path / "err"
    cfg = rl_config(
        rl_fixture,
        out,
        "grpo",
        iterations=1,
        **{
            "data.tasks": "agentgym/0,agentgym/1,no-such/task",
            "prompts_per_iteration": 3,
            "rollout.max_failed_fraction": 0.5,
        },
    )
    RLTrainer(cfg, progress=False).train()
    (m,) = metric_lines(out)
    assert m["rollout/error_episodes"] == m["rollout/failed_episodes"] == 4  # the bad task's
    assert m["rollout/dropped_groups"] == 1 and m["rollout/groups_trained"] == 2
    assert m["rollout/episodes"] == 12 and m["batch/rows"] > 0 and math.isfinite(m["actor/pg_loss"])


def test_rl_command_line(rl_fixture, tmp_path):
    from agentenvs.cli import main

    out = tmp_path / "cli"
    argv = [
        "train",
        "rl",
        "--algo",
        "grpo",
        "--model",
        str(rl_fixture.sft_model),
        "--out",
        str(out),
        "--no-progress",
        "iterations=1",
        "prompts_per_iteration=1",
        "samples_per_prompt=2",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=16",
        "data.tasks=agentgym/0",
        "tensorboard=false",
    ]
    assert main(argv) == 0
    assert (out / "checkpoints" / "step-0000001" / "model" / "config.json").exists()
    assert main(["train", "rl", "--algo", "grpo", "lrr=1"]) == 2


def test_config_presets_and_errors():
    dapo = load_config(RLConfig, None, ["algo=dapo"])
    assert dapo.policy_loss_config().clip_high == 0.28 and dapo.dynamic_sampling_enabled
    mis = load_config(RLConfig, None, ["algo=grpo-mis"]).correction_config()
    assert (mis.mode, mis.level) == ("mis", "sequence")
    gigpo = load_config(RLConfig, None, ["algo=gigpo", "advantage.gamma=0.9"])
    assert gigpo.estimator_settings() == {"gamma": 0.9, "step_weight": 1.0, "normalize": "mean"}
    assert gigpo.invalid_penalty == 0.0  # TextCraft: prefix-grpo's protocol has no penalty
    on_sokoban = load_config(RLConfig, None, ["algo=gigpo", "data.env_id=Sokoban-v0"])
    assert (on_sokoban.protocol, on_sokoban.invalid_penalty) == ("ptgpo", 0.1)
    assert (on_sokoban.rollout.max_turns, on_sokoban.rollout.history) == (15, 2)
    agentgym = load_config(
        RLConfig,
        None,
        ["data.env_id=ALFWorld-v0", "protocol=prefix-grpo", "rollout.temperature=0.5"],
    )
    r = agentgym.rollout
    assert (r.max_turns, r.top_p, r.max_new_tokens, r.history) == (20, 0.95, 384, None)
    assert r.temperature == 0.5 and agentgym.protocol_settings()["temperature"] == 0.5
    assert agentgym.protocol_settings()["env_kwargs"] == {"game_version": "agentgym"}
    with pytest.raises(ConfigError, match="no setup for TextCraft-v0"):
        load_config(RLConfig, None, ["protocol=ptgpo"])
    grpo = load_config(RLConfig, None, [])
    assert (grpo.optim.lr, grpo.samples_per_prompt, grpo.prompts_per_iteration) == (5e-6, 8, 16)
    assert grpo.policy_loss_config().dual_clip == 3.0 and grpo.correction_config() is None
    with pytest.raises(ConfigError, match="Did you mean 'ptgpo'"):
        load_config(RLConfig, None, ["algo=ptgp"])
    with pytest.raises(ConfigError, match="tau_expand"):
        load_config(RLConfig, None, ["algo=grpo", "advantage.tau_expand=3"])
    with pytest.raises(ConfigError, match="data.queries"):
        load_config(RLConfig, None, ["algo=prefix-grpo"])
    with pytest.raises(ConfigError, match="prefix-grpo only"):
        load_config(RLConfig, None, ["algo=grpo", "prefix.weight=0.5"])
    assert grpo.rollout.env_workers == "inprocess"
    assert load_config(RLConfig, None, ["rollout.env_workers=2"]).rollout.env_workers == "2"
    counted = RolloutSettings(env_workers=0)  # type: ignore[arg-type]
    assert counted.env_workers == "0"  # a worker count (from YAML, or Python) is accepted
    with pytest.raises(ConfigError, match="Valid forms: inprocess"):
        load_config(RLConfig, None, ["rollout.env_workers=threads:2"])
    with pytest.raises(ConfigError, match="env_workers"):
        load_config(RLConfig, None, ["rollout.workers=2"])


def test_a_query_whose_replay_fails_is_a_marked_episode(rl_fixture):
    """A cut state the environment no longer reaches ends that query's episodes with an error;
    the other queries' episodes are played."""
    import dataclasses

    from agentenvs.agents.backends.transformers_backend import TransformersPolicy
    from agentenvs.agents.policy import SamplingParams
    from agentenvs.agents.rollout import RolloutConfig
    from agentenvs.train.rl import collect_episodes, load_query_starts

    starts, _ = load_query_starts(rl_fixture.samples, "TextCraft-v0", ["entropy-change"])
    broken = dataclasses.replace(starts[0], prefix_actions=("get 3 stone",))
    model = transformers.AutoModelForCausalLM.from_pretrained(rl_fixture.sft_model)
    tokenizer = transformers.AutoTokenizer.from_pretrained(rl_fixture.sft_model)
    policy = TransformersPolicy.from_model(model, tokenizer)
    config = RolloutConfig(max_turns=3, sampling=SamplingParams(max_new_tokens=24, seed=0))
    episodes = collect_episodes(policy, "TextCraft-v0", [broken, starts[1]], 2, config)
    assert [e.error is not None for e in episodes] == [True, True, False, False]
    assert "replay failed" in episodes[0].error and episodes[2].trajectory.steps


def test_start_stream_order_depends_only_on_seed_and_position():
    from agentenvs.train.rl import StartStream, TaskStart

    starts = [TaskStart(f"t{i}") for i in range(5)]
    whole = StartStream(starts, seed=3).take(12)
    first = StartStream(starts, seed=3)
    head = first.take(7)
    tail = StartStream(starts, seed=3, position=first.position).take(5)
    assert head + tail == whole
    assert sorted(s.task_id for s in whole[:5]) == [s.task_id for s in starts]  # each once a pass
    assert StartStream(starts, seed=4).take(12) != whole


def test_check_model_tokenizer_keeps_the_system_prompt_as_one_token(rl_fixture):
    from agentenvs.agents.prompts import system_prompt
    from agentenvs.replay.tokens import render_chat

    tokenizer = transformers.AutoTokenizer.from_pretrained(rl_fixture.sft_model)
    system = system_prompt("TextCraft-v0")
    assert len(tokenizer(system, add_special_tokens=False)["input_ids"]) == 1
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": "Goal: craft stick."},
        {"role": "assistant", "content": "Think: I take the next step.\nAction: [[ inventory ]]"},
    ]
    chat = render_chat(tokenizer, messages)
    assert tokenizer.decode(chat.token_ids) == chat.text
    (span,) = chat.spans
    assert tokenizer.decode(chat.token_ids[span.start : span.end - 1]) == messages[2]["content"]
