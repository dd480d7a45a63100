"""The CPU engine's 4-bit decoder weights for decoding steps (:class:`Int4Weights`, kept outside
the model).

A decoding step is memory-bound: it reads every weight once. A 4-bit groupwise copy of each
decoder linear weight (groups of 32 along the input, GGUF Q4_1's min/max rule, so the embedded
model's own Q4_1 values are recovered exactly; a lossy quantization for other models, whose
largest error :class:`Int4Report` gives) reads a quarter of the bytes. Calls of at most
``max_rows`` rows take the copy, in the compiled kernel (:mod:`agentenvs.agents.backends.cpu.
kernels`, integer dot products) or torch's ``_weight_int4pack_mm_for_cpu``; the q, k and v
projections, and the MLP's gate and up projections, also get one fused copy each
(:data:`FUSED`); the LM head an 8-bit copy (Q8_0, float32 logits). Prefill and larger calls
keep the module's weight, in products of fixed row counts (:func:`row_blocked_mm`: on CPUs with
AMX, oneDNN's GEMM rounds a row differently by the call's row count). Each row's output comes
from its own products, so a row's tokens do not depend on the batch (the tests check it).
Measurements: ``docs/cpu-engine.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "GROUP_SIZE",
    "PREFILL_ROWS",
    "ROW_BLOCK",
    "Int4Report",
    "Int4Weights",
    "available",
    "install",
    "install_for",
    "product",
    "quantize_groups",
    "quantize_q8",
    "row_blocked_mm",
]

GROUP_SIZE = 32
MAX_ROWS = 16
ROW_BLOCK = 32  # rows per product in decoding steps of more than max_rows rows
PREFILL_ROWS = (64, 128)  # the fewest and most rows per product outside decoding steps


@dataclass(frozen=True)
class Int4Report:
    """What :func:`install` did: layers switched, and the largest reconstruction error of a
    weight relative to its row's largest magnitude (before the scales' bfloat16 rounding)."""

    layers: int
    max_relative_error: float
    compiled: bool = False  # every layer's copy is the compiled kernel's (cpu_kernels)
    head_relative_error: float | None = None  # the LM head's 8-bit copy, if it got one


def available() -> bool:
    """Whether this torch build has the CPU 4-bit weight kernel."""
    import torch

    return hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu") and hasattr(
        torch.ops.aten, "_convert_weight_to_int4pack_for_cpu"
    )


def quantize_groups(weight: Any, group_size: int = GROUP_SIZE) -> tuple[Any, Any, float]:
    """Asymmetric 4-bit groups along the input dimension: ``w ~ (q - 8) * scale + zero``.

    ``scale = (max - min) / 15``, ``q = round((w - min) / scale)``, ``zero = min + 8 * scale``
    (Q4_1's rule). Returns (``q`` int32 ``[N, K]``, scales and zeros float32
    ``[K / group_size, N, 2]``, the largest ``|w - dequantized|`` over each row's ``max |w|``).
    """
    import torch

    w = weight.detach().to(torch.float64)
    n, k = w.shape
    groups = w.view(n, k // group_size, group_size)
    low = groups.amin(dim=-1, keepdim=True)
    high = groups.amax(dim=-1, keepdim=True)
    scale = (high - low) / 15
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round((groups - low) / safe).clamp_(0, 15)
    back = q * scale + low
    row_max = w.abs().amax(dim=1).clamp_min(1e-30)
    error = ((back - groups).abs().view(n, k).amax(dim=1) / row_max).max().item()
    zero = low + 8 * scale
    scales_zeros = torch.cat([scale, zero], dim=-1).transpose(0, 1).contiguous()
    return q.view(n, k).to(torch.int32), scales_zeros.to(torch.float32), float(error)


# Fused copies for decoding steps (agentenvs.agents.backends.cpu.decode_step): one product
# instead of several sharing an input; a column's result does not depend on which columns share
# the call.
FUSED = {"qkv": ("q_proj", "k_proj", "v_proj"), "gate_up": ("gate_proj", "up_proj")}


def product(x: Any, packed: Any, scales: Any, out_features: int, compiled: bool) -> Any:
    """``x @ w.T`` for ``x`` ``[rows, K]`` (bfloat16, or float32 with the compiled kernel) and
    a 4-bit copy made by :func:`install`: the compiled kernel's layout (``compiled``) or
    torch's."""
    import torch

    if compiled:
        from agentenvs.agents.backends.cpu.kernels import int4_linear

        return int4_linear(x, packed, scales, out_features)
    return torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, GROUP_SIZE, scales)


@dataclass(frozen=True)
class Copy:
    """A low-bit copy of one weight (or of several stacked, :data:`FUSED`): the kernel's
    arguments after ``x`` and the most rows a call may have to use it."""

    packed: Any
    scales: Any
    outputs: int
    compiled: bool
    max_rows: int


@dataclass
class Int4Weights:
    """The 4-bit copies of a model's decoder linear weights (and the LM head's 8-bit one),
    kept here, outside the model: the model's modules, parameters and ``state_dict`` are
    untouched, and another policy on the same model does not see them.

    :meth:`linear` is every linear layer's product in the engine's passes: a decoding step's
    call of at most ``max_rows`` rows takes the copy; prefill and larger calls keep the
    module's weight, in products of fixed row counts (:func:`row_blocked_mm`, module
    docstring)."""

    layers: dict[Any, Copy] = field(default_factory=dict)  # by module
    fused: dict[tuple[Any, str], Copy] = field(default_factory=dict)  # by (parent, group)
    head: Copy | None = None
    report: Int4Report | None = None

    def linear(self, module: Any, x: Any, decoding: bool) -> Any:
        """``module(x)`` for an ``nn.Linear`` (module docstring)."""
        import torch

        if module in self.layers:
            return _blocked_linear(module, x, self.layers[module] if decoding else None)
        if self.head is not None and decoding and module is self.head_module:
            rows = x.numel() // module.in_features
            if rows <= self.head.max_rows and x.dtype in (torch.bfloat16, torch.float32):
                from agentenvs.agents.backends.cpu.kernels import int8_linear

                flat = x.reshape(rows, module.in_features)
                out = int8_linear(
                    flat, self.head.packed, self.head.scales, self.head.outputs, float32=True
                )
                out = out.view(*x.shape[:-1], module.out_features)
                return out if module.bias is None else out + module.bias
        return module(x)

    head_module: Any = None


def _blocked_linear(module: Any, x: Any, copy: Copy | None) -> Any:
    """A switched layer's product: with ``copy`` (a decoding step), the copy for at most its
    ``max_rows`` rows, else the module's weight in row blocks."""
    import torch

    rows = x.numel() // module.in_features
    if x.dtype != module.weight.dtype or torch.is_grad_enabled() or x.device.type != "cpu":
        return torch.nn.functional.linear(x, module.weight, module.bias)
    flat = x.reshape(rows, module.in_features)
    if copy is None:
        out = row_blocked_mm(flat, module.weight, *PREFILL_ROWS)
    elif rows <= copy.max_rows:
        out = product(flat, copy.packed, copy.scales, copy.outputs, copy.compiled)
    elif rows == 1:  # the same bits as one row of a 32-row block
        out = torch.nn.functional.linear(flat, module.weight)
    else:
        out = row_blocked_mm(flat, module.weight)
    out = out.view(*x.shape[:-1], module.out_features)
    return out if module.bias is None else out + module.bias


def row_blocked_mm(x: Any, weight: Any, smallest: int = ROW_BLOCK, largest: int = ROW_BLOCK) -> Any:
    """``x @ weight.T`` in products of ``smallest`` to ``largest`` rows: the fewest products of
    at most ``largest`` rows, of equal sizes to within one, each padded with zeros to
    ``smallest`` rows if shorter. Each row's result is then the same bits whatever the call's
    row count, where every product of ``smallest`` to ``largest`` rows takes the same kernel
    (module docstring)."""
    import torch

    rows, width = x.shape
    count = max(1, -(-rows // largest))
    out = x.new_empty((rows, weight.shape[0]))
    transposed = weight.t()
    start = 0
    for index in range(count):
        size = rows // count + (index < rows % count)
        block = x[start : start + size]
        if size < smallest:
            padded = x.new_zeros((smallest, width))
            padded[:size] = block
            out[start : start + size] = torch.mm(padded, transposed)[:size]
        else:
            torch.mm(block, transposed, out=out[start : start + size])
        start += size
    return out


def _decoder_linears(model: Any) -> list[tuple[str, Any]]:
    import torch

    return [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear)
        and ".layers." in f".{name}."
        and module.in_features % GROUP_SIZE == 0
        and module.weight.device.type == "cpu"
    ]


def _checkpoint_weights(directory: Path, names: set[str]) -> dict[str, Any]:
    """The float32 tensors among ``names`` in ``directory``'s safetensors files (none if the
    checkpoint stores another dtype: then the module's weights are quantized)."""
    import torch
    from safetensors import safe_open

    found: dict[str, Any] = {}
    for path in sorted(directory.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as handle:
            for key in handle.keys():  # noqa: SIM118 (a safe_open handle is not a dict)
                if key in names:
                    tensor = handle.get_tensor(key)
                    if tensor.dtype == torch.float32:
                        found[key] = tensor
    return found


def install_for(
    model: Any, source: str | Path | None = None, *, compiled: bool = True
) -> Int4Weights | None:
    """:func:`install` when it applies, else None: the kernel exists and the model is on CPU,
    in bfloat16, or in float32 with the compiled kernel's integer dot products (``compiled``
    on a CPU with AVX2 or AVX-512 VNNI, :func:`agentenvs.agents.backends.cpu.kernels.
    int_dot_path`; the kernel's plain float32 sums are several times slower than ``linear``).
    ``source``: the model's
    directory, whose float32 weights are quantized when it has them."""
    import torch

    from agentenvs.agents.backends.cpu import kernels as cpu_kernels

    try:
        param = next(model.parameters())
    except (StopIteration, AttributeError):
        return None
    if not available() or param.device.type != "cpu":
        return None
    float32_ok = compiled and cpu_kernels.int_dot_path() != "none"
    if param.dtype != torch.bfloat16 and not (param.dtype == torch.float32 and float32_ok):
        return None
    linears = _decoder_linears(model)
    if not linears:
        return None
    weights: dict[str, Any] = {}
    if source and Path(source).is_dir():
        names = {f"{n}.weight" for n, _ in linears} | set(HEAD_NAMES)
        weights = _checkpoint_weights(Path(source), names)
    return install(model, weights, compiled=compiled)


HEAD_NAMES = ("lm_head.weight", "model.embed_tokens.weight")  # the head's, or the tied embedding


def quantize_q8(weight: Any, group_size: int = GROUP_SIZE) -> tuple[Any, Any, float]:
    """Symmetric 8-bit groups along the input dimension (GGUF Q8_0): ``w ~ q * d``,
    ``d = max |w| / 127``. Returns (``q`` int32 ``[N, K]``, ``d`` float32 ``[K / group_size,
    N]``, the largest ``|w - q * d|`` over each row's ``max |w|``; 0 for a Q8_0 model's own
    weights, such as the embedded model's tied embedding)."""
    import torch

    w = weight.detach().to(torch.float64)
    n, k = w.shape
    groups = w.view(n, k // group_size, group_size)
    d = groups.abs().amax(dim=-1, keepdim=True) / 127
    q = torch.round(groups / torch.where(d > 0, d, torch.ones_like(d))).clamp_(-127, 127)
    row_max = w.abs().amax(dim=1).clamp_min(1e-30)
    error = ((q * d - groups).abs().view(n, k).amax(dim=1) / row_max).max().item()
    return q.view(n, k).to(torch.int32), d[..., 0].T.contiguous().to(torch.float32), float(error)


def _install_head(
    weights: Int4Weights, model: Any, source: Mapping[str, Any], max_rows: int
) -> float | None:
    """Give ``model.lm_head`` an 8-bit copy in ``weights`` for decoding steps of at most
    ``max_rows`` rows (the compiled kernel only); returns its reconstruction error, or None
    where it does not apply."""
    import torch

    from agentenvs.agents.backends.cpu import kernels as cpu_kernels

    head = getattr(model, "lm_head", None)
    if not isinstance(head, torch.nn.Linear) or head.weight.device.type != "cpu":
        return None
    if head.out_features % 64 or head.in_features % GROUP_SIZE or cpu_kernels.load() is None:
        return None
    embedding = getattr(model, "get_input_embeddings", lambda: None)()
    tied = embedding is not None and embedding.weight is head.weight
    weight = source.get(HEAD_NAMES[0])
    if weight is None and tied:
        weight = source.get(HEAD_NAMES[1])
    q, d, error = quantize_q8(head.weight if weight is None else weight)
    packed, scales = cpu_kernels.pack_int8(q, d)
    weights.head = Copy(packed, scales, head.out_features, True, int(max_rows))
    weights.head_module = head
    return error


def _pack(q: Any, scales_zeros: Any, dtype: Any, compiled: bool) -> tuple[Any, Any, bool]:
    """(packed weight, scales, whether the compiled kernel's layout) of one 4-bit copy."""
    import torch

    from agentenvs.agents.backends.cpu import kernels as cpu_kernels

    if _compiled_layout(*q.shape, compiled):
        packed, scales = cpu_kernels.pack_int4(q, scales_zeros)
        return packed, scales, True
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    return packed, scales_zeros.to(dtype), False


def _compiled_layout(n: int, k: int, compiled: bool) -> bool:
    """Whether an ``n x k`` 4-bit copy takes the compiled kernel's layout (asked for, the
    kernel loads, whole 64-column blocks and 32-wide groups)."""
    from agentenvs.agents.backends.cpu import kernels as cpu_kernels

    return compiled and n % 64 == 0 and k % GROUP_SIZE == 0 and cpu_kernels.load() is not None


def install(
    model: Any,
    source: Mapping[str, Any] | None = None,
    *,
    max_rows: int = MAX_ROWS,
    compiled: bool = True,
) -> Int4Weights:
    """4-bit copies of every ``nn.Linear`` of ``model``'s decoder layers (not the LM head) for
    calls of at most ``max_rows`` rows, kept in the returned :class:`Int4Weights` (the model is
    not changed). ``source``: float32 weights by parameter name (e.g. the checkpoint's),
    quantized instead of the module's own, possibly rounded, weight. A float32 layer gets one
    only where the compiled kernel takes it (``compiled``, outputs a multiple of 64)."""
    import torch

    if not available():
        raise RuntimeError("this torch build has no _weight_int4pack_mm_for_cpu kernel")
    weights = Int4Weights()
    layers, worst = 0, 0.0
    kinds: set[bool] = set()
    quantized: dict[str, tuple[Any, Any]] = {}
    for name, module in _decoder_linears(model):
        takes = _compiled_layout(module.out_features, module.in_features, compiled)
        if module.weight.dtype == torch.float32 and not takes:
            continue  # a float32 layer the compiled kernel cannot take keeps its own weight
        weight = (source or {}).get(f"{name}.weight", module.weight)
        q, scales_zeros, error = quantize_groups(weight)
        quantized[name] = (q, scales_zeros)
        packed, scales, kind = _pack(q, scales_zeros, module.weight.dtype, compiled)
        weights.layers[module] = Copy(packed, scales, module.out_features, kind, int(max_rows))
        layers += 1
        worst = max(worst, error)
        kinds.add(kind)
    _install_fused(weights, model, quantized, max_rows)
    head = _install_head(weights, model, source or {}, max_rows) if compiled else None
    weights.report = Int4Report(layers, worst, compiled=kinds == {True}, head_relative_error=head)
    return weights


def _install_fused(
    weights: Int4Weights, model: Any, quantized: Mapping[str, tuple[Any, Any]], max_rows: int
) -> None:
    """One copy per module whose children are one of :data:`FUSED`'s groups (all switched,
    the same kind): the children's rows stacked in order, in ``weights.fused[(parent,
    group)]``."""
    import torch

    modules = dict(model.named_modules())
    parents = {name.rpartition(".")[0] for name in quantized}
    for parent in sorted(parents):
        for group, children in FUSED.items():
            names = [f"{parent}.{child}" for child in children]
            if not all(n in quantized for n in names):
                continue
            first = modules[names[0]]
            if len({weights.layers[modules[n]].compiled for n in names}) != 1:
                continue
            q = torch.cat([quantized[n][0] for n in names])
            if q.shape[0] % 64:  # the packings' block of output rows
                continue
            scales_zeros = torch.cat([quantized[n][1] for n in names], dim=1)
            compiled = weights.layers[first].compiled
            packed, scales, kind = _pack(q, scales_zeros, first.weight.dtype, compiled)
            copy = Copy(packed, scales, q.shape[0], kind, int(max_rows))
            weights.fused[(modules[parent], group)] = copy
