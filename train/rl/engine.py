"""What an RL run trains and plays with: the model, the frozen initial policy, the rollout
engine's policy, and the update's settings.

``engine.kind`` names a row of :data:`POLICY_FACTORIES`: ``transformers`` generates with the
trainer's own model object (nothing to copy after an update); ``vllm``
(:mod:`agentenvs.train.rl.vllm_engine`) is a colocated vLLM engine with its own copy of the
weights, synced after every update. A factory is ``factory(model, tokenizer, config) ->
Policy``; a policy that has ``sleep()`` and ``sync_weights(model, iteration)`` is put to sleep
during the update and given the new weights.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from agentenvs.agents.policy import Policy
from agentenvs.train.distributed import DistContext, shard_model
from agentenvs.train.rl.config import RLConfig
from agentenvs.train.rl.update import UpdateSettings

__all__ = [
    "POLICY_FACTORIES",
    "PolicyFactory",
    "WeightSync",
    "load_model",
    "load_reference",
    "policy_factory",
    "transformers_policy",
    "update_settings",
]

WeightSync = Callable[[Any, int], "Mapping[str, float] | None"]
"""``sync(model, iteration)``: push the updated weights to the rollout engine; may return
metrics (the vLLM engine's probe gap), which join the iteration's."""
PolicyFactory = Callable[[Any, Any, RLConfig], Policy]


def transformers_policy(model: Any, tokenizer: Any, config: RLConfig, **options: Any) -> Policy:
    """The default rollout policy: the transformers backend over the trainer's own model
    (``options``: further backend options)."""
    from agentenvs.agents.backends.transformers_backend import TransformersPolicy

    return TransformersPolicy.from_model(
        model,
        tokenizer,
        max_batch_size=config.rollout.max_batch_size,
        chat_template_kwargs=config.rollout.chat_template_kwargs,
        spec=f"hf:{config.model}",
        **options,
    )


def _vllm_policy_factory() -> PolicyFactory:
    from agentenvs.train.rl.vllm_engine import vllm_policy_factory  # vllm: only when asked

    return vllm_policy_factory


POLICY_FACTORIES: dict[str, Callable[[], PolicyFactory]] = {
    "transformers": lambda: transformers_policy,
    "vllm": _vllm_policy_factory,
}
"""``engine.kind`` -> a loader of its policy factory (a loader, so vLLM imports only when
chosen); the kinds are :data:`agentenvs.train.rl.config.ENGINES`."""


def policy_factory(config: RLConfig) -> PolicyFactory:
    """The policy factory of ``config.engine.kind``."""
    return POLICY_FACTORIES[config.engine.kind]()


def load_model(source: str, config: RLConfig, dist: DistContext) -> tuple[Any, Any, int]:
    """(tokenizer, float32 model on the device or sharded over the ranks, pad id) from
    ``source`` (a directory or hub id)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    _place(model, config, dist)
    pad_id = tokenizer.pad_token_id
    if pad_id is None:
        pad_id = tokenizer.eos_token_id or 0
    return tokenizer, model, pad_id


def load_reference(config: RLConfig, dist: DistContext) -> Any | None:
    """The frozen initial policy for ``actor/kl_to_initial`` (``config.model``'s weights, also
    when resuming), or None when ``reference_kl_rows`` is 0 or the run names no initial model."""
    if not config.reference_kl_rows or not config.model:
        return None
    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(config.model, dtype=torch.float32)
    reference.eval()
    reference.requires_grad_(False)
    return _place(reference, config, dist)


def _place(model: Any, config: RLConfig, dist: DistContext) -> Any:
    if dist.is_distributed:
        shard_model(model, dist, config.fsdp, config.precision)
    else:
        model.to(dist.device)
    return model


def update_settings(cfg: RLConfig) -> UpdateSettings:
    """What the optimizer step needs of the run's settings: the algorithm's losses, the
    correction, the epochs and batches, clipping, precision and seed."""
    return UpdateSettings(
        policy=cfg.policy_loss_config(),
        prefix=cfg.prefix_config(),
        correction=cfg.correction_config(),
        ppo_epochs=cfg.ppo_epochs,
        mini_batches=cfg.mini_batches,
        micro_batch_size=cfg.micro_batch_size,
        max_grad_norm=cfg.optim.max_grad_norm,
        precision=cfg.precision,
        seed=cfg.seed,
        loss=cfg.spec.loss,
    )
