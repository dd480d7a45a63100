"""Where each row of a prefill starts: its *base*, the cached keys and values of its longest
reusable prefix, for :class:`agentenvs.agents.backends.prefill.PrefillMixin`.

A row's base comes from the prefix cache (:meth:`BasesMixin._cached_bases`: the longest prefix
of its prompt that its episode's cached sequence holds) or, with ``share_prefix``, from the
batch's common prefix computed once (:meth:`BasesMixin._share_prefix`, extending the longest
base that covers part of it). Bases are reused only for models whose KV cache is a plain
per-layer one (probed once with one token, :meth:`BasesMixin._plain_cache`); the prefill's
buffers take their shapes from that probe (:meth:`BasesMixin._kv_buffers`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentenvs.agents.backends.kv_cache import (
    MIN_REUSE,
    cache_layers,
    common_prefix_length,
    make_cache,
)

__all__ = ["Base", "BasesMixin", "Layers", "Piece"]

Layers = list[tuple[Any, Any]]
Base = tuple["Layers | None", int]  # cached keys/values of a row's first n prompt tokens, and n


class BasesMixin:
    """The rows' bases and the KV layout; the policy provides ``model``, ``device``,
    ``pad_id``, ``prefix_cache``, ``engine`` (the CPU engine or None) and the cache argument
    names, and the prefill mixin :meth:`_packed_passes` (a base extended with the engine runs
    as a row's own pass runs)."""

    model: Any
    device: Any
    pad_id: int
    prefix_cache: Any
    engine: Any
    _layout: list[tuple[Any, ...]] | None
    _cache_arg: str
    _keep_last: dict[str, Any]

    def _plain_cache(self) -> bool:
        """Whether the model's KV cache is a plain per-layer one (probed once, one token)."""
        if self._layout is None:
            import torch

            with torch.inference_mode():
                probe = torch.tensor([[self.pad_id]], device=self.device)
                out = self.model(input_ids=probe, use_cache=True)
            layers = cache_layers(getattr(out, self._cache_arg)) or []
            self._layout = [
                (k.shape[1], k.shape[3], v.shape[1], v.shape[3], k.dtype) for k, v in layers
            ]
        return bool(self._layout)

    def _kv_buffers(self, rows: int, capacity: int) -> list[tuple[Any, Any]]:
        """Zeroed ``[rows, heads, capacity, dim]`` key and value buffers for every layer."""
        import torch

        assert self._layout, "only for models with plain caches"
        return [
            (
                torch.zeros((rows, kh, capacity, kd), dtype=dtype, device=self.device),
                torch.zeros((rows, vh, capacity, vd), dtype=dtype, device=self.device),
            )
            for kh, kd, vh, vd, dtype in self._layout
        ]

    def _cached_bases(
        self, prompts: Sequence[Sequence[int]], keys: Sequence[str | None]
    ) -> list[Base]:
        """Each row's longest reusable prefix in the prefix cache (module docstring)."""
        if self.prefix_cache is None or not self.prefix_cache.entries or not self._plain_cache():
            bases: list[Base] = [(None, 0)] * len(prompts)
        else:
            bases = []
            for prompt, key in zip(prompts, keys, strict=True):
                entry, n = self.prefix_cache.match(key, prompt)
                bases.append((entry.prefix(n), n) if entry is not None else (None, 0))
        if self.prefix_cache is not None:
            stats = self.prefix_cache.stats
            stats.rows += len(prompts)
            stats.prompt_tokens += sum(len(p) for p in prompts)
            stats.reused_tokens += sum(n for _, n in bases)
            stats.rows_reusing += sum(1 for _, n in bases if n)
        return bases

    def _share_prefix(self, prompts: Sequence[Sequence[int]], bases: list[Base]) -> list[Base]:
        """Give every row whose base is shorter than the batch's common prefix that prefix,
        computed once (extending the longest base that covers part of it)."""
        shared = common_prefix_length(prompts)
        if shared < MIN_REUSE or all(n >= shared for _, n in bases):
            return bases
        layers, n = max(bases, key=lambda b: b[1])
        if n >= shared:
            prefix = [(k[:, :, :shared], v[:, :, :shared]) for k, v in layers]
        else:
            prefix = self._extend(layers if n else None, n, prompts[0][n:shared])
        return [(prefix, shared) if n < shared else (lay, n) for lay, n in bases]

    def _extend(self, layers: Layers | None, start: int, new_tokens: Sequence[int]) -> Layers:
        """The keys and values of ``layers`` (``start`` positions, or none) plus ``new_tokens``
        (with the engine, computed as a row's own pass computes them)."""
        import torch

        if self.engine is not None:
            total = start + len(new_tokens)
            buffers = self._kv_buffers(1, total)
            for (kb, vb), (k, v) in zip(buffers, layers or [], strict=False):
                kb[:, :, :start] = k
                vb[:, :, :start] = v
            self._packed_passes(buffers, [Piece(0, 0, start, new_tokens)])
            return buffers
        ids = torch.tensor([list(new_tokens)], dtype=torch.long, device=self.device)
        positions = torch.arange(start, start + ids.shape[1], device=self.device)[None]
        kwargs: dict[str, Any] = {"position_ids": positions}
        if layers is not None:
            kwargs[self._cache_arg] = make_cache(layers)
        out = self.model(input_ids=ids, use_cache=True, **kwargs, **self._keep_last)
        extended = cache_layers(getattr(out, self._cache_arg))
        assert extended is not None  # only called for models with plain caches
        return extended


@dataclass(frozen=True)
class Piece:
    """Tokens to run into row ``buffer_row`` of a batch's buffers, where that row's position 0
    sits at ``key_start``: positions ``first`` onwards (the earlier ones are there already)."""

    buffer_row: int
    key_start: int
    first: int
    tokens: Sequence[int]
