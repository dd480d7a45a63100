"""One trainer on one process or many: ``torchrun`` detection, FSDP2 sharding, rank collectives.

The same entry point runs alone or under ``torchrun`` (``agentenvs train sft|rl``): when
``WORLD_SIZE`` > 1 (torchrun sets it with ``RANK``, ``LOCAL_RANK``, ``MASTER_ADDR`` and
``MASTER_PORT``), :func:`init_distributed` joins the process group (NCCL on GPUs, one GPU per
process at ``cuda:LOCAL_RANK``; gloo on CPUs) and :func:`shard_model` shards the policy with
FSDP2 (``torch.distributed.fsdp.fully_shard``): each decoder layer is one unit, the root holds the
embeddings, the final norm and the head. Gradients are **summed** across ranks (FSDP's
divide factor set to 1), so a rank divides its loss by the whole global batch's token (or row)
count and the sum over ranks is exactly the one-process loss and gradient.

FSDP runs a collective in every forward and backward, so every rank must run the same number
of them: a rank with fewer micro-batches than another runs :func:`pad_passes` (a one-token pass
whose loss is multiplied by zero). Generation differs per rank in its number of forward calls,
so it runs inside :func:`gathered` (every unit unsharded once, no collective until it ends).

Checkpoints hold full (unsharded) tensors (:func:`full_model_state`,
:func:`full_optimizer_state`, keyed by parameter name), written by rank 0; they reload on any
world size, one process included (:func:`load_optimizer_state`). With several machines the
output directory must be on a filesystem that every machine sees (rank 0 writes it; on resume
every rank reads the model from it).

:class:`DistContext` is the single-process case too (``world_size`` 1, every collective the
identity), so the trainers call the same methods either way.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch

from agentenvs.train.device import autocast_context, pick_device

__all__ = [
    "DistContext",
    "FSDPSettings",
    "full_model_state",
    "full_optimizer_state",
    "full_tensor",
    "gathered",
    "init_distributed",
    "is_sharded",
    "load_optimizer_state",
    "pad_passes",
    "reduce_metrics",
    "shard_model",
]

T = TypeVar("T")

#: Metric keys (by suffix or prefix) added up over ranks by :func:`reduce_metrics`; ``time/``
#: keys take the slowest rank, ``_max`` / ``_min`` keys the max / min, the rest a weighted mean.
SUMMED_METRICS = (
    "rollout/generated_tokens",
    "rollout/groups_trained",
    "rollout/episodes",
    "rollout/error_episodes",
    "rollout/failed_episodes",
    "rollout/dropped_groups",
    "rollout/retried_episodes",
    "batch/dropped_long_rows",
    "batch/zero_advantage_rows",
    "batch/rows",
    "batch/tokens",
    "batch/response_tokens",
)


@dataclass
class FSDPSettings:
    """FSDP2 settings, read only when the run has more than one process."""

    reshard_after_forward: bool = True
    """Free each layer's gathered weights after its forward (ZeRO-3; least memory). False keeps
    them until the backward (ZeRO-2 style: one all-gather less per layer, more memory)."""
    cpu_offload: bool = False
    """Keep the sharded parameters, gradients and optimizer state in CPU memory (FSDP2's
    ``CPUOffloadPolicy``): much less GPU memory, much slower steps."""
    mixed_precision: bool = True
    """On GPUs with bf16 and ``precision`` auto/bf16: gather parameters in bf16 (half the
    all-gather traffic) and reduce gradients in fp32; the sharded master weights stay fp32."""


@dataclass
class DistContext:
    """Where this process is among the ranks, and the collectives the trainers need."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    group: Any = None
    """A gloo group for objects and scalars (None: the default group)."""
    owns_process_group: bool = False

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, items: Sequence[T]) -> list[T]:
        """This rank's share of ``items``: every ``world_size``-th one from position ``rank``."""
        return list(items[self.rank :: self.world_size])

    def sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sums over ranks (float64)."""
        if not self.is_distributed:
            return [float(v) for v in values]
        tensor = torch.tensor([float(v) for v in values], dtype=torch.float64)
        torch.distributed.all_reduce(tensor, group=self.group)
        return tensor.tolist()

    def max(self, value: float) -> float:
        if not self.is_distributed:
            return value
        tensor = torch.tensor([float(value)], dtype=torch.float64)
        torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MAX, group=self.group)
        return float(tensor.item())

    def gather_objects(self, obj: T) -> list[T]:
        """Every rank's ``obj`` (picklable), in rank order, on every rank."""
        if not self.is_distributed:
            return [obj]
        out: list[Any] = [None] * self.world_size
        torch.distributed.all_gather_object(out, obj, group=self.group)
        return out

    def broadcast_object(self, obj: T) -> T:
        """Rank 0's ``obj`` on every rank."""
        if not self.is_distributed:
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def barrier(self) -> None:
        if self.is_distributed:
            torch.distributed.barrier(group=self.group)

    def close(self, wait: bool = True) -> None:
        """Leave the process group if :func:`init_distributed` created it. ``wait``: first
        wait for every rank to get here (a rank that tears its gloo connections down while
        another still sends on them can abort the process); pass False on an error path, where
        another rank may never come."""
        if self.owns_process_group and torch.distributed.is_initialized():
            if wait:
                self.barrier()
            torch.distributed.destroy_process_group()
            self.owns_process_group = False


def init_distributed(device: str = "auto", timeout_minutes: float = 60.0) -> DistContext:
    """Join the process group ``torchrun`` describes in the environment (or the one already
    initialised); one process (``WORLD_SIZE`` unset or 1): a context with ``world_size`` 1."""
    dist = torch.distributed
    already = dist.is_available() and dist.is_initialized()
    world = dist.get_world_size() if already else int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext(device=pick_device(device))
    if not dist.is_available():
        raise RuntimeError("WORLD_SIZE > 1 but this torch build has no torch.distributed")
    rank = dist.get_rank() if already else int(_env("RANK"))
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    wanted = pick_device(device)
    if wanted.type == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(
                f"LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} GPUs are visible: "
                "start at most one process per GPU (torchrun --nproc-per-node=<number of GPUs>)"
            )
        wanted = torch.device("cuda", local_rank)
        torch.cuda.set_device(wanted)
    owns = False
    if not already:
        backend = "nccl" if wanted.type == "cuda" else "gloo"
        dist.init_process_group(backend, timeout=timedelta(minutes=timeout_minutes))
        owns = True
    group = None
    if dist.get_backend() != "gloo":
        group = dist.new_group(backend="gloo", timeout=timedelta(minutes=timeout_minutes))
    return DistContext(rank, world, local_rank, wanted, group, owns)


def _env(name: str) -> str:
    value = os.environ.get(name)
    if value is None:
        raise RuntimeError(
            f"WORLD_SIZE > 1 but {name} is not set: start the run with torchrun "
            "(torchrun --nproc-per-node=N -m agentenvs.cli train ...)"
        )
    return value


# ----- FSDP2 ---------------------------------------------------------------------------------


def _fsdp():
    try:
        from torch.distributed.fsdp import (
            CPUOffloadPolicy,
            FSDPModule,
            MixedPrecisionPolicy,
            fully_shard,
        )
    except ImportError:  # torch 2.4 / 2.5
        from torch.distributed._composable.fsdp import (  # type: ignore[no-redef]
            CPUOffloadPolicy,
            FSDPModule,
            MixedPrecisionPolicy,
            fully_shard,
        )
    return fully_shard, FSDPModule, MixedPrecisionPolicy, CPUOffloadPolicy


def shard_model(
    model: torch.nn.Module,
    ctx: DistContext,
    settings: FSDPSettings | None = None,
    precision: str = "auto",
) -> torch.nn.Module:
    """Shard ``model`` over the ranks with FSDP2 (in place; returns it). Units: every module
    whose class is in the model's ``_no_split_modules`` (the decoder layers), then the root.
    Gradients are summed over ranks (see the module docstring). One process: unchanged."""
    if not ctx.is_distributed:
        return model
    from torch.distributed.device_mesh import init_device_mesh

    fully_shard, fsdp_module, mixed_precision, cpu_offload = _fsdp()
    settings = settings or FSDPSettings()
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    kwargs: dict[str, Any] = {
        "mesh": mesh,
        "reshard_after_forward": settings.reshard_after_forward,
    }
    if _uses_bf16(ctx.device, precision) and settings.mixed_precision:
        kwargs["mp_policy"] = mixed_precision(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32
        )
    if settings.cpu_offload:
        kwargs["offload_policy"] = cpu_offload()
    layer_names = set(getattr(model, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in layer_names]
    if not layers:
        raise ValueError(
            f"{type(model).__name__} names no decoder layer class in _no_split_modules; "
            "FSDP would gather the whole model at once"
        )
    for layer in layers:
        fully_shard(layer, **kwargs)
        layer._agentenvs_reshard_after_forward = settings.reshard_after_forward
    fully_shard(model, **kwargs)
    model._agentenvs_reshard_after_forward = False  # FSDP keeps the root gathered for backward
    for module in model.modules():
        if isinstance(module, fsdp_module):
            _sum_gradients(module)
    return model


def _sum_gradients(unit: Any) -> None:
    """Make an FSDP unit add up its gradients over ranks (no division), with a plain SUM
    reduction (gloo has no pre-multiplied sum; NCCL is fastest with plain sums)."""
    force_sum = getattr(unit, "set_force_sum_reduction_for_comms", None)
    if callable(force_sum):
        force_sum(True)
    setter = getattr(unit, "set_gradient_divide_factor", None)
    if setter is None:  # torch < 2.7
        setter = unit.set_reduce_scatter_divide_factor
    setter(1.0)


def _uses_bf16(device: torch.device, precision: str) -> bool:
    if device.type != "cuda" or precision == "fp32":
        return False
    return torch.cuda.is_bf16_supported()


def is_sharded(model: Any) -> bool:
    """Whether ``model`` is FSDP2-sharded."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return False
    return isinstance(model, _fsdp()[1])


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a (possibly sharded) parameter or value; a collective when sharded."""
    gather = getattr(tensor, "full_tensor", None)
    return gather() if callable(gather) else tensor


@contextlib.contextmanager
def gathered(model: Any) -> Iterator[None]:
    """Every FSDP unit of ``model`` unsharded for the block (generation: each rank may run a
    different number of forward passes, none of which may all-gather). No-op when not sharded."""
    if not is_sharded(model):
        yield
        return
    fsdp_module = _fsdp()[1]
    units = [m for m in model.modules() if isinstance(m, fsdp_module)]
    for unit in units:
        unit.set_reshard_after_forward(False, recurse=False)
        unit.unshard()
    try:
        yield
    finally:
        for unit in units:
            unit.reshard()
        for unit in units:
            unit.set_reshard_after_forward(_reshard_setting(unit), recurse=False)


def _reshard_setting(unit: Any) -> bool:
    return bool(getattr(unit, "_agentenvs_reshard_after_forward", True))


def pad_passes(
    model: Any,
    count: int,
    *,
    pad_id: int,
    device: torch.device,
    precision: str,
    backward: bool,
) -> None:
    """``count`` one-token passes whose loss is zero (with ``backward``: a zero gradient), so
    this rank runs as many FSDP collectives as the rank with the most micro-batches."""
    for _ in range(max(count, 0)):
        ids = torch.full((1, 1), int(pad_id), dtype=torch.long, device=device)
        with torch.set_grad_enabled(backward), autocast_context(device, precision):
            logits = model(input_ids=ids, use_cache=False).logits
        if backward:
            (logits.float().sum() * 0.0).backward()


def micro_batch_rounds(ctx: DistContext, local: int) -> int:
    """The most micro-batches any rank has (this rank pads up to it)."""
    return int(ctx.max(local))


# ----- full state dicts ----------------------------------------------------------------------


def _full_options(ctx: DistContext, **extra: Any):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=True, **extra)


def full_model_state(model: Any, ctx: DistContext) -> dict[str, torch.Tensor]:
    """The unsharded model state on CPU: on rank 0 (empty elsewhere); a collective."""
    if not is_sharded(model):
        return {k: v.detach().cpu() for k, v in model.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(model, options=_full_options(ctx))


def full_optimizer_state(model: Any, optimizer: torch.optim.Optimizer, ctx: DistContext) -> dict:
    """The optimizer state keyed by parameter name, unsharded, on CPU (rank 0; a collective)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    return get_optimizer_state_dict(model, optimizer, options=_full_options(ctx))


def load_optimizer_state(
    model: Any, optimizer: torch.optim.Optimizer, state: Mapping | None, ctx: DistContext
) -> None:
    """Load a :func:`full_optimizer_state` (saved on any world size). Distributed: rank 0 passes
    the state, the others ``None``; it is broadcast and sharded (a collective)."""
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    if is_sharded(model):
        options = _full_options(ctx, broadcast_from_rank0=True)
        set_optimizer_state_dict(model, optimizer, dict(state or {}), options=options)
    else:
        set_optimizer_state_dict(model, optimizer, dict(state or {}), options=_full_options(ctx))


# ----- metrics -------------------------------------------------------------------------------


def reduce_metrics(
    ctx: DistContext, metrics: Mapping[str, float], weights: Mapping[str, float]
) -> dict[str, float]:
    """One value per key for the whole run, the same on every rank: counts
    (:data:`SUMMED_METRICS`) and throughputs (``perf/``) added up, ``time/`` the slowest rank,
    ``_max``/``_min`` the max/min, the rest a mean weighted by this rank's ``weights`` entry of
    the longest key prefix that matches (``""``: the default; e.g. ``{"": rows, "rollout/":
    episodes}``). A key some ranks lack is reduced over the ranks that have it."""
    if not ctx.is_distributed:
        return dict(metrics)
    mine = {k: _weight_of(k, weights) for k in metrics}
    parts = ctx.gather_objects((dict(metrics), mine))
    keys = sorted({k for m, _ in parts for k in m})
    out: dict[str, float] = {}
    for key in keys:
        present = [(float(m[key]), w[key]) for m, w in parts if key in m]
        values = [v for v, _ in present]
        if key in SUMMED_METRICS or key.startswith("perf/"):
            out[key] = sum(values)
        elif key.startswith("time/") or key.endswith("_max"):
            out[key] = max(values)
        elif key.endswith("_min"):
            out[key] = min(values)
        else:
            total = sum(w for _, w in present)
            mean = sum(v * w for v, w in present) / total if total > 0 else None
            out[key] = mean if mean is not None else sum(values) / len(values)
    return out


def _weight_of(key: str, weights: Mapping[str, float]) -> float:
    best = max((p for p in weights if key.startswith(p)), key=len, default=None)
    return float(weights[best]) if best is not None else 1.0
