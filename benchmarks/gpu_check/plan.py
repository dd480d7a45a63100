"""What a check run does: its steps, sizes and time limits (:data:`GPU_PLAN`,
:data:`DRY_RUN_PLAN`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch

from agentenvs.benchmarks.speed.model_shapes import QWEN3_1P7B, SMOLLM2_135M, ModelShape

__all__ = [
    "DRY_RUN_PLAN",
    "GPU_PLAN",
    "SCHEMA_VERSION",
    "SMALL_LLAMA",
    "SMALL_QWEN3",
    "STEPS",
    "CheckPlan",
    "plan_dict",
    "set_threads",
]

SCHEMA_VERSION = 1
STEPS = (
    "models",
    "eval_smollm2_135m",
    "eval_qwen3_1p7b",
    "rl_ptgpo",
    "rl_prefix_grpo",
    "torchrun_fsdp2",
)

# the dry run's: the same architectures at the tiny model's size, vocabularies larger than the
# tokenizer's as in the real shapes
_SMALL = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "vocab_size": 1024,
}
SMALL_LLAMA = dataclasses.replace(SMOLLM2_135M, **_SMALL)
SMALL_QWEN3 = dataclasses.replace(QWEN3_1P7B, **_SMALL)


@dataclass(frozen=True)
class CheckPlan:
    """Sizes and limits of a check run (:data:`GPU_PLAN`, :data:`DRY_RUN_PLAN`)."""

    device: str
    precision: str
    """The trainer's ``precision``: ``bf16`` autocast on the GPU."""
    eval_dtype: str
    """The eval backend's weights."""
    distributed_backend: str
    small: ModelShape
    """The SmolLM2-135M shape (eval)."""
    large: ModelShape
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


def set_threads(plan: CheckPlan) -> None:
    """torch's CPU threads as the plan says (None: leave torch's default)."""
    if plan.threads is not None:
        torch.set_num_threads(plan.threads)


def plan_dict(plan: CheckPlan) -> dict[str, Any]:
    """The plan as the report records it (the shapes by name)."""
    data = dataclasses.asdict(plan)
    data["small"], data["large"] = plan.small.name, plan.large.name
    return data
