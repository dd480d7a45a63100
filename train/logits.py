"""Logits at chosen positions only: the LM head runs on the tokens a loss reads (reply or
label tokens), not on every prompt position, which on a small model with a large vocabulary is
most of a training step's cost. The values equal those of a full forward at those positions."""

from __future__ import annotations

import inspect
from typing import Any

import torch

__all__ = ["logits_at"]


def logits_at(model: Any, batch: dict[str, Any], keep: torch.Tensor) -> torch.Tensor:
    """(N, V) logits at the True positions of ``keep`` (B, S), in row-major order."""
    kwargs = {
        "input_ids": batch["input_ids"],
        "attention_mask": batch["attention_mask"],
        "use_cache": False,
    }
    if batch.get("position_ids") is not None:
        kwargs["position_ids"] = batch["position_ids"]
    if "logits_to_keep" not in inspect.signature(model.forward).parameters:
        return model(**kwargs).logits[keep]
    if _MASK_LOGITS_TO_KEEP:
        return model(**kwargs, logits_to_keep=keep).logits
    # older transformers: a 1-D tensor of columns kept for every row (the union), then the mask
    columns = keep.any(dim=0).nonzero()[:, 0]
    return model(**kwargs, logits_to_keep=columns).logits[keep[:, columns]]


def _mask_logits_to_keep() -> bool:
    """Whether this transformers takes a (B, S) boolean ``logits_to_keep`` (5.2x and later)."""
    try:
        from transformers import modeling_utils
    except ImportError:
        return False
    return hasattr(modeling_utils, "slice_logits_to_keep")


_MASK_LOGITS_TO_KEEP = _mask_logits_to_keep()
