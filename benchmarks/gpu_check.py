"""The GPU path, checked in one command: eval, RL in bf16 and FSDP2 on NCCL, on one GPU.

    python -m agentenvs.benchmarks.gpu_check --out results/gpu-check            # one CUDA GPU
    python -m agentenvs.benchmarks.gpu_check --dry-run --out /tmp/gpu-check     # CPU, tiny shapes
    python -m agentenvs.benchmarks.gpu_check --out DIR --steps rl_ptgpo,torchrun_fsdp2   # a rerun

Without network or weights, on one GPU and within ``--budget-s`` (default 480 s), it runs these
steps, each under its own time limit (and never past the budget), each failure recorded (step
name, error, traceback tail) without stopping the steps that do not need the failed one:

``models``
    random-init models of SmolLM2-135M's shape (``LlamaForCausalLM``) and Qwen3-1.7B's
    (``Qwen3ForCausalLM``), configs written here from the published ``config.json`` files, with
    the tiny model's tokenizer (:func:`agentenvs.agents.tiny_model.build_tiny_model`; its ~512
    tokens are the low ids of the models' published vocabularies, so every prompt encodes and
    a sampled id above them decodes to nothing), saved in bf16 under ``OUT/models``.
``eval_<shape>``
    ``agentenvs eval`` (:func:`agentenvs.benchmarks.eval.evaluate.evaluate`) on TextCraft with the
    transformers backend on CUDA in bf16: 64 episodes in one batch (8 tasks x 8 samples), turns
    and reply length capped (a random model never stops, so every reply is full length): generated
    tokens per second, episodes per minute (both over the whole call, model load included) and
    peak GPU memory.
``rl_ptgpo``, ``rl_prefix_grpo``
    3 iterations of the native trainer (:class:`agentenvs.train.rl.RLTrainer`, transformers
    rollout engine, fp32 master weights, ``precision=bf16`` autocast) on the Qwen3-1.7B shape;
    Prefix-GRPO's queries are cut, replay-validated and given sidecars from the expert's
    episodes first (:mod:`agentenvs.replay`). Per iteration: seconds in rollout / old-log-prob /
    update, the mean |rollout log-prob - trainer log-prob| per reply token
    (``rollout/trainer_logprob_gap``), and the update's TFLOP/s and MFU. A random model earns no
    reward, so every row has advantage 0 and the trainer would skip its passes: the check turns
    that skip off (``UpdateSettings.skip_zero_advantage=False``) so the passes it times run.
``torchrun_fsdp2``
    ``torchrun --nproc_per_node=1`` of this module's worker: one RL iteration (PTGPO) with the
    policy sharded by FSDP2 (:func:`agentenvs.train.distributed.shard_model`) on an NCCL group.
    :func:`agentenvs.train.distributed.init_distributed` treats a world of one process as no
    group at all (nothing sharded), so the worker joins the group itself and hands the trainer a
    one-rank context that shards (:class:`_OneRankGroup`); ``sharded`` in the result says the
    model was an FSDP module.

Everything goes to ``OUT/gpu_check.json`` (:data:`SCHEMA_VERSION`; fields in docs/gpu-check.md)
with the torch, CUDA, NCCL and transformers versions, and a table is printed. The exit status is
1 when any step failed. ``--dry-run`` runs every step on CPU with small shapes of the same
architectures, a few short episodes and gloo instead of NCCL (about a minute on two cores), so
the script is exercised in ``make test`` between the rare GPU windows.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentenvs.benchmarks.eval.cli import key_value

__all__ = [
    "DRY_RUN_PLAN",
    "GPU_PLAN",
    "H200_BF16_PEAK_TFLOPS",
    "QWEN3_1P7B",
    "SCHEMA_VERSION",
    "SMOLLM2_135M",
    "STEPS",
    "CheckPlan",
    "CheckShape",
    "StepTimeout",
    "main",
    "run_check",
]

SCHEMA_VERSION = 1
H200_BF16_PEAK_TFLOPS = 790.0
"""The MFU denominator (TFLOP/s): the bf16 rate of the lent H200 as issue 38 gives it, which is
what an 8192^3 bf16 matrix product reached there (769-798 TFLOP/s, the device notes), not
NVIDIA's datasheet dense peak of 989 (which :mod:`agentenvs.benchmarks.train_speed` uses):
MFU here is against what the chip delivers. ``--peak-tflops`` sets another; the JSON records
the one used."""
STEPS = (
    "models",
    "eval_smollm2_135m",
    "eval_qwen3_1p7b",
    "rl_ptgpo",
    "rl_prefix_grpo",
    "torchrun_fsdp2",
)
TAIL_CHARS = 4000
"""How much of a traceback (or a subprocess's output) a failed step keeps."""


@dataclass(frozen=True)
class CheckShape:
    """A model's shape and architecture (the attribute names of ``transformers`` configs, so
    :func:`agentenvs.benchmarks.train_speed.update_flops` takes it)."""

    name: str
    architecture: str
    """``llama`` (``LlamaForCausalLM``) or ``qwen3`` (``Qwen3ForCausalLM``)."""
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    rope_theta: float
    rms_norm_eps: float

    def config(self, tokenizer: Any) -> Any:
        """The ``transformers`` config: this shape, tied embeddings, ``tokenizer``'s special
        token ids."""
        from transformers import LlamaConfig, Qwen3Config

        cls = {"llama": LlamaConfig, "qwen3": Qwen3Config}[self.architecture]
        fields = dataclasses.asdict(self)
        del fields["name"], fields["architecture"]
        rope_theta = fields.pop("rope_theta")
        config = cls(
            **fields,
            tie_word_embeddings=True,
            bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
            eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
            pad_token_id=tokenizer.pad_token_id,
        )
        # transformers 5 keeps rope_theta under rope_parameters; older ones as an attribute
        rope = getattr(config, "rope_parameters", None)
        if isinstance(rope, dict):
            rope["rope_theta"] = rope_theta
        else:
            config.rope_theta = rope_theta
        return config


# HuggingFaceTB/SmolLM2-135M config.json (LlamaForCausalLM; head_dim 576 / 9 = 64)
SMOLLM2_135M = CheckShape(
    "smollm2_135m", "llama", 576, 1536, 30, 9, 3, 64, 49152, 8192, 100_000.0, 1e-5
)
# Qwen/Qwen3-1.7B config.json (the same shape as agentenvs.benchmarks.train_speed.QWEN3_1P7B)
QWEN3_1P7B = CheckShape(
    "qwen3_1p7b", "qwen3", 2048, 6144, 28, 16, 8, 128, 151936, 40960, 1_000_000.0, 1e-6
)
# the dry run's: the same architectures at the tiny model's size, vocabularies larger than the
# tokenizer's as in the real shapes
SMALL_LLAMA = dataclasses.replace(
    SMOLLM2_135M,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=32,
    vocab_size=1024,
)
SMALL_QWEN3 = dataclasses.replace(
    QWEN3_1P7B,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=32,
    vocab_size=1024,
)


@dataclass(frozen=True)
class CheckPlan:
    """Sizes and limits of a check run (:data:`GPU_PLAN`, :data:`DRY_RUN_PLAN`)."""

    device: str
    precision: str
    """The trainer's ``precision``: ``bf16`` autocast on the GPU."""
    eval_dtype: str
    """The eval backend's weights."""
    distributed_backend: str
    small: CheckShape
    """The SmolLM2-135M shape (eval)."""
    large: CheckShape
    """The Qwen3-1.7B shape (eval, RL, FSDP2)."""
    eval_tasks: int
    eval_samples: int
    eval_max_turns: int
    eval_max_new_tokens: int
    rl_iterations: int
    rl_prompts: int
    rl_samples: int
    rl_max_turns: int
    rl_max_new_tokens: int
    micro_batch_size: int
    ppo_epochs: int | None
    """None: the trainer's default (2, the paper's)."""
    threads: int | None
    """CPU threads of torch (None: torch's default)."""
    query_tasks: tuple[str, ...]
    """TextCraft training tasks whose expert episodes Prefix-GRPO's queries are cut from."""
    fsdp_prompts: int
    fsdp_samples: int
    budget_s: float
    limits_s: dict[str, float] = field(default_factory=dict)
    policy_options: dict[str, Any] = field(default_factory=dict)
    """Options of the transformers backend in the evals and the RL rollouts (``--policy-opt``,
    e.g. ``prefix_cache=false`` for a rerun if the prefix cache fails on the GPU); empty: the
    backend's defaults."""


GPU_PLAN = CheckPlan(
    device="cuda",
    precision="bf16",
    eval_dtype="bfloat16",
    distributed_backend="nccl",
    small=SMOLLM2_135M,
    large=QWEN3_1P7B,
    eval_tasks=8,
    eval_samples=8,
    eval_max_turns=4,
    eval_max_new_tokens=128,
    rl_iterations=3,
    rl_prompts=2,
    rl_samples=8,
    rl_max_turns=3,
    rl_max_new_tokens=64,
    micro_batch_size=8,
    ppo_epochs=None,
    threads=None,
    query_tasks=("agentgym/0", "agentgym/1", "agentgym/2", "agentgym/3"),
    fsdp_prompts=2,
    fsdp_samples=4,
    budget_s=480.0,
    limits_s={
        "models": 60,
        "eval_smollm2_135m": 60,
        "eval_qwen3_1p7b": 75,
        "rl_ptgpo": 110,
        "rl_prefix_grpo": 120,
        "torchrun_fsdp2": 100,
    },
)
DRY_RUN_PLAN = dataclasses.replace(
    GPU_PLAN,
    device="cpu",
    precision="fp32",
    eval_dtype="float32",
    distributed_backend="gloo",
    small=SMALL_LLAMA,
    large=SMALL_QWEN3,
    eval_tasks=2,
    eval_samples=2,
    eval_max_turns=2,
    eval_max_new_tokens=8,
    rl_iterations=2,  # one warm-up, one timed: the smallest run that exercises the report
    rl_prompts=1,
    rl_samples=2,
    rl_max_turns=1,
    rl_max_new_tokens=8,
    ppo_epochs=1,
    threads=1,  # tiny models run faster on one thread of a shared machine
    query_tasks=("agentgym/0", "agentgym/1"),
    fsdp_prompts=1,
    fsdp_samples=2,
    budget_s=600.0,
    limits_s={name: 240 for name in STEPS},
)


# --------------------------------------------------------------------------------------------
# Steps: time-bounded, failures recorded


class StepTimeout(Exception):
    """A step ran past its time limit."""


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`StepTimeout` in the main thread after ``seconds`` (SIGALRM; a step stuck in
    one C call is interrupted when it returns)."""

    def expire(signum: int, frame: Any) -> None:
        raise StepTimeout(f"ran past its {seconds:g} s limit")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class StepRecord:
    """One step's outcome in the JSON."""

    name: str
    ok: bool = False
    seconds: float = 0.0
    limit_s: float = 0.0
    error: str | None = None
    traceback: str | None = None
    result: dict[str, Any] = field(default_factory=dict)


class _Runner:
    """Runs the steps in order, each under ``min(its limit, what is left of the budget)``."""

    def __init__(self, plan: CheckPlan, selected: Sequence[str]) -> None:
        self.plan = plan
        self.selected = set(selected)
        self.start = time.perf_counter()
        self.records: list[StepRecord] = []
        self.limit = 0.0
        """The running step's time limit (seconds)."""
        self.outputs: dict[str, dict[str, Any]] = {}

    def run(self, name: str, body: Callable[[], dict[str, Any]], needs: Sequence[str] = ()):
        if name not in self.selected:
            return
        left = self.plan.budget_s - (time.perf_counter() - self.start)
        limit = min(self.plan.limits_s.get(name, self.plan.budget_s), left)
        self.limit = limit
        record = StepRecord(name, limit_s=round(limit, 1))
        self.records.append(record)
        missing = [n for n in needs if n not in self.outputs]
        if missing:
            record.error = f"needs step(s) {', '.join(missing)}, which did not succeed"
            return
        if left <= 1:
            record.error = f"the {self.plan.budget_s:.0f} s budget was spent before this step"
            return
        print(f"gpu_check: {name} (limit {limit:.0f} s)", file=sys.stderr, flush=True)
        clock = time.perf_counter()
        try:
            with _time_limit(limit):
                record.result = body()
            record.ok = True
            self.outputs[name] = record.result
        except BaseException as exc:  # noqa: BLE001 - every failure is recorded, then the next step
            if isinstance(exc, KeyboardInterrupt):
                raise
            record.error = f"{type(exc).__name__}: {exc}"[:TAIL_CHARS]
            record.traceback = traceback.format_exc()[-TAIL_CHARS:]
        finally:
            record.seconds = round(time.perf_counter() - clock, 3)
            _free_device_memory()


def _free_device_memory() -> None:
    import gc

    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# --------------------------------------------------------------------------------------------
# The measurements


def _device(plan: CheckPlan) -> Any:
    import torch

    if plan.device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("no CUDA device here: run on a GPU, or pass --dry-run (CPU)")
    return torch.device(plan.device)


@contextlib.contextmanager
def _memory(device: Any, into: dict[str, Any]) -> Iterator[None]:
    """Peak allocated / reserved GPU memory of the block (GiB) into ``into`` (None on CPU)."""
    import torch

    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    try:
        yield
    finally:
        if cuda:
            torch.cuda.synchronize()
        into["peak_memory_allocated_gib"] = (
            torch.cuda.max_memory_allocated() / 2**30 if cuda else None
        )
        into["peak_memory_reserved_gib"] = (
            torch.cuda.max_memory_reserved() / 2**30 if cuda else None
        )


def nonembedding_parameters(model: Any) -> int:
    """Parameters outside the token embedding (tied: the head is the embedding)."""
    return sum(p.numel() for n, p in model.named_parameters() if "embed_tokens" not in n)


def build_models(plan: CheckPlan, out: Path) -> dict[str, Any]:
    """The tiny model's tokenizer and a random-init model of each shape, saved in bf16."""
    import torch
    from agentenvs.agents.tiny_model import build_tiny_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = _device(plan)
    tokenizer = AutoTokenizer.from_pretrained(build_tiny_model(out / "tiny"))
    result: dict[str, Any] = {"tokenizer_tokens": len(tokenizer)}
    for seed, shape in enumerate((plan.small, plan.large)):
        clock = time.perf_counter()
        target = out / shape.name
        torch.manual_seed(seed)
        with torch.device(device):  # initialise where it runs: a 1.7B init on CPU takes long
            model = AutoModelForCausalLM.from_config(shape.config(tokenizer), dtype=torch.float32)
        model.generation_config.eos_token_id = model.config.eos_token_id
        model.generation_config.pad_token_id = model.config.pad_token_id
        model.to(torch.bfloat16).save_pretrained(target)
        tokenizer.save_pretrained(target)
        result[shape.name] = {
            "path": str(target),
            "class": type(model).__name__,
            "parameters": sum(p.numel() for p in model.parameters()),
            "nonembedding_parameters": nonembedding_parameters(model),
            "seconds": time.perf_counter() - clock,
        }
        del model
        _free_device_memory()
    return result


def run_eval(plan: CheckPlan, shape: CheckShape, model_dir: str, out: Path) -> dict[str, Any]:
    """``agentenvs eval`` on TextCraft with the transformers backend; speed and memory."""
    from agentenvs.agents.trajectory import read_trajectories
    from agentenvs.benchmarks.eval.resume import TRAJECTORIES
    from agentenvs.benchmarks.eval.evaluate import evaluate
    from agentenvs.benchmarks.eval.settings import EvalSettings

    device = _device(plan)
    episodes = plan.eval_tasks * plan.eval_samples
    settings = EvalSettings(
        env_id="TextCraft-v0",
        agent=f"hf:{model_dir}",
        k=plan.eval_samples,
        limit=plan.eval_tasks,
        max_turns=plan.eval_max_turns,
        max_new_tokens=plan.eval_max_new_tokens,
        max_active=episodes,
        agent_options={
            "device": plan.device,
            "dtype": plan.eval_dtype,
            "max_batch_size": episodes,
            **plan.policy_options,
        },
    )
    result: dict[str, Any] = {"episodes_planned": episodes}
    with _memory(device, result):
        clock = time.perf_counter()
        evaluated = evaluate(settings, out, fresh=True, progress=False)
        wall = time.perf_counter() - clock
    trajectories = list(read_trajectories(out / TRAJECTORIES))
    errors = [t.error for t in trajectories if t.error is not None]
    if errors:
        raise RuntimeError(f"{len(errors)} of {len(trajectories)} episodes failed: {errors[0]}")
    tokens = sum(len(s.token_ids or ()) for t in trajectories for s in t.steps)
    backend = json.loads((out / "run.json").read_text()).get("backend", {})
    result.update(
        shape=shape.name,
        episodes=evaluated.episodes,
        turns=sum(t.turns for t in trajectories),
        generated_tokens=tokens,
        wall_s=wall,
        generated_tokens_per_s=tokens / wall,
        episodes_per_min=evaluated.episodes / wall * 60.0,
        max_turns=plan.eval_max_turns,
        max_new_tokens=plan.eval_max_new_tokens,
        backend=backend,
    )
    return result


def build_queries(plan: CheckPlan, model_dir: str, out: Path) -> tuple[Path, dict[str, Any]]:
    """Prefix-GRPO's queries: the expert's episodes, cut, replay-validated, with sidecars."""
    from agentenvs.agents.trajectory import write_trajectories
    from agentenvs.benchmarks.learning_check import expert_trajectories
    from agentenvs.replay import CutConfig, run_cuts, run_sidecar, run_validate

    out.mkdir(parents=True, exist_ok=True)
    clock = time.perf_counter()
    expert = out / "expert.jsonl"
    write_trajectories(expert, expert_trajectories("TextCraft-v0", plan.query_tasks))
    dtype = plan.eval_dtype
    run_cuts(
        [expert],
        out / "queries.jsonl",
        [CutConfig()],
        model_path=model_dir,
        device=plan.device,
        dtype=dtype,
        progress=False,
    )
    run_validate(out / "queries.jsonl", out / "validated.jsonl", progress=False)
    sidecar = run_sidecar(
        out / "validated.jsonl",
        out / "samples.jsonl",
        model_path=model_dir,
        device=plan.device,
        dtype=dtype,
        progress=False,
    )
    samples = out / "samples.jsonl"
    rows = [json.loads(line) for line in samples.read_text().splitlines() if line.strip()]
    if not rows:
        raise RuntimeError(f"no validated query in {samples}: {sidecar}")
    return samples, {
        "queries": len(rows),
        "deepest_prefix_turns": max(int(r["prefix_turns"]) for r in rows),
        "seconds": time.perf_counter() - clock,
    }


def rl_overrides(
    plan: CheckPlan,
    algo: str,
    model_dir: str,
    out: Path,
    *,
    iterations: int,
    prompts: int,
    samples: int,
    queries: Path | None = None,
    max_turns: int | None = None,
) -> list[str]:
    """The ``agentenvs train rl`` settings of the check's runs (``max_turns``: default
    ``plan.rl_max_turns``)."""
    values = {
        "algo": algo,
        "model": model_dir,
        "out_dir": out,
        "iterations": iterations,
        "prompts_per_iteration": prompts,
        "samples_per_prompt": samples,
        "rollout.max_turns": max_turns or plan.rl_max_turns,
        "rollout.max_new_tokens": plan.rl_max_new_tokens,
        "rollout.max_batch_size": prompts * samples,
        "micro_batch_size": plan.micro_batch_size,
        "precision": plan.precision,
        "device": plan.device,
        "save_every": 1_000_000,
        "tensorboard": "false",
        "data.env_id": "TextCraft-v0",
    }
    if plan.ppo_epochs is not None:
        values["ppo_epochs"] = plan.ppo_epochs
    if queries is not None:
        values["data.queries"] = queries
    else:
        values["data.tasks"] = ",".join(plan.query_tasks)
    return [f"{k}={v}" for k, v in values.items()]


def _policy_factory(plan: CheckPlan) -> Any:
    """The trainer's rollout policy with ``plan.policy_options`` (None: the trainer's own)."""
    if not plan.policy_options:
        return None

    from agentenvs.train.rl.trainer import transformers_policy

    return functools.partial(transformers_policy, **plan.policy_options)


class _Timed:
    """Mixin for :class:`agentenvs.train.rl.RLTrainer`: keeps the (prompt, reply) lengths of
    the rows each update trained on (for its FLOPs)."""

    def update_step(self, rows, iteration):  # type: ignore[no-untyped-def]
        self.update_lengths = [(len(r.prompt_ids), len(r.response_ids)) for r in rows]
        return super().update_step(rows, iteration)  # type: ignore[misc]


ITERATION_KEYS = {
    "rollout_s": "time/rollout_s",
    "advantage_s": "time/advantage_s",
    "old_log_prob_s": "time/old_log_prob_s",
    "update_s": "time/update_s",
    "iteration_s": "time/iteration_s",
    "rollout_trainer_logprob_gap": "rollout/trainer_logprob_gap",
    "episodes": "rollout/episodes",
    "rows": "batch/rows",
    "tokens": "batch/tokens",
    "response_tokens": "batch/response_tokens",
    "generated_tokens": "rollout/generated_tokens",
    "generate_tokens_per_s": "perf/generate_tokens_per_s",
    "optimizer_steps": "actor/optimizer_steps",
}


def update_tflops(
    shape: CheckShape, n_body: int, lengths: Sequence[tuple[int, int]], epochs: int, seconds: float
) -> float:
    """TFLOP/s of ``epochs`` update passes over rows of (prompt P, reply R) tokens, S = P + R.

    FLOPs/row/epoch = 6*N_nonembedding*S + 6*L*d_attn*S^2 + 6*d*V*R (train_speed.update_flops)
    """
    from agentenvs.benchmarks.train_speed import update_flops

    flops = sum(update_flops(shape, n_body, p, r)[0] for p, r in lengths) * epochs  # type: ignore[arg-type]
    return flops / seconds / 1e12 if seconds else 0.0


def run_rl(
    plan: CheckPlan,
    algo: str,
    model_dir: str,
    out: Path,
    peak_tflops: float,
    queries: Path | None = None,
    max_turns: int | None = None,
) -> dict[str, Any]:
    """``plan.rl_iterations`` iterations of the native trainer; per-iteration split and MFU.
    An iteration that trained no row is an error (nothing was measured)."""
    from agentenvs.train.config import load_config
    from agentenvs.train.rl import RLConfig, RLTrainer

    device = _device(plan)
    config = load_config(
        RLConfig,
        None,
        rl_overrides(
            plan,
            algo,
            model_dir,
            out,
            iterations=plan.rl_iterations,
            prompts=plan.rl_prompts,
            samples=plan.rl_samples,
            queries=queries,
            max_turns=max_turns,
        ),
    )
    trainer = type("CheckTrainer", (_Timed, RLTrainer), {})(
        config, progress=False, policy_factory=_policy_factory(plan)
    )
    result: dict[str, Any] = {"algo": algo, "shape": plan.large.name, "peak_tflops": peak_tflops}
    iterations = []
    with _memory(device, result):
        trainer.setup()
        trainer.update_settings = dataclasses.replace(
            trainer.update_settings, skip_zero_advantage=False
        )
        n_body = nonembedding_parameters(trainer.model)
        try:
            for _ in range(plan.rl_iterations):
                metrics = trainer.iteration()
                row = {k: float(metrics.get(v, 0.0)) for k, v in ITERATION_KEYS.items()}
                if not row["rows"] or not row["optimizer_steps"]:
                    raise RuntimeError(f"iteration {len(iterations)} trained nothing: {metrics}")
                tflops = update_tflops(
                    plan.large,
                    n_body,
                    getattr(trainer, "update_lengths", []),
                    config.ppo_epochs,
                    row["update_s"],
                )
                row["update_tflops"] = tflops
                row["mfu"] = tflops / peak_tflops
                iterations.append(row)
        finally:
            trainer.close()
            trainer.logger.close()
    timed = iterations[1:] or iterations  # the first iteration warms up kernels and allocator
    result.update(
        iterations=iterations,
        nonembedding_parameters=n_body,
        ppo_epochs=config.ppo_epochs,
        precision=config.precision,
        rollout_dtype=trainer.policy.run_metadata().get("dtype"),
        rollout_max_turns=config.rollout.max_turns,
        median_after_first={
            k: statistics.median(it[k] for it in timed)
            for k in (
                "rollout_s",
                "old_log_prob_s",
                "update_s",
                "iteration_s",
                "rollout_trainer_logprob_gap",
                "update_tflops",
                "mfu",
            )
        },
    )
    return result


# --------------------------------------------------------------------------------------------
# torchrun: FSDP2 on one rank


@dataclass
class _OneRankGroup:
    """Builds the trainer's context under ``torchrun --nproc_per_node=1``: the process group
    joined here (NCCL on a GPU, gloo on CPU), and a one-rank
    :class:`~agentenvs.train.distributed.DistContext` that reports itself distributed, so the
    trainer shards the policy with FSDP2 and runs every collective on the one-rank group."""

    backend: str

    def __call__(self, device: str = "auto", timeout_minutes: float = 60.0) -> Any:
        from datetime import timedelta

        import torch
        from agentenvs.train.distributed import DistContext
        from agentenvs.train.device import pick_device

        class OneRankContext(DistContext):
            @property
            def is_distributed(self) -> bool:
                return True

        wanted = pick_device(device)
        if wanted.type == "cuda":
            wanted = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(wanted)
        timeout = timedelta(minutes=timeout_minutes)
        if not torch.distributed.is_initialized():
            torch.distributed.init_process_group(self.backend, timeout=timeout)
        group = None
        if torch.distributed.get_backend() != "gloo":
            group = torch.distributed.new_group(backend="gloo", timeout=timeout)
        return OneRankContext(0, 1, 0, wanted, group, True)


def fsdp_worker(args: argparse.Namespace) -> int:
    """The torchrun worker: one PTGPO iteration with the policy FSDP2-sharded."""
    import agentenvs.train.rl.trainer as trainer_module
    import torch
    from agentenvs.train.config import load_config
    from agentenvs.train.distributed import is_sharded
    from agentenvs.train.rl import RLConfig, RLTrainer

    plan = DRY_RUN_PLAN if args.dry_run else GPU_PLAN
    plan = dataclasses.replace(plan, policy_options=dict(args.policy_opt))
    _set_threads(plan)
    out = Path(args.out)
    result: dict[str, Any] = {"world_size": int(os.environ.get("WORLD_SIZE", "0"))}
    config = load_config(
        RLConfig,
        None,
        rl_overrides(
            plan,
            "ptgpo",
            args.model,
            out / "run",
            iterations=1,
            prompts=plan.fsdp_prompts,
            samples=plan.fsdp_samples,
        ),
    )
    trainer_module.init_distributed = _OneRankGroup(plan.distributed_backend)
    trainer = RLTrainer(config, progress=False, policy_factory=_policy_factory(plan))
    device = _device(plan)
    with _memory(device, result):
        trainer.setup()
        trainer.update_settings = dataclasses.replace(
            trainer.update_settings, skip_zero_advantage=False
        )
        try:
            metrics = trainer.iteration()
        finally:
            trainer.close()
            trainer.logger.close()
    result.update(
        backend=torch.distributed.get_backend(),
        sharded=is_sharded(trainer.model),
        **{k: float(metrics.get(v, 0.0)) for k, v in ITERATION_KEYS.items()},
    )
    trainer.dist.close()
    (out / "worker.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


def run_torchrun(plan: CheckPlan, model_dir: str, out: Path, timeout: float, dry_run: bool):
    """``torchrun --nproc_per_node=1`` of :func:`fsdp_worker`, within ``timeout`` seconds."""
    out.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=1",
        "-m",
        "agentenvs.benchmarks.gpu_check",
        "--fsdp-worker",
        "--model",
        model_dir,
        "--out",
        str(out),
        *(["--dry-run"] if dry_run else []),
        *(f"--policy-opt={k}={json.dumps(v)}" for k, v in plan.policy_options.items()),
    ]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    if dry_run:
        env["OMP_NUM_THREADS"] = "1"
    clock = time.perf_counter()
    log = out / "torchrun.log"
    with log.open("w") as sink:
        # its own session: a timeout (or the step's alarm) ends torchrun and its worker together
        proc = subprocess.Popen(
            command, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            returncode = proc.wait(timeout=max(timeout - 3, 1))
        except BaseException as exc:  # its timeout, the step's alarm, Ctrl-C: end it all
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if not isinstance(exc, (subprocess.TimeoutExpired, StepTimeout)):
                raise
            tail = log.read_text(errors="replace")[-TAIL_CHARS:]
            message = f"torchrun stopped after {timeout:.0f} s; output tail:\n{tail}"
            raise StepTimeout(message) from None
    wall = time.perf_counter() - clock
    report = out / "worker.json"
    if returncode != 0 or not report.exists():
        tail = log.read_text(errors="replace")[-TAIL_CHARS:]
        raise RuntimeError(f"torchrun exited {returncode}; output tail:\n{tail}")
    result = json.loads(report.read_text())
    if not result.get("rows") or not result.get("optimizer_steps"):
        raise RuntimeError(f"the iteration under torchrun trained nothing: {result}")
    if not result.get("sharded"):
        raise RuntimeError(f"the policy was not FSDP-sharded under torchrun: {result}")
    return {"command": " ".join(command[2:]), "wall_s": wall, **result}


# --------------------------------------------------------------------------------------------
# The run, the report


def versions() -> dict[str, Any]:
    import torch
    import transformers

    cuda = torch.cuda.is_available()
    nccl = None
    if cuda:
        with contextlib.suppress(Exception):
            nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "nccl": nccl,
        "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name() if cuda else platform.processor() or "cpu",
        "device_memory_gib": (
            torch.cuda.get_device_properties(0).total_memory / 2**30 if cuda else None
        ),
        "capability": ".".join(map(str, torch.cuda.get_device_capability())) if cuda else None,
    }


def run_check(
    out: str | Path,
    *,
    dry_run: bool = False,
    steps: Sequence[str] = STEPS,
    peak_tflops: float = H200_BF16_PEAK_TFLOPS,
    budget_s: float | None = None,
    policy_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the selected steps (module docstring); returns the report (also written to
    ``OUT/gpu_check.json``)."""
    plan = DRY_RUN_PLAN if dry_run else GPU_PLAN
    plan = dataclasses.replace(plan, policy_options=dict(policy_options or {}))
    if budget_s is not None:
        plan = dataclasses.replace(plan, budget_s=budget_s)
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        raise ValueError(f"unknown steps {unknown}; choose from {list(STEPS)}")
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    _set_threads(plan)
    models = root / "models"
    runner = _Runner(plan, steps)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if "models" not in steps and (models / plan.large.name / "config.json").exists():
        runner.outputs["models"] = {  # a rerun of later steps reuses the models on disk
            s.name: {"path": str(models / s.name)} for s in (plan.small, plan.large)
        }

    def path(shape: CheckShape) -> str:
        return runner.outputs["models"][shape.name]["path"]

    runner.run("models", lambda: build_models(plan, models))
    for shape in (plan.small, plan.large):
        runner.run(
            f"eval_{'smollm2_135m' if shape is plan.small else 'qwen3_1p7b'}",
            lambda shape=shape: run_eval(plan, shape, path(shape), root / "eval" / shape.name),
            needs=["models"],
        )
    runner.run(
        "rl_ptgpo",
        lambda: run_rl(plan, "ptgpo", path(plan.large), root / "rl" / "ptgpo", peak_tflops),
        needs=["models"],
    )

    def prefix_grpo() -> dict[str, Any]:
        queries, built = build_queries(plan, path(plan.large), root / "rl" / "queries")
        result = run_rl(
            plan,
            "prefix-grpo",
            path(plan.large),
            root / "rl" / "prefix-grpo",
            peak_tflops,
            queries,
            # a cut's prefix replies count against the turn limit: every query keeps the
            # plan's number of generated replies
            max_turns=plan.rl_max_turns + built["deepest_prefix_turns"],
        )
        return {"query_building": built, **result}

    runner.run("rl_prefix_grpo", prefix_grpo, needs=["models"])
    runner.run(
        "torchrun_fsdp2",
        lambda: run_torchrun(
            plan,
            path(plan.large),
            root / "fsdp2",
            runner.limit,
            dry_run,
        ),
        needs=["models"],
    )
    report = {
        "schema_version": SCHEMA_VERSION,
        "dry_run": dry_run,
        "started_utc": started,
        "wall_s": time.perf_counter() - runner.start,
        "budget_s": plan.budget_s,
        "peak_tflops": peak_tflops,
        "versions": versions(),
        "plan": _plan_dict(plan),
        "steps": [dataclasses.asdict(r) for r in runner.records],
        "failed": [r.name for r in runner.records if not r.ok],
    }
    (root / "gpu_check.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    return report


def _set_threads(plan: CheckPlan) -> None:
    if plan.threads is not None:
        import torch

        torch.set_num_threads(plan.threads)


def _plan_dict(plan: CheckPlan) -> dict[str, Any]:
    data = dataclasses.asdict(plan)
    data["small"], data["large"] = plan.small.name, plan.large.name
    return data


def format_table(report: dict[str, Any]) -> str:
    """The report as a Markdown table: one line per step with its main figures."""
    v = report["versions"]
    lines = [
        f"gpu_check{' (dry run)' if report['dry_run'] else ''}: {v['device']}, torch "
        f"{v['torch']}, CUDA {v['cuda']}, NCCL {v['nccl']}, transformers {v['transformers']}; "
        f"{report['wall_s']:.0f} s of {report['budget_s']:.0f}",
        "",
        "| step | ok | s | figures |",
        "|---|---|---:|---|",
    ]
    for step in report["steps"]:
        figures = step["error"] or _figures(step["name"], step["result"])
        lines.append(
            f"| {step['name']} | {'yes' if step['ok'] else 'NO'} | {step['seconds']:.1f} | "
            f"{figures.splitlines()[0] if figures else ''} |"
        )
    return "\n".join(lines)


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} GiB"


def _figures(name: str, r: dict[str, Any]) -> str:
    if name == "models":
        return ", ".join(
            f"{k} {v['parameters'] / 1e6:.1f}M params" for k, v in r.items() if isinstance(v, dict)
        )
    if name.startswith("eval_"):
        return (
            f"{r['generated_tokens_per_s']:.0f} tok/s, {r['episodes_per_min']:.1f} episodes/min, "
            f"peak {_gib(r['peak_memory_allocated_gib'])}"
        )
    if name.startswith("rl_"):
        m = r["median_after_first"]
        return (
            f"rollout {m['rollout_s']:.1f} s / old-lp {m['old_log_prob_s']:.2f} s / update "
            f"{m['update_s']:.2f} s; gap {m['rollout_trainer_logprob_gap']:.4f}; "
            f"{m['update_tflops']:.1f} TFLOP/s, MFU {100 * m['mfu']:.1f}%; "
            f"peak {_gib(r['peak_memory_allocated_gib'])}"
        )
    if name == "torchrun_fsdp2":
        return (
            f"{r['backend']}, sharded {r['sharded']}, iteration {r['iteration_s']:.1f} s, "
            f"gap {r['rollout_trainer_logprob_gap']:.4f}, peak "
            f"{_gib(r['peak_memory_allocated_gib'])}"
        )
    return ""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m agentenvs.benchmarks.gpu_check", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--out", required=True, help="output directory (gpu_check.json)")
    parser.add_argument(
        "--dry-run", action="store_true", help="CPU, small shapes, gloo: every step, quickly"
    )
    parser.add_argument(
        "--steps",
        default=",".join(STEPS),
        help=f"comma-separated subset (default all): {','.join(STEPS)}",
    )
    parser.add_argument(
        "--peak-tflops",
        type=float,
        default=H200_BF16_PEAK_TFLOPS,
        help=f"the MFU denominator (default {H200_BF16_PEAK_TFLOPS:g}, the H200's bf16)",
    )
    parser.add_argument("--budget-s", type=float, default=None, help="overall time budget")
    parser.add_argument(
        "--policy-opt",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="transformers backend option for the evals and the RL rollouts, e.g. prefix_cache=false "
        "(repeatable; default: the backend's defaults)",
    )
    parser.add_argument("--fsdp-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.fsdp_worker:
        return fsdp_worker(args)
    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    try:
        report = run_check(
            args.out,
            dry_run=args.dry_run,
            steps=steps,
            peak_tflops=args.peak_tflops,
            budget_s=args.budget_s,
            policy_options=dict(args.policy_opt),
        )
    except ValueError as exc:
        print(f"gpu_check: {exc}", file=sys.stderr)
        return 2
    print(format_table(report))
    print(f"\n{Path(args.out) / 'gpu_check.json'}")
    for step in report["steps"]:
        if not step["ok"]:
            print(f"\n{step['name']} failed: {step['error']}", file=sys.stderr)
            if step["traceback"]:
                print(step["traceback"], file=sys.stderr)
    return 1 if report["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
