"""The training device and its precision: one place that picks both, imported by every trainer
and by :mod:`agentenvs.train.distributed`."""

from __future__ import annotations

import torch

__all__ = ["autocast_context", "pick_device"]


def pick_device(device: str = "auto") -> torch.device:
    """``auto``: CUDA when available, else CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def autocast_context(device: torch.device, precision: str = "auto"):
    """bf16 autocast where the device has it (``auto``/``bf16``), else a no-op context."""
    use_bf16 = precision == "bf16" or (
        precision == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported()
    )
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError("precision=bf16 but this GPU has no bf16; use precision=fp32")
    if use_bf16:
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return torch.autocast(device_type=device.type, enabled=False)
