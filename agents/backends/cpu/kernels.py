"""The CPU engine's compiled kernels: decoding and prefill attention, 4-bit and 8-bit weight
products (:func:`int4_linear`, :func:`int8_linear`) and the sampler (:func:`sample_rows`).

``kernels.c`` holds them: per (row, key head) a float32 softmax over the visible positions (the
shared prefix's first, masked ones skipped), on AMX tiles where the CPU has them (Linux grants
them per process on first use), else vector loops; 4-bit and 8-bit products with integer dot
products (AVX-512 VNNI, else AVX2's ``vpmaddubsw``/``vpmaddwd``, else plain float32 sums,
:func:`int_dot_path`); a sampler inverting each row's distribution in one pass. Each row's
result is its own sums in a fixed order: the same bits alone or in any batch, at any thread
count (the tests check it). Measurements and the arithmetic in detail: ``docs/cpu-engine.md``.

Build: on first use :func:`load` compiles ``kernels.c`` with the system C compiler (``$CC``,
else ``gcc`` or ``cc``; ``-O3 -march=native -ffast-math -fopenmp``, about a second) into
``$AGENTENVS_CACHE/kernels`` (else ``~/.cache/agentenvs/kernels``), one file per source,
compiler and CPU, and checks it against a float32 reference on random inputs. Where any step
fails (no compiler, no OpenMP, a failed check) :func:`load` returns None, :func:`load_error`
says why, and the engine keeps the two-bmm attention and torch's 4-bit kernel (its line in
``run.json`` says so).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "INT4_ROWS",
    "MAX_DIM",
    "SOURCE",
    "decode_attention",
    "int4_linear",
    "int_dot_path",
    "int8_linear",
    "kernel_dir",
    "load",
    "load_error",
    "pack_int4",
    "pack_int8",
    "prefill_attention",
    "prefill_kernel_error",
    "prune_builds",
    "sample_rows",
    "set_tiles",
    "takes_dtype",
    "tiles_available",
]

SOURCE = Path(__file__).with_name("kernels.c")
MAX_DIM = 256  # head sizes the kernel takes (MAX_DIM in kernels.c)
_COMPILE = ["-O3", "-march=native", "-ffast-math", "-mprefer-vector-width=512", "-fopenmp"]
_STATE: dict[str, Any] = {}
KEPT_BUILDS = 8  # compiled kernels kept in kernel_dir() (one per source, compiler and CPU)


def kernel_dir() -> Path:
    """Where compiled kernels are kept (``$AGENTENVS_CACHE/kernels``)."""
    from agentenvs.agents.models import cache_root

    return cache_root() / "kernels"


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def _build(compiler: str) -> Path:
    """The shared library for this source, compiler and CPU, compiled if not there yet."""
    version = subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    key = hashlib.sha256(
        "\0".join([SOURCE.read_text(), version, " ".join(_COMPILE), _cpu_flags()]).encode()
    ).hexdigest()[:16]
    target = kernel_dir() / f"decode_attention-{key}.so"
    if target.exists():
        os.utime(target)  # last used now: pruning keeps the builds in use
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as work:
        obj, lib = Path(work) / "kernel.o", Path(work) / "kernel.so"
        # compiled with -ffast-math but linked without it: linking with it would add
        # crtfastmath, which sets flush-to-zero for the whole process when the library loads
        steps = [
            [compiler, *_COMPILE, "-fPIC", "-c", str(SOURCE), "-o", str(obj)],
            [compiler, "-shared", "-fopenmp", str(obj), "-o", str(lib), "-lm"],
        ]
        for command in steps:
            done = subprocess.run(command, capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(command[:2])} ...: {done.stderr.strip()[-400:]}")
        os.replace(lib, target)  # atomic: another process may be building the same file
    prune_builds(target.parent)
    return target


def prune_builds(directory: Path, keep: int = KEPT_BUILDS) -> list[Path]:
    """Delete all but the ``keep`` most recently used builds in ``directory`` (every edit of the
    source, compiler update or CPU sharing the cache adds one); returns the deleted paths. A
    process that has a deleted build loaded keeps its mapping; one that needs it again
    rebuilds it (about a second)."""
    builds = []
    for path in directory.glob("decode_attention-*.so"):
        try:
            builds.append((path.stat().st_mtime, path))
        except OSError:  # deleted meanwhile by another process
            continue
    builds.sort(reverse=True)
    deleted = []
    for _, path in builds[keep:]:
        try:
            path.unlink()
            deleted.append(path)
        except OSError:
            continue
    return deleted


def load() -> Any:
    """The compiled kernel's function, or None (then :func:`load_error` says why)."""
    if "function" in _STATE:
        return _STATE["function"]
    function, error = None, None
    try:
        compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
        if not compiler:
            raise RuntimeError("no C compiler found (set CC, or install gcc)")
        library = ctypes.CDLL(str(_build(compiler)))
        function = library.decode_attention_bf16
        pointer, number = ctypes.c_void_p, ctypes.c_int
        function.restype = number
        function.argtypes = [pointer] * 6 + [number, pointer] + [number] * 6
        function.argtypes += [ctypes.c_float, number]
        f32 = library.decode_attention_f32
        f32.restype, f32.argtypes = number, function.argtypes
        _STATE["attention_f32"] = f32
        int4 = library.int4_linear_bf16
        int4.restype = number
        int4.argtypes = [pointer] * 4 + [number] * 6
        int8 = library.int8_linear_bf16
        int8.restype = number
        int8.argtypes = [pointer] * 4 + [number] * 6
        library.int_dot_path.restype = number
        _STATE["int8"], _STATE["int_dot_path"] = int8, library.int_dot_path()
        prefill = library.prefill_attention_bf16
        prefill.restype = number
        prefill.argtypes = [pointer] * 4 + [number, pointer] + [number] * 5
        prefill.argtypes += [ctypes.c_float, number]
        library.tiles_available.restype = number
        library.set_tiles.restype = number
        library.set_tiles.argtypes = [number]
        library.set_tiles(1)
        _STATE["prefill"], _STATE["library"] = prefill, library
        sample = library.sample_rows
        sample.restype = number
        sample.argtypes = [pointer, number, number, ctypes.c_float, pointer, pointer, pointer]
        sample.argtypes += [number]
        _STATE["function"], _STATE["int4"], _STATE["sample"] = function, int4, sample
        _self_check()
    except Exception as exc:  # noqa: BLE001 (any failure means: keep the bmm path)
        function, error = None, f"{type(exc).__name__}: {exc}"
    _STATE["function"], _STATE["error"] = function, error
    return function


def load_error() -> str | None:
    """Why :func:`load` returned None (None if it did not, or was not called)."""
    return _STATE.get("error")


def decode_attention(
    query: Any, keys: Any, values: Any, length: int, mask: Any, prefix: Any, scale: float
) -> Any:
    """``[rows, 1, heads, dim]`` attention output of one query token per row.

    ``query``: ``[rows, heads, 1, dim]``; ``keys``/``values``: contiguous
    ``[rows, kv_heads, capacity, dim]`` buffers whose first ``length`` positions are the cache;
    ``mask``: ``[rows, length]`` uint8 (nonzero: visible) or None; ``prefix``: the shared
    prefix's (keys, values) ``[kv_heads, P, dim]`` or None. Everything bfloat16 on CPU, or
    everything float32 (a float32 model's steps: the same positions and sums in float32, no
    rounding of the output)."""
    import torch

    function = load()
    if function is None:
        raise RuntimeError(f"the decoding kernel is not available: {load_error()}")
    if query.dtype == torch.float32:
        function = _STATE["attention_f32"]
    rows, heads, _, dim = query.shape
    kv_heads, capacity = keys.shape[1], keys.shape[2]
    if dim > MAX_DIM:
        raise ValueError(f"the decoding kernel takes heads of at most {MAX_DIM}, got {dim}")
    q = query.contiguous()
    out = torch.empty((rows, 1, heads, dim), dtype=query.dtype)
    pk, pv = prefix if prefix is not None else (None, None)
    failed = function(
        q.data_ptr(),
        keys.data_ptr(),
        values.data_ptr(),
        mask.data_ptr() if mask is not None else None,
        pk.data_ptr() if pk is not None else None,
        pv.data_ptr() if pv is not None else None,
        pk.shape[1] if pk is not None else 0,
        out.data_ptr(),
        rows,
        heads,
        kv_heads,
        dim,
        capacity,
        length,
        float(scale),
        torch.get_num_threads(),
    )
    if failed:
        raise MemoryError(f"the decoding kernel could not allocate memory for {failed} items")
    return out


def tiles_available() -> bool:
    """Whether the kernels run on AMX tiles here (the CPU has them and Linux granted them):
    the decoding attention's tile path, and :func:`prefill_attention` at all."""
    return load() is not None and bool(_STATE["library"].tiles_available())


def set_tiles(enabled: bool) -> bool:
    """Use the tile paths where they exist (``enabled``), or the vector ones everywhere, as
    for the tests that compare them; returns the previous setting. The two
    paths round differently: switch before a run, not inside one."""
    if load() is None:
        return False
    return bool(_STATE["library"].set_tiles(int(enabled)))


def prefill_kernel_error(model: Any) -> str | None:
    """Why :func:`prefill_attention` cannot run ``model``'s prefill (None when it can)."""
    import torch

    config = getattr(model, "config", None)
    dim = getattr(config, "head_dim", None) or (
        config.hidden_size // config.num_attention_heads if config is not None else None
    )
    if next(model.parameters()).dtype != torch.bfloat16:
        return "the prefill kernel is for bfloat16 models"
    if load() is None:
        return load_error()
    if not tiles_available():
        return "no AMX tiles on this CPU (or Linux did not grant them)"
    if dim != 64:
        return f"the prefill kernel takes heads of 64, got {dim}"
    return None


def prefill_attention(
    query: Any, keys: Any, values: Any, layout: Sequence[Sequence[int]], scale: float
) -> Any | None:
    """``[batch, q_len, heads, dim]`` attention of prefill chunks, or None where the kernel
    does not apply (no AMX tiles, a head size other than 64). ``layout``: (key row, start, stop,
    new, query row, end) per chunk, the 6-number entries of
    :func:`agentenvs.agents.backends.cpu.attention.rows_attention`.

    ``query``: ``[batch, heads, q_len, dim]``; ``keys``/``values``: contiguous
    ``[rows, kv_heads, capacity, dim]`` buffers; everything bfloat16 on CPU. Positions of the
    query rows outside every chunk come out zero."""
    import torch

    if not tiles_available() or query.shape[-1] != 64:
        return None
    batch, heads, q_len, dim = query.shape
    kv_heads, capacity = keys.shape[1], keys.shape[2]
    chunks = [tuple(entry) for entry in layout]
    table = torch.tensor(chunks, dtype=torch.int32).contiguous()
    q = query.transpose(1, 2).contiguous()
    out = torch.zeros((batch, q_len, heads, dim), dtype=query.dtype)
    failed = _STATE["prefill"](
        q.data_ptr(),
        keys.data_ptr(),
        values.data_ptr(),
        table.data_ptr(),
        len(chunks),
        out.data_ptr(),
        q_len,
        heads,
        kv_heads,
        dim,
        capacity,
        float(scale),
        torch.get_num_threads(),
    )
    if failed < 0:
        return None
    if failed:
        raise MemoryError(f"the prefill kernel could not allocate memory in {failed} threads")
    return out


INT4_ROWS = 16  # rows per int4_linear call at most (INT4_ROWS in kernels.c)


def pack_int4(q: Any, scales_zeros: Any) -> tuple[Any, Any]:
    """:func:`int4_linear`'s layout of 4-bit weights: ``q`` int ``[N, K]`` in 0..15 and
    ``scales_zeros`` float32 ``[K / 32, N, 2]`` (scale, zero; ``w = (q - 8) * scale + zero``,
    :func:`agentenvs.agents.backends.cpu.int4.quantize_groups`) as (packed uint8, float32 scales and
    lows, ``w = q * scale + low``; the layout is ``kernels.c``'s). ``N % 64 == 0`` and
    ``K % 32 == 0``."""
    import torch

    n, k = q.shape
    if n % 64 or k % 32:
        raise ValueError(f"int4_linear takes N % 64 == 0 and K % 32 == 0, got {n} x {k}")
    blocks, groups = n // 64, k // 32
    # [block, panel, column, group, chunk, low/high, i] -> [block, group, panel, chunk, column, i]
    nib = q.to(torch.uint8).view(blocks, 4, 16, groups, 4, 2, 4)
    packed = (nib[..., 0, :] | (nib[..., 1, :] << 4)).permute(0, 3, 1, 4, 2, 5).contiguous()
    scale = scales_zeros[..., 0].double()
    low = scales_zeros[..., 1].double() - 8 * scale
    pair = torch.stack([scale, low], dim=0).float()  # [2, groups, N]
    pair = pair.view(2, groups, blocks, 64).permute(2, 1, 0, 3).contiguous()
    return packed.view(-1), pair.view(-1)


def pack_int8(q: Any, scales: Any) -> tuple[Any, Any]:
    """:func:`int8_linear`'s layout of 8-bit weights (GGUF Q8_0, ``w = q * d``): ``q`` int
    ``[N, K]`` in -127..127 and ``scales`` float32 ``[K / 32, N]`` (``d``) as (packed uint8,
    float32 scales). ``N % 64 == 0`` and ``K % 32 == 0``."""
    import torch

    n, k = q.shape
    if n % 64 or k % 32:
        raise ValueError(f"int8_linear takes N % 64 == 0 and K % 32 == 0, got {n} x {k}")
    blocks, groups = n // 64, k // 32
    shifted = (q.to(torch.int16) + 128).to(torch.uint8).view(blocks, 4, 16, groups, 8, 4)
    packed = shifted.permute(0, 3, 1, 4, 2, 5).contiguous()  # [block, group, panel, chunk, col, i]
    laid = scales.to(torch.float32).view(groups, blocks, 64).transpose(0, 1).contiguous()
    return packed.view(-1), laid.view(-1)


def int8_linear(
    x: Any, packed: Any, scales: Any, out_features: int, *, float32: bool = False
) -> Any:
    """:func:`int4_linear` for 8-bit weights from :func:`pack_int8` (the same activation
    scheme and row-invariance); ``float32``: the sums as they are, not rounded to bfloat16
    (an LM head's logits: bfloat16 would round logits near 40 to 0.125)."""
    return _linear("int8", x, packed, scales, out_features, float32=float32)


def int4_linear(x: Any, packed: Any, scales: Any, out_features: int) -> Any:
    """``x @ w.T`` for ``x`` bfloat16 or float32 ``[rows, K]`` (at most :data:`INT4_ROWS`
    rows; the result in ``x``'s dtype) and 4-bit weights from :func:`pack_int4`: float32 sums
    over ``k`` in order, the same bits for a row whatever the call's row count or thread count."""
    return _linear("int4", x, packed, scales, out_features)


def int_dot_path() -> str:
    """The integer dot products of :func:`int4_linear` and :func:`int8_linear` on this CPU:
    ``vnni`` (AVX-512 VNNI), ``avx2`` (the same integer sums) or ``none`` (plain float32
    sums, several times slower than a float32 ``linear``); ``none`` where the kernels do not
    load."""
    if load() is None:
        return "none"
    return {2: "vnni", 1: "avx2"}.get(_STATE["int_dot_path"], "none")


def takes_dtype(dtype: Any) -> bool:
    """Whether the compiled kernels take values of ``dtype``: bfloat16 or float32."""
    import torch

    return dtype in (torch.bfloat16, torch.float32)


def _linear(
    kind: str, x: Any, packed: Any, scales: Any, out_features: int, float32: bool = False
) -> Any:
    import torch

    if load() is None:
        raise RuntimeError(f"the compiled kernels are not available: {load_error()}")
    if not takes_dtype(x.dtype):
        raise TypeError(f"{kind}_linear takes bfloat16 or float32 rows, got {x.dtype}")
    rows, width = x.shape
    x = x.contiguous()
    x_f32 = x.dtype == torch.float32
    out_f32 = float32 or x_f32
    out = torch.empty((rows, out_features), dtype=torch.float32 if out_f32 else torch.bfloat16)
    arguments = [x.data_ptr(), packed.data_ptr(), scales.data_ptr(), out.data_ptr()]
    arguments += [rows, out_features, width, torch.get_num_threads()]
    failed = _STATE[kind](*arguments, int(x_f32), int(out_f32))
    if failed:
        raise ValueError(f"{kind}_linear cannot take {rows} rows of {width} -> {out_features}")
    return out


def sample_rows(logits: Any, temperature: float, draws: Any) -> tuple[Any, Any]:
    """(tokens int64 ``[rows]``, their log-probs at temperature 1, float32) for float32
    ``logits`` ``[rows, vocab]`` and one uniform draw per row in ``draws``: the first token
    whose cumulative ``exp((l - max) / temperature)`` exceeds the draw times the total
    (``kernels.c``)."""
    import torch

    if load() is None:
        raise RuntimeError(f"the compiled kernels are not available: {load_error()}")
    logits = logits.contiguous()
    draws = draws.to(torch.float32).contiguous()
    rows, vocab = logits.shape
    tokens = torch.empty(rows, dtype=torch.int64)
    logprobs = torch.empty(rows, dtype=torch.float32)
    failed = _STATE["sample"](
        logits.data_ptr(),
        rows,
        vocab,
        1.0 / float(temperature),
        draws.data_ptr(),
        tokens.data_ptr(),
        logprobs.data_ptr(),
        min(torch.get_num_threads(), rows),
    )
    if failed:
        raise MemoryError(f"the sampler could not allocate memory for {failed} rows")
    return tokens, logprobs


def _self_check() -> None:
    """The kernel against a float32 reference on random inputs (a miscompile fails here)."""
    import torch

    generator = torch.Generator().manual_seed(0)
    rows, kv_heads, groups, dim, capacity, length, p = 3, 2, 3, 64, 40, 37, 5
    query = torch.randn((rows, kv_heads * groups, 1, dim), generator=generator)
    keys = torch.randn((rows, kv_heads, capacity, dim), generator=generator)
    values = torch.randn((rows, kv_heads, capacity, dim), generator=generator)
    prefix = (
        torch.randn((kv_heads, p, dim), generator=generator).to(torch.bfloat16),
        torch.randn((kv_heads, p, dim), generator=generator).to(torch.bfloat16),
    )
    mask = torch.ones((rows, length), dtype=torch.uint8)
    mask[1, :7] = 0
    mask[2, 3:30] = 0
    query, keys, values = (t.to(torch.bfloat16) for t in (query, keys, values))
    got = decode_attention(query, keys, values, length, mask, prefix, 0.125).float()
    as_f32 = [t.float() for t in (query, keys, values, *prefix)]
    got32 = decode_attention(*as_f32[:3], length, mask, tuple(as_f32[3:]), 0.125)
    for row in range(rows):
        visible = mask[row].bool()
        k = torch.cat([prefix[0].float(), keys[row, :, :length][:, visible].float()], 1)
        v = torch.cat([prefix[1].float(), values[row, :, :length][:, visible].float()], 1)
        q = query[row, :, 0].float().view(kv_heads, groups, dim)
        want = (torch.softmax(q @ k.transpose(1, 2) * 0.125, -1) @ v).reshape(-1, dim)
        if not torch.allclose(got[row, 0], want, atol=2e-2, rtol=2e-2):
            raise RuntimeError("the compiled kernel disagrees with a float32 reference")
        if not torch.allclose(got32[row, 0], want, atol=1e-4, rtol=1e-4):
            raise RuntimeError("the compiled float32 kernel disagrees with a float32 reference")
    q = torch.randint(0, 16, (128, 64), generator=generator, dtype=torch.int32)
    scales_zeros = torch.rand((2, 128, 2), generator=generator)
    x = torch.randn((3, 64), generator=generator).to(torch.bfloat16)
    groups = scales_zeros.repeat_interleave(32, dim=0).transpose(0, 1)  # [N, K, 2]
    weight = (q.float() - 8) * groups[..., 0] + groups[..., 1]
    got = int4_linear(x, *pack_int4(q, scales_zeros), 128).float()
    if not torch.allclose(got, x.float() @ weight.T, atol=5e-2, rtol=2e-2):
        raise RuntimeError("the compiled 4-bit product disagrees with a float32 reference")
    q8 = torch.randint(-127, 128, (64, 64), generator=generator, dtype=torch.int32)
    d = torch.rand((2, 64), generator=generator) * 0.01
    weight = q8.float() * d.repeat_interleave(32, dim=0).T
    got = int8_linear(x, *pack_int8(q8, d), 64).float()
    if not torch.allclose(got, x.float() @ weight.T, atol=5e-2, rtol=2e-2):
        raise RuntimeError("the compiled 8-bit product disagrees with a float32 reference")
    if _STATE["library"].tiles_available():  # the prefill kernel runs only on tiles
        groups_per_head = 3
        query = torch.randn((1, kv_heads * groups_per_head, 9, 64), generator=generator)
        query = query.to(torch.bfloat16)
        layout = [(2, 3, 30, 5, 0, 5), (0, 0, 40, 4, 0, 9)]  # (key row, start, stop, new, row, end)
        got = prefill_attention(query, keys, values, layout, 0.125)
        for key_row, start, stop, new, _, end in layout:
            span = stop - start
            k = keys[key_row, :, start:stop].float().repeat_interleave(groups_per_head, dim=0)
            v = values[key_row, :, start:stop].float().repeat_interleave(groups_per_head, dim=0)
            visible = torch.ones(new, span, dtype=torch.bool).tril_(span - new)
            want = torch.nn.functional.scaled_dot_product_attention(
                query[0, :, end - new : end].float(), k, v, attn_mask=visible, scale=0.125
            )
            if got is None or not torch.allclose(
                got[0, end - new : end].transpose(0, 1).float(), want, atol=2e-2, rtol=2e-2
            ):
                raise RuntimeError("the compiled prefill attention disagrees with a float32 pass")
