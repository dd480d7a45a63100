"""The transformers backend: batched sampling with left padding and the tokenizer's chat template.

:class:`TransformersPolicy` renders each conversation with the tokenizer's chat template
(``add_generation_prompt=True``), left-pads the batch, and decodes with its own sampling loop
over the model's KV cache: one prefill of the prompts (position ids counted from each row's
first real token), then one token per step for every row until each row has emitted an
end-of-turn token or ``max_new_tokens``. Writing the loop (rather than calling
``model.generate``) keeps three things exact and cheap:

* the log-probability of each sampled token is taken from the raw logits (``log_softmax`` at
  temperature 1, before temperature and top-p): the policy's own log-probability, the one a
  teacher-forced forward pass recomputes (the tests check they agree);
* memory stays at one step's logits (``generate(output_logits=True)`` keeps every step's
  ``batch x vocab`` logits, gigabytes for a 150k vocabulary);
* multi-turn prefix caching (:mod:`agentenvs.agents.backends.kv_cache`): with ``keys=`` (one episode id
  per conversation, as :func:`agentenvs.agents.rollout.run_rollouts` passes), each episode's keys and
  values are kept after its turn, and the next turn's prompt (the same conversation plus the
  reply and the next observation) runs only the tokens past the longest cached token prefix.
  Prompts that do not extend their cache (history windows, re-rendered turns, restored
  episodes) reuse the matching part and encode the rest: outputs do not depend on the cache.
  The rollout frees an episode's cache when it ends (:meth:`TransformersPolicy.end_episodes`).

Prefill: each row starts from a *base*, the cached keys of its longest reusable prefix (from the
prefix cache, or the batch's common prefix computed once with ``share_prefix``), and runs its
remaining tokens: row by row on CPU (the fast causal attention path) with the caches then
stacked left-padded, or as one batch on GPU (bases right-aligned and left-padded, the new tokens
left-padded after them; the attention mask hides the gaps and position ids continue from each
row's base; :mod:`agentenvs.agents.backends.prefill`). Decoding writes into a cache preallocated for
``max_new_tokens`` more positions.

Sampling: ``temperature`` 0 is greedy; otherwise logits / temperature, then nucleus (top-p)
filtering, then a draw from a ``torch.Generator`` seeded by ``SamplingParams.seed`` (when set).
Batches larger than ``max_batch_size`` are split.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from agentenvs.agents.backends.cpu.attention import bmm_decoding, shared_prefix
from agentenvs.agents.backends.cpu.attention import install as install_attention
from agentenvs.agents.backends.cpu.decode_step import LeanDecoder
from agentenvs.agents.backends.cpu.int4 import decoding as int4_decoding
from agentenvs.agents.backends.cpu.int4 import install_for as install_int4
from agentenvs.agents.backends.cpu.kernels import int_dot_path, prefill_kernel_error, takes_dtype
from agentenvs.agents.backends.cpu.kernels import load as load_decode_kernel
from agentenvs.agents.backends.cpu.kernels import load_error as decode_kernel_error
from agentenvs.agents.backends.hf_loading import (
    end_of_reply_ids,
    left_pad,
    pad_id,
    sample_next,
    sample_with_logprobs,
)
from agentenvs.agents.backends.kv_cache import (
    CachedSequence,
    CacheStats,
    PrefixCache,
    cache_layers,
    common_prefix_length,
    default_budget_bytes,
    select_rows,
    split_shared_prefix,
    weights_fingerprint,
    writes_in_place,
)
from agentenvs.agents.backends.prefill import Layers, PrefillMixin
from agentenvs.agents.models import cpu_has_bf16, load_model, resolve_dtype
from agentenvs.agents.policy import BackendError, Completion, Policy, SamplingParams

if TYPE_CHECKING:
    import torch

__all__ = [
    "TransformersPolicy",
    "cpu_has_bf16",
    "end_of_reply_ids",
    "left_pad",
    "resolve_dtype",
    "sample_next",
]

Message = dict[str, str]


class TransformersPolicy(PrefillMixin, Policy):
    """A causal LM from a local directory or hub id (``hf:<dir or id>``).

    Options: ``device`` (``auto``: CUDA when available, else CPU), ``dtype`` (``auto``:
    bfloat16 on GPU, float32 on CPU; ``fast``: bfloat16 also on CPUs with native bfloat16
    kernels; or ``float32`` / ``bfloat16`` / ``float16``; :func:`resolve_dtype`),
    ``max_batch_size`` (rows per forward pass, default 32), ``chat_template_kwargs`` (e.g.
    ``{"enable_thinking": False}`` for Qwen3), ``gguf_file`` (load a GGUF file in the directory),
    ``share_prefix`` (compute a batch's common prompt prefix once, default True),
    ``prefix_cache`` (keep each episode's KV cache across turns when ``generate`` gets
    ``keys``; default True), ``prefix_cache_mb`` (its memory budget; ``auto``: a quarter of the
    free accelerator memory, or of the available RAM on CPU),
    ``prefill`` (``rows``: prompts one by one then batched decoding, fastest on CPU; ``batch``:
    one padded batch, for GPUs; ``auto``: rows on CPU, batch elsewhere),
    ``num_threads`` (torch CPU threads; 1 is often fastest on a busy machine),
    ``decode`` (``fast``, the default: finished rows leave the batch, one uniform draw per
    sampled token; ``plain``: every row decodes until the last one finishes, tokens drawn with
    ``torch.multinomial``, the loop as it was, kept to measure against),
    ``decode_attention`` (``sdpa``, the default: the model's own attention; ``bmm``: with
    ``decode="fast"``, one-token decoding steps of a model on CPU (bfloat16, float16 or
    float32) compute attention with two batched matrix products instead of SDPA's flash kernel
    (the model's attention implementation is switched; 1.3x the embedded model's eval tokens/s
    in bfloat16; in float32 a row's tokens then do not depend on the batch), scores
    rounded to the model dtype: log-probs within about 0.01 of a teacher-forced pass instead
    of 1e-4, :mod:`agentenvs.agents.backends.cpu.attention`; ``kernel``: the same steps with a compiled
    kernel, float32 scores and sums, masked positions skipped, one call per layer
    (:mod:`agentenvs.agents.backends.cpu.kernels`, built with the system C compiler on first use; where it
    cannot be, the ``bmm`` path, and the run metadata's ``decode_kernel_error`` says why), the
    embedded agent's default),
    ``prefill_attention`` (``sdpa``, the default; ``bmm``: with ``decode="fast"`` and row-wise
    prefill, a model on CPU (bfloat16, float16 or float32), prompts run in chunks of at most
    256 tokens with attention as two batched matrix products per row, the batch's rows packed
    into shared forward passes, :mod:`agentenvs.agents.backends.prefill`; same rounding as
    ``decode_attention="bmm"``, a row's prefill the same bit for bit alone or packed;
    ``kernel``: the same chunks with the compiled attention of
    :mod:`agentenvs.agents.backends.cpu.kernels` where the CPU has AMX tiles and heads are 64 wide
    (float32 scores and sums; otherwise ``bmm``, and the run metadata's
    ``prefill_kernel_error`` says why), the embedded agent's default),
    ``decode_weights`` (``model``, the default; ``int4``: with ``decode="fast"`` and a bfloat16
    model on CPU, or a float32 one where the compiled kernel has integer dot products (AVX2 or
    AVX-512 VNNI; float32 rows in and out, ``run.json``'s ``int4_dot_products`` says which),
    one-token decoding steps multiply by a 4-bit groupwise copy of each decoder linear weight,
    a quarter of the bytes, while prefill keeps the model's weights; exact for a
    Q4_1 model such as the embedded one, lossy for others, :mod:`agentenvs.agents.backends.cpu.int4`; the
    products run in the compiled kernel of :mod:`agentenvs.agents.backends.cpu.kernels` where it builds,
    else in torch's, and the run metadata's ``int4_kernel`` says which; ``int4_torch``: always
    torch's, whose block scales are rounded to bfloat16), ``decode_step`` (``lean``, the
    default: where the model is a Llama or Qwen3 with this backend's CPU attention, one-token
    steps run as a flat loop over the layers' weights instead of transformers' module stack,
    the same bits, :mod:`agentenvs.agents.backends.cpu.decode_step`; ``model``: always the model's own
    forward pass), ``sampler`` (``torch``, the default; ``compiled``: temperature sampling with
    ``top_p`` 1 on CPU in one compiled pass per row, the same uniform draws and the same
    inversion of the distribution, log-probs within about 1e-6, the embedded agent's default),
    ``cascade`` (with ``decode_attention`` ``bmm`` or ``kernel``,
    default True: when every row of a batch starts with the same rendered system message, its
    keys and values are kept once outside the rows' caches and each decoding step reads them
    once for all rows, :func:`agentenvs.agents.backends.kv_cache.split_shared_prefix`; the split is the
    system message's end, fixed by each conversation, so a row's result does not depend on the
    rest of the batch).
    """

    def __init__(
        self,
        model: str = "",
        *,
        spec: str = "",
        device: str = "auto",
        dtype: str = "auto",
        max_batch_size: int | str = 32,
        chat_template_kwargs: dict[str, Any] | None = None,
        gguf_file: str | None = None,
        share_prefix: bool | str = True,
        prefix_cache: bool | str = True,
        prefix_cache_mb: int | str = "auto",
        prefill: str = "auto",
        num_threads: int | str | None = None,
        decode: str = "fast",
        decode_attention: str = "sdpa",
        prefill_attention: str = "sdpa",
        decode_weights: str = "model",
        cascade: bool | str = True,
        decode_step: str = "lean",
        sampler: str = "torch",
        model_obj: Any = None,
        tokenizer: Any = None,
    ) -> None:
        super().__init__(spec or f"hf:{model}")
        import torch

        self.max_batch_size = int(max_batch_size)
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.share_prefix = _flag(share_prefix)
        if num_threads is not None:
            torch.set_num_threads(int(num_threads))
        if model_obj is None:
            model_obj, tokenizer = load_model(model, device=device, dtype=dtype, gguf_file=gguf_file)
        elif tokenizer is None:
            raise ValueError("pass tokenizer= together with model_obj=")
        self.model = model_obj.eval()
        self.tokenizer = tokenizer
        self.device = next(self.model.parameters()).device
        if decode not in ("fast", "plain"):
            raise ValueError(f"decode must be fast or plain, got {decode!r}")
        self.plain_decode = decode == "plain"
        for name, value in (("decode", decode_attention), ("prefill", prefill_attention)):
            if value not in ("bmm", "kernel", "sdpa"):
                raise ValueError(f"{name}_attention must be sdpa, bmm or kernel, got {value!r}")
        switched = (
            bool({decode_attention, prefill_attention} & {"bmm", "kernel"})
            and not self.plain_decode
            and install_attention(self.model)
        )
        self.bmm_attention = switched and decode_attention in ("bmm", "kernel")
        self.kernel_error: str | None = None
        self.kernel_attention = False
        if self.bmm_attention and decode_attention == "kernel":
            if not takes_dtype(next(self.model.parameters()).dtype):
                self.kernel_error = "the kernel is for bfloat16 and float32 models"
            elif load_decode_kernel() is None:
                self.kernel_error = decode_kernel_error()
            self.kernel_attention = self.kernel_error is None
        self.bmm_prefill = switched and prefill_attention in ("bmm", "kernel") and writes_in_place()
        self.kernel_prefill = False
        self.prefill_kernel_error: str | None = None
        if self.bmm_prefill and prefill_attention == "kernel":
            self.prefill_kernel_error = prefill_kernel_error(self.model)
            self.kernel_prefill = self.prefill_kernel_error is None
        self.cascade = self.bmm_attention and _flag(cascade) and writes_in_place()
        if decode_weights not in ("model", "int4", "int4_torch"):
            raise ValueError(
                f"decode_weights must be model, int4 or int4_torch, got {decode_weights!r}"
            )
        self.int4_report = None
        self._int4_compiled = decode_weights == "int4"
        if decode_weights != "model" and not self.plain_decode:
            self.int4_report = install_int4(self.model, model, compiled=self._int4_compiled)
            self._int4_weights = weights_fingerprint(self.model)
        if sampler not in ("torch", "compiled"):
            raise ValueError(f"sampler must be torch or compiled, got {sampler!r}")
        self.kernel_sampler = (
            sampler == "compiled" and self.device.type == "cpu" and load_decode_kernel() is not None
        )
        if decode_step not in ("lean", "model"):
            raise ValueError(f"decode_step must be lean or model, got {decode_step!r}")
        self.lean_decoder, self.lean_error = None, "decode_step=model"
        if decode_step == "lean":
            self.lean_decoder, self.lean_error = LeanDecoder.build(self.model)
        if prefill not in ("auto", "rows", "batch"):
            raise ValueError(f"prefill must be auto, rows or batch, got {prefill!r}")
        self.rowwise_prefill = prefill == "rows" or (
            prefill == "auto" and self.device.type == "cpu"
        )
        self.pad_id = pad_id(tokenizer)
        self.eos_ids = end_of_reply_ids(
            tokenizer, getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        )
        self._eos = torch.tensor(sorted(self.eos_ids), device=self.device)
        # transformers 5.2x names the KV cache `cache` (older: `past_key_values`), and computes
        # only the last position's logits when asked (prefill logits of a long prompt are large).
        params = inspect.signature(self.model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._keep_last = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        self._layout: list[tuple[Any, ...]] | None = None  # per-layer KV shapes (probed once)
        self._system_ids: dict[str, list[int]] = {}  # rendered system messages' tokens
        self.cascade_rows = 0  # rows decoded with the shared prefix kept once (cascade)
        self.packed_rows = 0  # rows prefilled in a forward pass shared with other rows
        self.lean_steps = 0  # decoding steps taken by the lean decoder
        self.prefix_cache: PrefixCache | None = None
        if _flag(prefix_cache):
            if prefix_cache_mb == "auto":
                budget = default_budget_bytes(self.device)
            else:
                budget = int(float(prefix_cache_mb) * (1 << 20))
            self.prefix_cache = PrefixCache(budget)

    @classmethod
    def from_model(cls, model_obj: Any, tokenizer: Any, **options: Any) -> TransformersPolicy:
        """Wrap an already loaded model and tokenizer (e.g. a trainer's current policy)."""
        return cls(
            model_obj=model_obj,
            tokenizer=tokenizer,
            spec=options.pop("spec", "hf:<in-memory>"),
            **options,
        )

    # ----- prompts ----------------------------------------------------------------------------

    def prompt_ids(self, conversation: Sequence[Message]) -> list[int]:
        """The token ids of ``conversation`` rendered by the chat template, ready to generate."""
        text = self.tokenizer.apply_chat_template(
            list(conversation),
            tokenize=False,
            add_generation_prompt=True,
            **self.chat_template_kwargs,
        )
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    # ----- the prefix cache -------------------------------------------------------------------

    @property
    def cache_stats(self) -> CacheStats | None:
        """Reused vs computed prompt tokens since construction (None without a prefix cache)."""
        return None if self.prefix_cache is None else self.prefix_cache.stats

    def end_episodes(self, keys: Iterable[str]) -> None:
        """Free the cached keys and values of these episodes (the rollout calls this when an
        episode ends; unknown keys are ignored)."""
        if self.prefix_cache is not None:
            self.prefix_cache.release(keys)

    def clear_cache(self) -> None:
        """Free every cached episode (needed only after weights were changed through ``.data``,
        which the automatic weight-change check cannot see)."""
        if self.prefix_cache is not None:
            self.prefix_cache.clear()

    # ----- generation -------------------------------------------------------------------------

    def generate(
        self,
        conversations: Sequence[Sequence[Message]],
        sampling: SamplingParams | None = None,
        *,
        envs: Sequence[Any] | None = None,
        keys: Sequence[str | None] | None = None,
        seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        """One completion per conversation; ``keys`` (one episode id per conversation, or None)
        turns on prefix caching across calls for those episodes (module docstring); ``seeds``:
        a sampling seed per conversation (each row then draws from its own generator)."""
        sampling = sampling or SamplingParams()
        prompts = [self.prompt_ids(c) for c in conversations]
        shared = None
        if self.cascade:
            shared = [
                self._system_length(c, p) for c, p in zip(conversations, prompts, strict=True)
            ]
        return self.generate_ids(prompts, sampling, keys=keys, shared_lengths=shared, seeds=seeds)

    def _system_length(self, conversation: Sequence[Message], prompt: Sequence[int]) -> int:
        """How many of ``prompt``'s first tokens are the rendered system message (0 if none, or
        if its tokens are not a prefix of the prompt): the cascade's shared prefix, fixed by the
        conversation alone so that a row's result does not depend on the rest of the batch."""
        if not conversation or conversation[0].get("role") != "system":
            return 0
        text = conversation[0].get("content", "")
        if text not in self._system_ids:
            rendered = self.tokenizer.apply_chat_template(
                [conversation[0]],
                tokenize=False,
                add_generation_prompt=False,
                **self.chat_template_kwargs,
            )
            ids = self.tokenizer(rendered, add_special_tokens=False)["input_ids"]
            if len(self._system_ids) > 64:
                self._system_ids.clear()
            self._system_ids[text] = list(ids)
        ids = self._system_ids[text]
        return len(ids) if list(prompt[: len(ids)]) == ids else 0

    def generate_ids(
        self,
        prompts: Sequence[Sequence[int]],
        sampling: SamplingParams,
        *,
        keys: Sequence[str | None] | None = None,
        shared_lengths: Sequence[int] | None = None,
        seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        """Generate from already tokenized prompts (one :class:`Completion` each, in order).
        ``shared_lengths``: per prompt, the length of a prefix that the cascade may keep once
        for the batch when every row has the same one (:meth:`generate` gives the system
        message's). ``seeds``: one sampling seed per prompt instead of ``sampling.seed``."""
        import torch

        if keys is not None and len(keys) != len(prompts):
            raise ValueError(
                f"got {len(keys)} keys for {len(prompts)} prompts: give one per prompt"
            )
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(
                f"got {len(seeds)} seeds for {len(prompts)} prompts: give one per prompt"
            )
        if any(len(p) == 0 for p in prompts):
            raise BackendError("an empty prompt cannot be generated from")
        fingerprint = weights_fingerprint(self.model)
        if self.prefix_cache is not None:
            self.prefix_cache.check_weights(fingerprint)
        if self.int4_report is not None and fingerprint != self._int4_weights:
            # the weights changed (an optimizer step): the 4-bit copies follow them
            self.int4_report = install_int4(self.model, None, compiled=self._int4_compiled)
            self._int4_weights = fingerprint
        generator: Any = None
        if seeds is not None:
            generator = [torch.Generator(device=self.device).manual_seed(int(s)) for s in seeds]
        elif sampling.seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(int(sampling.seed))
        row_keys = list(keys) if keys is not None else [None] * len(prompts)
        out: list[Completion] = []
        for start in range(0, len(prompts), self.max_batch_size):
            end = start + self.max_batch_size
            shared = list(shared_lengths[start:end]) if shared_lengths is not None else None
            chunk = generator[start:end] if isinstance(generator, list) else generator
            out.extend(
                self._generate_chunk(
                    prompts[start:end], row_keys[start:end], sampling, chunk, shared
                )
            )
        return out

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
        rows = list(range(batch))  # the prompt index of each row still in the batch
        done = torch.zeros(batch, dtype=torch.bool, device=self.device)
        with torch.inference_mode():
            bases = self._cached_bases(prompts, keys)
            out, attention_mask, position_ids = self._prefill(prompts, bases, steps)
            cache, logits = getattr(out, self._cache_arg), out.logits[:, -1, :]
            del out
            prefix = None
            shared = shared_lengths[0] if shared_lengths else 0
            if (
                self.cascade
                and steps > 1
                and shared
                and all(n == shared for n in shared_lengths or ())
                and common_prefix_length(prompts) >= shared
            ):
                split = split_shared_prefix(cache, attention_mask, shared)
                if split is not None:
                    cache, attention_mask, prefix = split
                    self.cascade_rows += batch
            for step in range(steps):
                logits = logits.float()
                draws = [generator[r] for r in rows] if isinstance(generator, list) else generator
                next_tokens, token_logprobs = sample_with_logprobs(
                    logits, sampling, draws, plain=self.plain_decode, compiled=self.kernel_sampler
                )
                next_tokens = torch.where(
                    done, torch.full_like(next_tokens, self.pad_id), next_tokens
                )
                for row, token, logprob in zip(
                    rows, next_tokens.tolist(), token_logprobs.tolist(), strict=True
                ):
                    tokens[row].append(token)
                    logprobs[row].append(logprob)
                done = done | torch.isin(next_tokens, self._eos)
                if step == steps - 1 or bool(done.all()):
                    break  # the last sampled tokens are never fed back
                finished = int(done.sum())
                if finished and 4 * finished >= len(rows) and not self.plain_decode:
                    keep = (~done).nonzero()[:, 0]
                    smaller = select_rows(cache, keep)
                    if smaller is not None:
                        gone = done.nonzero()[:, 0].tolist()
                        self._store(
                            prompts, keys, tokens, cache, attention_mask, rows, gone, prefix
                        )
                        cache, rows = smaller, [rows[i] for i in keep.tolist()]
                        next_tokens, done = next_tokens[keep], done[keep]
                        attention_mask, position_ids = attention_mask[keep], position_ids[keep]
                attention_mask = torch.cat(
                    [attention_mask, torch.ones_like(attention_mask[:, :1])], dim=1
                )
                position_ids = position_ids[:, -1:] + 1
                with (
                    int4_decoding(self.int4_report is not None),
                    bmm_decoding(self.bmm_attention, kernel=self.kernel_attention),
                    shared_prefix(prefix),
                ):
                    if self.lean_decoder is not None and self.lean_decoder.takes(cache):
                        logits = self.lean_decoder.step(
                            next_tokens[:, None], attention_mask, position_ids, cache
                        )
                        self.lean_steps += 1
                        continue
                    out = self.model(
                        input_ids=next_tokens[:, None],
                        attention_mask=attention_mask,
                        position_ids=position_ids,
                        use_cache=True,
                        **{self._cache_arg: cache},
                    )
                cache, logits = getattr(out, self._cache_arg), out.logits[:, -1, :]
                del out
            everyone = list(range(len(rows)))
            self._store(prompts, keys, tokens, cache, attention_mask, rows, everyone, prefix)
        return [self._completion(t, lp) for t, lp in zip(tokens, logprobs, strict=True)]

    # ----- the prefix cache's entries ------------------------------------------------------

    def _store(
        self,
        prompts: Sequence[Sequence[int]],
        keys: Sequence[str | None],
        tokens: Sequence[Sequence[int]],
        cache: Any,
        attention_mask: torch.Tensor,
        rows: Sequence[int],
        cache_rows: Sequence[int],
        prefix: Layers | None = None,
    ) -> None:
        """Keep the prompt and fed reply tokens of the keyed rows at ``cache_rows`` of ``cache``
        (row ``i`` there holds prompt ``rows[i]``) in the prefix cache; ``prefix``: the shared
        prefix's keys and values when ``cache`` holds only what follows it."""
        import torch

        if self.prefix_cache is None or not any(keys[rows[i]] is not None for i in cache_rows):
            return
        layers = cache_layers(cache)
        if layers is None:
            return
        mask = attention_mask.cpu()
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

    def _completion(self, token_ids: list[int], logprobs: list[float]) -> Completion:
        end = next((i for i, t in enumerate(token_ids) if t in self.eos_ids), None)
        if end is None:
            finish = "length"
        else:
            finish = "stop"
            token_ids, logprobs = token_ids[: end + 1], logprobs[: end + 1]
        text_ids = token_ids[:-1] if finish == "stop" else token_ids
        text = self.tokenizer.decode(text_ids, skip_special_tokens=True)
        return Completion(text=text, token_ids=token_ids, logprobs=logprobs, finish_reason=finish)

    def run_metadata(self) -> dict[str, Any]:
        """The backend, device, dtype and thread count the run generated with."""
        import torch

        param = next(self.model.parameters()) if self.model is not None else None
        return {
            "backend": "transformers",
            "device": str(self.device),
            "dtype": str(param.dtype).removeprefix("torch.") if param is not None else None,
            "threads": torch.get_num_threads(),
            "decode": "plain" if self.plain_decode else "fast",
            "decode_attention": (
                "kernel" if self.kernel_attention else "bmm" if self.bmm_attention else "sdpa"
            ),
            **({"decode_kernel_error": self.kernel_error} if self.kernel_error else {}),
            **(
                {"prefill_kernel_error": self.prefill_kernel_error}
                if self.prefill_kernel_error
                else {}
            ),
            "prefill_attention": (
                "kernel" if self.kernel_prefill else "bmm" if self.bmm_prefill else "sdpa"
            ),
            "decode_weights": "int4" if self.int4_report else "model",
            **(
                {
                    "int4_kernel": "compiled" if self.int4_report.compiled else "torch",
                    **({"int4_dot_products": int_dot_path()} if self.int4_report.compiled else {}),
                    "lm_head": "int8"
                    if self.int4_report.head_relative_error is not None
                    else "model",
                }
                if self.int4_report
                else {}
            ),
            "cascade": self.cascade,
            "decode_step": "lean" if self.lean_decoder is not None else "model",
            "sampler": "compiled" if self.kernel_sampler else "torch",
            **(
                {"int4_max_relative_error": self.int4_report.max_relative_error}
                if self.int4_report
                else {}
            ),
        }

    def close(self) -> None:
        self.model = None
        import gc

        gc.collect()


def _flag(value: bool | str) -> bool:
    return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes")
