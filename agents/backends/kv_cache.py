"""KV caches of the transformers backend: per-episode prefix caching across turns, and helpers.

A multi-turn rollout renders each turn's prompt as the whole conversation so far; the new prompt
extends the previous one (prompt + reply + the environment's next observation + the next
assistant header). :class:`PrefixCache` keeps, per episode, the keys and values the model
computed for the previous turn's prompt and reply, so the next turn runs only its new tokens.

Design (the cache lifetime is coordinated by the caller through episode keys):

* **Entries are keyed by episode** (``TransformersPolicy.generate(..., keys=[...])``; the rollout
  passes ``"<group id>/<sample index>"``). After a generation call, each keyed row's entry
  becomes its prompt plus its reply (the reply's last token excluded: the sampler never fed it
  through the model). Calls without keys leave nothing behind.
* **Reuse is decided by token equality, never trusted from the key.** A prompt reuses the longest
  common token prefix between itself and an entry: its own episode's entry first, else the best
  over every live entry (a new episode shares the system prompt and often its task's first
  observation with the episodes in flight). Keys before the divergence point depend only on the
  tokens before it (causal attention), so truncating an entry there is exact. This covers every
  fallback without special cases: a history window that drops old turns, a chat template that
  re-renders earlier turns, a reply whose text re-tokenizes differently, a restored episode, a
  stale key: the matching part is reused, the rest is encoded again (from scratch when nothing
  matches). At least one prompt token is always recomputed (its logits start the reply).
* **Memory is bounded**: finished episodes are released by the rollout
  (``TransformersPolicy.end_episodes``), entries are evicted least-recently-used past a byte
  budget, and the whole cache is dropped when the model's weights change (an in-place optimizer
  step or ``load_state_dict`` bumps the parameters' version counters) or its device or dtype does.
  Weights written through ``.data`` bypass the version counters: call
  ``TransformersPolicy.clear_cache()`` after such an update.

Only plain per-layer key/value caches are reused (:func:`cache_layers`); models with sliding
window or recurrent layers run without prefix caching.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "CacheStats",
    "CachedSequence",
    "PrefixCache",
    "buffer_cache",
    "cache_layers",
    "common_prefix_length",
    "default_budget_bytes",
    "make_cache",
    "packed_cache",
    "select_rows",
    "split_shared_prefix",
    "weights_fingerprint",
    "writes_in_place",
]

MIN_REUSE = 16  # shorter matches are not worth a separate cached forward pass
AUTO_BUDGET_SHARE = 0.25  # of free accelerator memory / available RAM, for budget "auto"

Layers = list[tuple[Any, Any]]  # per layer (keys, values), each [batch, kv heads, length, dim]


@dataclass
class CacheStats:
    """Prompt tokens seen by generation calls, split into reused (from the cache) and computed."""

    prompt_tokens: int = 0
    reused_tokens: int = 0
    rows_reusing: int = 0
    rows: int = 0
    evictions: int = 0
    invalidations: int = 0

    @property
    def reused_share(self) -> float:
        return self.reused_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


class CachedSequence:
    """The keys and values of one token sequence (one row: ``[1, heads, len(tokens), dim]``)."""

    def __init__(self, tokens: Sequence[int], layers: Layers) -> None:
        self.tokens = np.asarray(tokens, dtype=np.int64)
        self.layers = layers
        assert all(k.shape[2] == len(self.tokens) for k, _ in layers)
        self.nbytes = sum(
            k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers
        )

    def __len__(self) -> int:
        return len(self.tokens)

    def prefix(self, length: int) -> Layers:
        """Views of the first ``length`` positions (no copy)."""
        return [(k[:, :, :length], v[:, :, :length]) for k, v in self.layers]


class PrefixCache:
    """Per-episode KV entries with token-prefix matching and a byte budget (module docstring)."""

    def __init__(self, budget_bytes: int) -> None:
        if budget_bytes < 0:
            raise ValueError(f"the prefix cache budget must be >= 0 bytes, got {budget_bytes}")
        self.budget_bytes = int(budget_bytes)
        self.entries: OrderedDict[str, CachedSequence] = OrderedDict()
        self.stats = CacheStats()
        self._fingerprint: Any = None

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.entries.values())

    def check_weights(self, fingerprint: Any) -> None:
        """Drop every entry when the model's weights (or device, dtype) changed since the last
        call: entries computed with other weights are wrong for the new ones."""
        if fingerprint != self._fingerprint:
            if self.entries:
                self.stats.invalidations += 1
            self.clear()
            self._fingerprint = fingerprint

    def match(self, key: str | None, prompt: Sequence[int]) -> tuple[CachedSequence | None, int]:
        """The entry sharing the longest token prefix with ``prompt`` and the reusable length
        (at most ``len(prompt) - 1``; 0 with None when no entry shares ``MIN_REUSE`` tokens)."""
        tokens = np.asarray(prompt, dtype=np.int64)
        best, best_n = None, 0
        own = self.entries.get(key) if key is not None else None
        if own is not None:
            best, best_n = own, _lcp(own.tokens, tokens)
        if own is None or best_n < len(own):  # not a full extension: another may match more
            for entry in self.entries.values():
                if entry is not own:
                    n = _lcp(entry.tokens, tokens)
                    if n > best_n:
                        best, best_n = entry, n
        usable = min(best_n, len(tokens) - 1)
        if best is None or usable < MIN_REUSE:
            return None, 0
        return best, usable

    def store(self, key: str, entry: CachedSequence) -> None:
        """Make ``entry`` the cache of ``key`` (replacing the old one), then evict past budget."""
        self.entries.pop(key, None)
        self.entries[key] = entry
        total = self.nbytes
        while total > self.budget_bytes and self.entries:
            _, evicted = self.entries.popitem(last=False)
            total -= evicted.nbytes
            self.stats.evictions += 1

    def release(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.entries.pop(key, None)

    def clear(self) -> None:
        self.entries.clear()


def weights_fingerprint(model: Any) -> tuple[Any, ...]:
    """Changes whenever a parameter is modified in place (optimizer step, load_state_dict),
    moved or cast: the parameters' version counters, device and dtype."""
    params = list(model.parameters())
    first = params[0] if params else None
    try:
        version: int | None = sum(p._version for p in params)
    except RuntimeError:  # inference tensors have no version counter: call clear_cache yourself
        version = None
    return (
        id(model),
        version,
        None if first is None else (str(first.device), str(first.dtype)),
    )


def default_budget_bytes(device: Any) -> int:
    """``AUTO_BUDGET_SHARE`` of the free accelerator memory, or of the available RAM on CPU."""
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * AUTO_BUDGET_SHARE)
    try:
        with open("/proc/meminfo") as fh:
            info = dict(line.split(":", 1) for line in fh)
        available = int(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        available = 4 << 30
    return int(available * AUTO_BUDGET_SHARE)


def common_prefix_length(prompts: Sequence[Sequence[int]]) -> int:
    """The length of the longest common prefix, leaving every prompt at least one own token."""
    arrays = [np.asarray(p, dtype=np.int64) for p in prompts]
    n = min(len(a) for a in arrays) - 1
    for other in arrays[1:]:
        n = min(n, _lcp(arrays[0][:n], other))
    return max(n, 0)


def _lcp(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


# --------------------------------------------------------------------------------------------
# transformers cache objects


def cache_layers(cache: Any) -> Layers | None:
    """The (keys, values) tensors per layer of a plain dynamic cache (None for other kinds)."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        pairs = [(getattr(layer, "keys", None), getattr(layer, "values", None)) for layer in layers]
    elif hasattr(cache, "key_cache"):  # transformers 4.x
        pairs = list(zip(cache.key_cache, cache.value_cache, strict=True))
    else:
        return None
    if not pairs or any(k is None or v is None or k.dim() != 4 for k, v in pairs):
        return None
    if getattr(cache, "is_sliding", None) and any(cache.is_sliding):
        return None
    return pairs


def make_cache(pairs: Sequence[tuple[Any, Any]], capacity: int | None = None) -> Any:
    """A dynamic cache holding ``pairs`` (never written in place: new positions are appended to
    copies); with ``capacity`` (transformers 5.x), its layers copy ``pairs`` into buffers of that
    many positions and write new positions in place instead of concatenating."""
    if capacity is not None and _growing_layer_class() is not None:
        buffers = []
        for keys, values in pairs:
            batch, heads, length, _ = keys.shape
            kbuf = keys.new_zeros((batch, heads, max(capacity, length), keys.shape[-1]))
            vbuf = values.new_zeros((batch, heads, max(capacity, length), values.shape[-1]))
            kbuf[:, :, :length] = keys
            vbuf[:, :, :length] = values
            buffers.append((kbuf, vbuf))
        return buffer_cache(buffers, pairs[0][0].shape[2])
    from transformers import DynamicCache

    try:
        return DynamicCache(ddp_cache_data=list(pairs))
    except TypeError:  # transformers 4.x
        return DynamicCache.from_legacy_cache(tuple(pairs))


def buffer_cache(buffers: Sequence[tuple[Any, Any]], length: int) -> Any:
    """A dynamic cache over preallocated ``[batch, heads, capacity, dim]`` buffers whose first
    ``length`` positions are filled; new positions are written in place (transformers 5.x;
    before that, a plain cache of the filled part)."""
    from transformers import DynamicCache

    layer_class = _growing_layer_class()
    filled = [(k[:, :, :length], v[:, :, :length]) for k, v in buffers]
    if layer_class is None:
        return make_cache(filled)
    cache = DynamicCache(ddp_cache_data=[(k[:, :, :0], v[:, :, :0]) for k, v in buffers])
    cache.layers = [layer_class(k, v, length) for k, v in buffers]
    return cache


def packed_cache(buffers: Sequence[tuple[Any, Any]], writes: Sequence[tuple[int, ...]]) -> Any:
    """A cache over ``buffers`` for one forward pass of packed rows (transformers 5.x):
    ``writes[r]`` = (buffer row, stop, new): input row ``r``'s last ``new`` positions' keys go
    to ``[stop - new, stop)`` of that buffer row, and nothing else is written (the padding
    never overwrites a cached position); or (buffer row, stop, new, input row, end): the keys
    of positions ``[end - new, end)`` of that input row (chunks end to end in one sequence).
    The layers then return the whole buffers: only
    :func:`agentenvs.agents.backends.cpu.attention.rows_attention` reads them, each row its own
    positions."""
    width = max(write[1] for write in writes)
    cache = buffer_cache(buffers, max(0, width - max(write[2] for write in writes)))
    for layer in cache.layers:
        layer.row_writes = [tuple(int(x) for x in write) for write in writes]
    return cache


def select_rows(cache: Any, index: Any) -> Any:
    """A cache of only the batch rows ``index`` (a 1-D long tensor) of a :func:`buffer_cache`:
    new zeroed buffers of the same capacity with those rows' filled positions copied (zeros, not
    garbage, past them: :mod:`agentenvs.agents.backends.cpu.attention` reads whole buffers, masked).
    None for other caches (then the caller keeps the whole batch)."""
    layers = getattr(cache, "layers", None)
    growing = _growing_layer_class()
    if growing is None or not layers or not all(type(la) is growing for la in layers):
        return None
    buffers = []
    for layer in layers:
        n = layer._n
        pair = []
        for buffer in (layer._k, layer._v):
            fresh = buffer.new_zeros((len(index), *buffer.shape[1:]))
            fresh[:, :, :n] = buffer[:, :, :n].index_select(0, index)
            pair.append(fresh)
        buffers.append((pair[0], pair[1]))
    return buffer_cache(buffers, layers[0]._n)


def split_shared_prefix(
    cache: Any, attention_mask: Any, shared: int, min_shared: int = 32
) -> tuple[Any, Any, list[tuple[Any, Any]]] | None:
    """Cut a right-aligned :func:`buffer_cache` of prompts whose first ``shared`` tokens are the
    same into (a cache of what follows the prefix, its attention mask, the prefix's keys and
    values ``[heads, shared, dim]`` per layer) for cascade attention
    (:func:`agentenvs.agents.backends.cpu.attention.shared_prefix`).

    Row ``r`` (``n_r`` tokens, starting at ``s_r = width - n_r``) keeps its tokens past the
    prefix at ``[s_r, width - shared)``, so the new mask is the old one's first
    ``width - shared`` columns. None (keep the cache as it is) when the prefix is shorter than
    ``min_shared``, the cache is another kind, a row's tokens are not one right-aligned block,
    or the rows' prefix keys are not bit for bit the same (they are when they were copied from
    one computation, as ``share_prefix`` and the prefix cache do): sharing them then cannot
    change any row's result beyond the softmax's grouping."""
    import torch

    layers = getattr(cache, "layers", None)
    growing = _growing_layer_class()
    if shared < min_shared or growing is None or not layers:
        return None
    if not all(type(layer) is growing for layer in layers):
        return None
    width = layers[0]._n
    starts = (attention_mask.shape[1] - attention_mask.sum(dim=1)).tolist()
    if attention_mask.shape[1] != width or any(width - s < shared for s in starts):
        return None
    right_aligned = (
        torch.arange(width, device=attention_mask.device)[None, :]
        >= torch.tensor(starts, device=attention_mask.device)[:, None]
    )
    if not torch.equal(attention_mask.bool(), right_aligned):
        return None  # not one block of tokens per row (e.g. a padded batch prefill's gaps)
    prefix = []
    for layer in layers:
        pair = []
        for buffer in (layer._k, layer._v):
            first = buffer[0, :, starts[0] : starts[0] + shared]
            for row, start in enumerate(starts[1:], start=1):
                if not torch.equal(_bits(buffer[row, :, start : start + shared]), _bits(first)):
                    return None
            pair.append(first.contiguous())
        prefix.append((pair[0], pair[1]))
    buffers = []
    for layer in layers:
        pair = []
        for buffer in (layer._k, layer._v):
            rows, heads, capacity, dim = buffer.shape
            rest = buffer.new_zeros((rows, heads, capacity - shared, dim))
            for row, start in enumerate(starts):
                rest[row, :, start : width - shared] = buffer[row, :, start + shared : width]
            pair.append(rest)
        buffers.append((pair[0], pair[1]))
    return buffer_cache(buffers, width - shared), attention_mask[:, : width - shared], prefix


def _bits(tensor: Any) -> Any:
    """``tensor``'s bits as 64-bit integers where its last dimension allows (a bit-for-bit
    comparison 2-3x faster than one of its values; also exact for NaNs and signed zeros)."""
    import torch

    size = tensor.element_size()
    if size < 8 and tensor.stride(-1) == 1 and tensor.shape[-1] * size % 8 == 0:
        try:
            return tensor.view(torch.int64)
        except RuntimeError:  # an offset or stride that 8-byte elements cannot express
            pass
    return tensor.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}.get(size, torch.int64))


def writes_in_place() -> bool:
    """Whether :func:`buffer_cache` writes new positions into its buffers (transformers 5.x)."""
    return _growing_layer_class() is not None


_GROWING_LAYER: Any = None


def _growing_layer_class() -> Any:
    """A ``DynamicLayer`` that appends into a preallocated buffer (None before transformers 5)."""
    global _GROWING_LAYER
    if _GROWING_LAYER is not None:
        return _GROWING_LAYER or None
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:
        _GROWING_LAYER = False
        return None

    class GrowingLayer(DynamicLayer):
        def __init__(self, key_buffer: Any, value_buffer: Any, length: int) -> None:
            super().__init__()
            self._k, self._v, self._n = key_buffer, value_buffer, length
            self.device = key_buffer.device
            self.is_initialized = True
            self.keys, self.values = self._k[:, :, :length], self._v[:, :, :length]
            self.row_writes: list[tuple[int, ...]] | None = None  # packed_cache()

        def update(
            self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any
        ) -> tuple[Any, Any]:
            import torch

            if self.row_writes is not None:  # a packed pass (packed_cache)
                for row, write in enumerate(self.row_writes):
                    buffer_row, stop, new = write[:3]
                    source, end = (write[3], write[4]) if len(write) == 5 else (row, None)
                    first = -new if end is None else end - new
                    keys, values = (
                        key_states[source, :, first:end],
                        value_states[source, :, first:end],
                    )
                    self._k[buffer_row, :, stop - new : stop] = keys
                    self._v[buffer_row, :, stop - new : stop] = values
                self.keys, self.values = self._k, self._v
                return self.keys, self.values
            end = self._n + key_states.shape[-2]
            if end > self._k.shape[2]:  # out of room: fall back to growing by concatenation
                self._k = torch.cat([self._k[:, :, : self._n], key_states], dim=-2)
                self._v = torch.cat([self._v[:, :, : self._n], value_states], dim=-2)
            else:
                self._k[:, :, self._n : end] = key_states
                self._v[:, :, self._n : end] = value_states
            self._n = end
            self.keys, self.values = self._k[:, :, :end], self._v[:, :, :end]
            return self.keys, self.values

    _GROWING_LAYER = GrowingLayer
    return GrowingLayer
