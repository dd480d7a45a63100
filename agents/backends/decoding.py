"""The decoding loop of :class:`agentenvs.agents.backends.transformers_backend.TransformersPolicy`.

After the prefill (:mod:`agentenvs.agents.backends.prefill`) every row still in the batch gets
one token per step: sampled from the step's logits (through the CPU engine's sampler when it
runs, else :func:`~agentenvs.agents.backends.hf_loading.sample_with_logprobs`), with its
log-probability at temperature 1, and fed back through the model (or the engine) into the
preallocated KV cache. A row ends on an end-of-reply token or at ``max_new_tokens``; once a
quarter of the rows finished, their caches are stored and they leave the batch. With the CPU
engine's cascade the batch's shared system message is kept once, apart from the rows' caches.
The keyed rows' prompt and reply tokens, with their keys and values, go to the prefix cache
(:mod:`agentenvs.agents.backends.kv_cache`) for the episode's next turn.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentenvs.agents.backends.hf_loading import sample_with_logprobs
from agentenvs.agents.backends.kv_cache import (
    CachedSequence,
    cache_layers,
    common_prefix_length,
    select_rows,
    split_shared_prefix,
)
from agentenvs.agents.backends.prefill_bases import Layers
from agentenvs.agents.policy import Completion, SamplingParams

if TYPE_CHECKING:
    import torch

__all__ = ["DecodingMixin"]


@dataclass
class _Decoding:
    """The batch being decoded: its KV cache (and the cascade's shared prefix, if split off),
    attention mask and position ids, the prompt index of each row still in it, and which of
    those rows emitted an end-of-reply token."""

    cache: Any
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    rows: list[int]
    done: torch.Tensor
    prefix: Layers | None = None


class DecodingMixin:
    """The decoding loop; the policy provides ``model``, ``device``, ``engine`` (the CPU engine
    or None), ``pad_id``, ``_eos`` (the end-of-reply ids as a tensor), ``prefix_cache``, the
    cache argument's name, and :meth:`_cached_bases`, :meth:`_prefill` (the prefill mixin) and
    :meth:`_completion`."""

    model: Any
    device: Any
    engine: Any
    pad_id: int
    prefix_cache: Any
    _eos: Any
    _cache_arg: str

    def _generate_chunk(
        self,
        prompts: Sequence[Sequence[int]],
        keys: Sequence[str | None],
        sampling: SamplingParams,
        generator: Any,
        shared_lengths: Sequence[int] | None = None,
    ) -> list[Completion]:
        """Prefill, then decode one token per live row per step. Rows that finished are dropped
        from the batch (their caches stored first) once they are a quarter of it, so a long
        reply does not keep the finished rows' attention and weights work going."""
        import torch

        batch = len(prompts)
        steps = sampling.max_new_tokens
        tokens: list[list[int]] = [[] for _ in range(batch)]
        logprobs: list[list[float]] = [[] for _ in range(batch)]
        with torch.inference_mode():
            bases = self._cached_bases(prompts, keys)
            out, attention_mask, position_ids = self._prefill(prompts, bases, steps)
            state = _Decoding(
                cache=getattr(out, self._cache_arg),
                attention_mask=attention_mask,
                position_ids=position_ids,
                rows=list(range(batch)),
                done=torch.zeros(batch, dtype=torch.bool, device=self.device),
            )
            logits = out.logits[:, -1, :]
            del out
            if steps > 1:
                self._split_shared_prefix(state, prompts, shared_lengths)
            for step in range(steps):
                sampled, ids, lps = self._sample_step(state, logits, sampling, generator)
                for row, token, logprob in zip(state.rows, ids, lps, strict=True):
                    tokens[row].append(token)
                    logprobs[row].append(logprob)
                if step == steps - 1 or bool(state.done.all()):
                    break  # the last sampled tokens are never fed back
                sampled = self._drop_finished(state, sampled, prompts, keys, tokens)
                logits = self._decode_step(state, sampled)
            self._store(state, prompts, keys, tokens, range(len(state.rows)))
        return [self._completion(t, lp) for t, lp in zip(tokens, logprobs, strict=True)]

    def _split_shared_prefix(
        self,
        state: _Decoding,
        prompts: Sequence[Sequence[int]],
        shared_lengths: Sequence[int] | None,
    ) -> None:
        """With the CPU engine's cascade: keep the batch's shared prefix (every row's system
        message, when all are the same) once, apart from the rows' caches."""
        engine = self.engine
        shared = shared_lengths[0] if shared_lengths else 0
        if (
            engine is None
            or not engine.cascade
            or not shared
            or any(n != shared for n in shared_lengths or ())
            or common_prefix_length(prompts) < shared
        ):
            return
        split = split_shared_prefix(state.cache, state.attention_mask, shared)
        if split is not None:
            state.cache, state.attention_mask, state.prefix = split
            engine.cascade_rows += len(prompts)

    def _sample_step(
        self, state: _Decoding, logits: torch.Tensor, sampling: SamplingParams, generator: Any
    ) -> tuple[torch.Tensor, list[int], list[float]]:
        """One token per row still in the batch (the pad token for finished rows), marking the
        rows that reached an end-of-reply token: (next tokens, as ids, their log-probs)."""
        import torch

        logits = logits.float()
        rows = state.rows
        draws = [generator[r] for r in rows] if isinstance(generator, list) else generator
        if self.engine is not None:
            next_tokens, token_logprobs = self.engine.sample(logits, sampling, draws)
        else:
            next_tokens, token_logprobs = sample_with_logprobs(logits, sampling, draws)
        next_tokens = torch.where(
            state.done, torch.full_like(next_tokens, self.pad_id), next_tokens
        )
        state.done = state.done | torch.isin(next_tokens, self._eos)
        return next_tokens, next_tokens.tolist(), token_logprobs.tolist()

    def _drop_finished(
        self,
        state: _Decoding,
        next_tokens: torch.Tensor,
        prompts: Sequence[Sequence[int]],
        keys: Sequence[str | None],
        tokens: Sequence[Sequence[int]],
    ) -> torch.Tensor:
        """Once a quarter of the rows finished, store their caches and take them out of the
        batch; returns the next tokens of the rows that stay."""
        finished = int(state.done.sum())
        if not finished or 4 * finished < len(state.rows):
            return next_tokens
        keep = (~state.done).nonzero()[:, 0]
        smaller = select_rows(state.cache, keep)
        if smaller is None:
            return next_tokens
        gone = state.done.nonzero()[:, 0].tolist()
        self._store(state, prompts, keys, tokens, gone)
        state.cache, state.rows = smaller, [state.rows[i] for i in keep.tolist()]
        state.done = state.done[keep]
        state.attention_mask, state.position_ids = (
            state.attention_mask[keep],
            state.position_ids[keep],
        )
        return next_tokens[keep]

    def _decode_step(self, state: _Decoding, next_tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per row (through the CPU engine, else the model); the next logits."""
        import torch

        mask = state.attention_mask
        state.attention_mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        state.position_ids = state.position_ids[:, -1:] + 1
        if self.engine is not None:
            return self.engine.decode_step(
                next_tokens[:, None],
                state.attention_mask,
                state.position_ids,
                state.cache,
                state.prefix,
            )
        out = self.model(
            input_ids=next_tokens[:, None],
            attention_mask=state.attention_mask,
            position_ids=state.position_ids,
            use_cache=True,
            **{self._cache_arg: state.cache},
        )
        state.cache, logits = getattr(out, self._cache_arg), out.logits[:, -1, :]
        del out
        return logits

    # ----- the prefix cache's entries ------------------------------------------------------

    def _store(
        self,
        state: _Decoding,
        prompts: Sequence[Sequence[int]],
        keys: Sequence[str | None],
        tokens: Sequence[Sequence[int]],
        cache_rows: Iterable[int],
    ) -> None:
        """Keep the prompt and fed reply tokens of the keyed rows at ``cache_rows`` of the
        decoding batch's cache (row ``i`` there holds prompt ``state.rows[i]``) in the prefix
        cache; ``state.prefix``: the shared prefix's keys and values when the cache holds only
        what follows it."""
        import torch

        cache_rows = list(cache_rows)
        rows, prefix = state.rows, state.prefix
        if self.prefix_cache is None or not any(keys[rows[i]] is not None for i in cache_rows):
            return
        layers = cache_layers(state.cache)
        if layers is None:
            return
        mask = state.attention_mask.cpu()
        for i in cache_rows:
            key = keys[rows[i]]
            if key is None:
                continue
            reply = self._completion(list(tokens[rows[i]]), [0.0] * len(tokens[rows[i]]))
            fed = list(prompts[rows[i]]) + list(reply.token_ids or [])[:-1]
            shared = prefix[0][0].shape[1] if prefix else 0
            positions = mask[i].nonzero()[: len(fed) - shared, 0]
            assert len(positions) + shared == len(fed), "every fed token has a cache position"
            index = positions.to(self.device)
            entry = [
                (k[i : i + 1].index_select(2, index), v[i : i + 1].index_select(2, index))
                for k, v in layers
            ]
            if prefix:
                entry = [
                    (torch.cat([pk[None], k], dim=2), torch.cat([pv[None], v], dim=2))
                    for (pk, pv), (k, v) in zip(prefix, entry, strict=True)
                ]
            self.prefix_cache.store(key, CachedSequence(fed, entry))
