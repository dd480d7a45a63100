"""Prefill for :class:`agentenvs.agents.backends.transformers_backend.TransformersPolicy`: each
row starts from a *base* (the cached keys of its longest reusable prefix, from the prefix cache
or the batch's common prefix computed once with ``share_prefix``;
:mod:`agentenvs.agents.backends.prefill_bases`) and runs its remaining tokens: row by row on CPU
(the fast causal attention path) into right-aligned preallocated buffers, or as one padded batch
on GPU. Decoding then writes into the same buffers, ``max_new_tokens`` wide.

With the CPU engine (``cpu_engine="auto"``) every prompt runs in chunks of at most
``MAX_PREFILL_QUERIES`` tokens through the engine's own forward pass
(:meth:`agentenvs.agents.backends.cpu.engine.CpuEngine.prefill_pass`), and the rows of a batch
run *packed*: each round's chunks (every row's next one) in one forward pass, end to end with no
padding. The weights' products then see many rows at once (the decoder's products for 45 tokens took
22 ms, for 8 rows of 45 packed 91 ms, two threads), while each row's attention reads its own
positions only and its keys land where a row-by-row pass would put them. (Left-padded passes
of similar lengths would pad a first turn's 664 new tokens to 1,004 rows in three passes.) A
row's result is the same bit for bit alone, split at the batch's shared prefix, or
packed: the products are row-independent and the bmm attention does not depend on the cut (the
tests check it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentenvs.agents.backends.cpu.attention import MAX_PREFILL_QUERIES
from agentenvs.agents.backends.hf_loading import left_pad
from agentenvs.agents.backends.kv_cache import (
    buffer_cache,
    cache_layers,
    packed_cache,
    writes_in_place,
)
from agentenvs.agents.backends.prefill_bases import Base, BasesMixin, Layers, Piece

if TYPE_CHECKING:
    import torch

__all__ = ["Base", "Layers", "PrefillMixin"]


class PrefillMixin(BasesMixin):
    """The prefill strategies; the policy provides ``model``, ``device``, ``pad_id``,
    ``prefix_cache``, ``share_prefix``, ``rowwise_prefill``, ``engine`` (the CPU engine or
    None: with it, prompts run packed, :meth:`_packed_passes`) and the cache argument names;
    the rows' bases are :class:`~agentenvs.agents.backends.prefill_bases.BasesMixin`'s."""

    share_prefix: bool
    rowwise_prefill: bool
    share_identical_rows: bool = True
    """Row-wise prefill: run a prompt once for the rows that have it with the same base
    (:meth:`_row_passes`); the same outputs either way (False: every row its own pass)."""
    shared_row_passes: int = 0
    """Rows that took an identical earlier row's pass instead of their own."""

    def _prefill(
        self, prompts: Sequence[Sequence[int]], bases: list[Base], max_new_tokens: int
    ) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """Run the prompts past their bases; returns (output with cache, mask, position ids)."""
        plain = self._plain_cache()
        if plain and self.share_prefix and len(prompts) > 1:
            bases = self._share_prefix(prompts, bases)
        if plain and self.rowwise_prefill:
            return self._prefill_rows(prompts, bases, max_new_tokens)
        if any(n for _, n in bases):
            return self._prefill_batch(prompts, bases, max_new_tokens)
        input_ids, attention_mask = left_pad(prompts, self.pad_id, self.device)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            **self._keep_last,
        )
        return out, attention_mask, position_ids

    def _prefill_rows(
        self, prompts: Sequence[Sequence[int]], bases: list[Base], max_new_tokens: int
    ) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """Prefill row by row (each past its base) into one left-padded cache for decoding.

        On CPU a padded batch makes SDPA take its slow masked path; one row at a time takes the
        fast causal one (about twice as fast here), and decoding stays batched. Every row is
        right-aligned in zeroed buffers as wide as the longest prompt plus ``max_new_tokens``
        (the attention mask hides the pads): its base is copied in, its forward pass writes its
        new keys in place, and so does every decoding step (no copy of the whole cache). With
        the engine the rows run packed instead (:meth:`_packed_passes`).
        """
        import torch

        lengths = [len(p) for p in prompts]
        width = aligned_width(max(lengths)) if self.engine is not None else max(lengths)
        buffers = self._kv_buffers(len(prompts), width + max_new_tokens)
        for row, (layers, n) in enumerate(bases):
            start = width - lengths[row]
            for (kb, vb), (k, v) in zip(buffers, layers or [], strict=False):
                kb[row, :, start : start + n] = k[0]
                vb[row, :, start : start + n] = v[0]
        if self.engine is not None:
            pieces = [
                Piece(row, width - lengths[row], n, prompts[row][n:])
                for row, (_, n) in enumerate(bases)
            ]
            logits = self._packed_passes(buffers, pieces)
        else:
            logits = self._row_passes(prompts, bases, buffers, width)
        return self._prefilled(torch.cat(logits, dim=0), buffers, lengths, width)

    def _row_passes(
        self, prompts: Sequence[Sequence[int]], bases: list[Base], buffers: Layers, width: int
    ) -> list[Any]:
        """Every row's :meth:`_row_pass` (its last logits, in order). With
        ``share_identical_rows``, a row whose prompt and base equal an earlier row's (the samples
        of one task while their histories agree) gets that row's new keys, values and logits
        copied instead of a pass of its own: a pass is a function of the prompt and the base
        (twins sit at the same offset, so even the memory alignment is the same), so the copy is
        what its own pass would give, bit for bit (the tests check it)."""
        logits: list[Any] = []
        ran: dict[tuple[int, ...], list[int]] = {}
        for row, (prompt, base) in enumerate(zip(prompts, bases, strict=True)):
            twin = None
            if self.share_identical_rows:
                earlier = ran.setdefault(tuple(prompt), [])
                twin = next((r for r in earlier if _same_base(bases[r], base)), None)
            if twin is None:
                logits.append(self._row_pass(prompt, base, row, buffers, width))
                if self.share_identical_rows:
                    earlier.append(row)
                continue
            start = width - len(prompt)
            for kb, vb in buffers:
                kb[row, :, start:width] = kb[twin, :, start:width]
                vb[row, :, start:width] = vb[twin, :, start:width]
            logits.append(logits[twin])
            self.shared_row_passes += 1
        return logits

    def _row_pass(
        self, prompt: Sequence[int], base: Base, row: int, buffers: Layers, width: int
    ) -> Any:
        """One row's forward pass past its base with the model's own attention; its last
        logits."""
        import torch

        n, start = base[1], width - len(prompt)
        views = [(kb[row : row + 1, :, start:], vb[row : row + 1, :, start:]) for kb, vb in buffers]
        out = self.model(
            input_ids=torch.tensor([list(prompt[n:])], dtype=torch.long, device=self.device),
            position_ids=torch.arange(n, len(prompt), device=self.device)[None],
            use_cache=True,
            **{self._cache_arg: buffer_cache(views, n)},
            **self._keep_last,
        )
        if not writes_in_place():  # transformers 4.x: copy the row's keys into the buffers
            row_layers = cache_layers(getattr(out, self._cache_arg)) or []
            for (kview, vview), (k, v) in zip(views, row_layers, strict=True):
                kview[:, :, : len(prompt)] = k
                vview[:, :, : len(prompt)] = v
        return out.logits[:, -1:, :]

    def _packed_passes(self, buffers: Layers, pieces: list[Piece]) -> list[Any]:
        """Run every piece's tokens into its buffer row; each piece's last logits, in order.

        A piece's tokens go in chunks of at most ``MAX_PREFILL_QUERIES``, and the chunks of one
        round (every piece's next chunk) in one forward pass, end to end in one sequence with no
        padding (each with its own positions): the weights' products see the whole round at
        once, while each chunk's attention reads its own row's positions only (the two-bmm path,
        whose results do not depend on how a prompt was cut into chunks or passes: the tests
        check a row alone against the same row packed, bit for bit)."""
        import torch

        done = [0] * len(pieces)
        logits: list[Any] = [None] * len(pieces)
        while True:
            todo = [i for i, piece in enumerate(pieces) if done[i] < len(piece.tokens)]
            if not todo:
                return logits
            ids: list[int] = []
            positions: list[int] = []
            writes, layout, ends = [], [], []
            for i in todo:
                piece = pieces[i]
                size = min(MAX_PREFILL_QUERIES, len(piece.tokens) - done[i])
                first = piece.first + done[i]  # the chunk's first position
                ids.extend(piece.tokens[done[i] : done[i] + size])
                positions.extend(range(first, first + size))
                stop, end = piece.key_start + first + size, len(ids)
                writes.append((piece.buffer_row, stop, size, 0, end))
                layout.append((piece.buffer_row, piece.key_start, stop, size, 0, end))
                ends.append(end - 1)
                done[i] += size
            if len(todo) > 1:
                self.engine.packed_rows += len(todo)
            out = self.engine.prefill_pass(
                torch.tensor([ids], device=self.device),
                torch.tensor([positions], device=self.device),
                packed_cache(buffers, writes),
                layout,
                torch.tensor(ends),
            )
            for j, i in enumerate(todo):
                logits[i] = out[:, j : j + 1, :]
            del out

    def _prefilled(
        self, logits: Any, buffers: Layers, lengths: list[int], width: int
    ) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """The decoding state of rows of ``lengths`` tokens right-aligned at ``width`` in
        ``buffers``."""
        import torch

        attention_mask = torch.zeros((len(lengths), width), dtype=torch.long, device=self.device)
        for i, n in enumerate(lengths):
            attention_mask[i, width - n :] = 1
        position_ids = torch.tensor([[n - 1] for n in lengths], device=self.device)
        out = _Prefilled(logits, buffer_cache(buffers, width), self._cache_arg)
        return out, attention_mask, position_ids

    def _prefill_batch(
        self, prompts: Sequence[Sequence[int]], bases: list[Base], max_new_tokens: int
    ) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """One padded forward pass of every row's tokens past its base.

        Layout (width ``C + S``): the bases right-aligned in the first ``C`` (the longest base)
        positions, the rows' new tokens left-padded in the next ``S``; the mask hides both
        gaps, position ids continue from each row's base length.
        """
        import torch

        cached = [n for _, n in bases]
        width_c = max(cached)
        suffix_ids, suffix_mask = left_pad(
            [p[n:] for p, n in zip(prompts, cached, strict=True)], self.pad_id, self.device
        )
        width_s = suffix_ids.shape[1]
        buffers = self._kv_buffers(len(prompts), width_c + width_s + max_new_tokens)
        base_mask = torch.zeros((len(prompts), width_c), dtype=torch.long, device=self.device)
        for row, (layers, n) in enumerate(bases):
            if n:
                base_mask[row, width_c - n :] = 1
                for (kbuf, vbuf), (k, v) in zip(buffers, layers, strict=True):
                    kbuf[row, :, width_c - n : width_c] = k[0]
                    vbuf[row, :, width_c - n : width_c] = v[0]
        attention_mask = torch.cat([base_mask, suffix_mask], dim=1)
        offsets = torch.tensor(cached, device=self.device)[:, None]
        position_ids = offsets + (suffix_mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(
            input_ids=suffix_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            **{self._cache_arg: buffer_cache(buffers, width_c)},
            **self._keep_last,
        )
        return out, attention_mask, position_ids


def _same_base(a: Base, b: Base) -> bool:
    """Whether two rows' bases hold the same keys and values (the same object, or equal)."""
    import torch

    if a[1] != b[1] or a[0] is b[0]:
        return a[1] == b[1]
    if a[0] is None or b[0] is None:
        return False
    return all(
        torch.equal(ka, kb) and torch.equal(va, vb)
        for (ka, va), (kb, vb) in zip(a[0], b[0], strict=True)
    )


ALIGN = 64  # positions: with the engine, rows end at a multiple of this (aligned_width)


def aligned_width(length: int) -> int:
    """The buffer width a batch's rows are right-aligned at with the engine: the longest
    prompt rounded up to a multiple of :data:`ALIGN`. Every row's tokens then sit at the same
    offset modulo ``ALIGN`` whatever the batch (``-length`` mod ``ALIGN``), so the decoding
    attention's vectorised sums meet its values in the same lanes and order as when the row
    is alone (the padding before adds exact zeros). Without it a row's log-probs changed in
    the last bits with the other rows' lengths (SmolLM2-135M, 4 TextCraft prompts: 3 of 4
    rows); with it, and prefill's weight products in fixed blocks of rows
    (``cpu_int4.row_blocked_mm``), they were the same bit for bit there and in every reply of
    an 8-episode x 4-turn benchmark (README)."""
    return -(-length // ALIGN) * ALIGN


class _Prefilled:
    """A stand-in for a model output after row-wise prefill: last logits and the stacked cache."""

    def __init__(self, logits: Any, cache: Any, cache_arg: str) -> None:
        self.logits = logits
        setattr(self, cache_arg, cache)
