"""Teacher-forced token statistics under the SFT model: next-token entropy and log-probabilities.

Two stages need them: cut selection scores a teacher trajectory by the entropy of the SFT model's
next-token distribution at every assistant token, and the sidecar stores the SFT model's
log-probability of every token of the canonical prompt's prefix span (the prefix's old policy).

Formulas (docs/architecture.md, "Prefix-GRPO settings"), for the logits ``z`` predicting token ``u``
(i.e. the model's output at position ``u - 1``)::

    H_u      = logsumexp(z) - sum_v softmax(z)_v * z_v        (= -sum_v p_v log p_v)
    logp_u   = z[token_u] - logsumexp(z)

:class:`TokenScorer` runs the model on batches of right-padded sequences (so positions need no
padding offset: position ``u`` of a sequence is position ``u`` of its row), and applies the output
head only at the requested positions, in chunks, so the ``positions x vocabulary`` logits of a long
trajectory never exist at once. Everything is computed in float32 whatever the model's dtype.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "TokenScorer",
    "TokenStats",
    "entropy_from_logits",
    "load_model",
    "logprobs_from_logits",
]


def entropy_from_logits(logits: Any) -> Any:
    """Entropy of ``softmax(logits)`` over the last axis: ``logsumexp(z) - sum(p * z)``.

    ``logits``: a torch tensor ``[..., V]``; returns ``[...]`` in float32.
    """
    import torch

    z = logits.float()
    lse = torch.logsumexp(z, dim=-1)
    p = torch.softmax(z, dim=-1)
    return lse - (p * z).sum(dim=-1)


def logprobs_from_logits(logits: Any, targets: Any) -> Any:
    """``log softmax(logits)[target]`` per row: logits ``[N, V]``, targets ``[N]`` -> ``[N]``."""
    import torch

    z = logits.float()
    picked = z.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(z, dim=-1)


@dataclass(frozen=True)
class TokenStats:
    """Per requested position ``u``: the entropy of p(. | x_<u) and log p(x_u | x_<u)."""

    positions: np.ndarray
    entropy: np.ndarray
    logprob: np.ndarray


def load_model(path: str, *, device: str = "cpu", dtype: str = "float32") -> tuple[Any, Any]:
    """Load a causal LM and its tokenizer from a ``save_pretrained`` directory (or hub id)."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in dtypes:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {sorted(dtypes)}")
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.chat_template is None:
        raise ValueError(f"the tokenizer at {path} has no chat template; the replay needs one")
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"  # renamed in 4.56
    model = AutoModelForCausalLM.from_pretrained(path, **{key: dtypes[dtype]}).to(device)
    model.eval()
    return model, tokenizer


class TokenScorer:
    """Batched teacher forcing of a causal LM (see the module docstring).

    ``batch_tokens`` bounds ``rows x longest row`` of one forward pass; ``head_chunk`` the number
    of positions whose logits are materialised at once.
    """

    def __init__(
        self,
        model: Any,
        *,
        pad_token_id: int = 0,
        batch_tokens: int = 16_384,
        head_chunk: int = 1024,
    ) -> None:
        if batch_tokens < 1 or head_chunk < 1:
            raise ValueError("batch_tokens and head_chunk must be positive")
        self.model = model
        self.pad_token_id = pad_token_id
        self.batch_tokens = batch_tokens
        self.head_chunk = head_chunk
        self._decoder = model.get_decoder()
        self._head = model.get_output_embeddings()
        self._softcap = getattr(model.config, "final_logit_softcapping", None)

    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device

    def score(
        self, sequences: Sequence[Sequence[int]], positions: Sequence[Sequence[int]]
    ) -> list[TokenStats]:
        """Entropy and log-prob at ``positions[i]`` of ``sequences[i]`` (each position >= 1)."""
        if len(sequences) != len(positions):
            raise ValueError("one list of positions per sequence is needed")
        for seq, pos in zip(sequences, positions, strict=True):
            if any(u < 1 or u >= len(seq) for u in pos):
                raise ValueError(
                    f"positions must lie in [1, {len(seq)}) (position 0 has no prediction)"
                )
        results: list[TokenStats | None] = [None] * len(sequences)
        order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i]))
        for batch in self._batches(order, sequences):
            for i, stats in zip(
                batch,
                self._score_batch([sequences[i] for i in batch], [positions[i] for i in batch]),
                strict=True,
            ):
                results[i] = stats
        return results  # type: ignore[return-value]

    def _batches(self, order: list[int], sequences: Sequence[Sequence[int]]) -> list[list[int]]:
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:  # longest first: the first row of a batch sets its width
            width = len(sequences[current[0]]) if current else len(sequences[i])
            if current and (len(current) + 1) * width > self.batch_tokens:
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        return batches

    def _score_batch(
        self, sequences: list[Sequence[int]], positions: list[Sequence[int]]
    ) -> list[TokenStats]:
        import torch

        width = max(len(s) for s in sequences)
        ids = torch.full((len(sequences), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(sequences), width), dtype=torch.long)
        for row, seq in enumerate(sequences):  # right padding: no position offset anywhere
            ids[row, : len(seq)] = torch.as_tensor(list(seq), dtype=torch.long)
            mask[row, : len(seq)] = 1
        with torch.no_grad():
            hidden = self._decoder(
                input_ids=ids.to(self.device), attention_mask=mask.to(self.device)
            ).last_hidden_state
            out = []
            for row, pos in enumerate(positions):
                out.append(self._stats_at(hidden[row], ids[row], list(pos)))
        return out

    def _stats_at(self, hidden: Any, ids: Any, positions: list[int]) -> TokenStats:
        import torch

        entropies, logprobs = [], []
        for lo in range(0, len(positions), self.head_chunk):
            pos = torch.as_tensor(positions[lo : lo + self.head_chunk], dtype=torch.long)
            logits = self._head(hidden[(pos - 1).to(hidden.device)]).float()
            if self._softcap:
                logits = torch.tanh(logits / self._softcap) * self._softcap
            entropies.append(entropy_from_logits(logits).cpu())
            logprobs.append(logprobs_from_logits(logits, ids[pos].to(logits.device)).cpu())
        if not positions:
            empty = np.zeros(0, dtype=np.float32)
            return TokenStats(np.zeros(0, dtype=np.int64), empty, empty.copy())
        return TokenStats(
            np.asarray(positions, dtype=np.int64),
            torch.cat(entropies).numpy(),
            torch.cat(logprobs).numpy(),
        )
