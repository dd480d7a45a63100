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
* multi-turn prefix caching (:mod:`agentenvs.agents.backends.kv_cache`): with ``keys=`` (one
  episode id per conversation, as :func:`agentenvs.agents.rollout.run_rollouts` passes), each
  episode's keys and values are kept after its turn, and the next turn's prompt (the same
  conversation plus the reply and the next observation) runs only the tokens past the longest
  cached token prefix. Prompts that do not extend their cache (history windows, re-rendered
  turns, restored episodes) reuse the matching part and encode the rest: outputs do not depend
  on the cache. The rollout frees an episode's cache when it ends
  (:meth:`TransformersPolicy.end_episodes`).

Prefill: each row starts from a *base*, the cached keys of its longest reusable prefix (from the
prefix cache, or the batch's common prefix computed once with ``share_prefix``), and runs its
remaining tokens: row by row on CPU (the fast causal attention path) with the caches then
stacked left-padded, or as one batch on GPU (bases right-aligned and left-padded, the new tokens
left-padded after them; the attention mask hides the gaps and position ids continue from each
row's base; :mod:`agentenvs.agents.backends.prefill`). Decoding
(:mod:`agentenvs.agents.backends.decoding`) writes into a cache preallocated for
``max_new_tokens`` more positions.

Sampling: ``temperature`` 0 is greedy; otherwise logits / temperature, then nucleus (top-p)
filtering, then a draw from a ``torch.Generator`` seeded by ``SamplingParams.seed`` (when set).
Batches larger than ``max_batch_size`` are split.

That is the whole generator with ``cpu_engine="off"`` (the default). With ``cpu_engine="auto"``
(the embedded agent's) the prefill chunks and decoding steps of a Llama or Qwen3 model on CPU
run through the CPU engine instead (:mod:`agentenvs.agents.backends.cpu.engine`, one object
this policy owns; ``docs/cpu-engine.md``).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any

from agentenvs.agents.backends.cpu.engine import (
    MEASURED,
    SETTINGS_FIELDS,
    CpuEngine,
    EngineSettings,
)
from agentenvs.agents.backends.cpu.engine import start as start_engine
from agentenvs.agents.backends.decoding import DecodingMixin
from agentenvs.agents.backends.hf_loading import (
    end_of_reply_ids,
    left_pad,
    pad_id,
    sample_next,
)
from agentenvs.agents.backends.kv_cache import (
    CacheStats,
    PrefixCache,
    default_budget_bytes,
    weights_fingerprint,
)
from agentenvs.agents.backends.prefill import PrefillMixin
from agentenvs.agents.models import cpu_has_bf16, load_model
from agentenvs.agents.policy import BackendError, Completion, Policy, SamplingParams

__all__ = ["TransformersPolicy", "end_of_reply_ids", "left_pad", "sample_next"]

Message = dict[str, str]


class TransformersPolicy(DecodingMixin, PrefillMixin, Policy):
    """A causal LM from a local directory or hub id (``hf:<dir or id>``).

    Options: ``device`` (``auto``: CUDA when available, else CPU), ``dtype`` (``auto``:
    bfloat16 on GPU, float32 on CPU; ``fast``: bfloat16 also on CPUs with native bfloat16
    kernels; or ``float32`` / ``bfloat16`` / ``float16``; :func:`resolve_dtype`),
    ``max_batch_size`` (rows per forward pass, default 32), ``chat_template_kwargs`` (e.g.
    ``{"enable_thinking": False}`` for Qwen3), ``gguf_file`` (load a GGUF file in the directory),
    ``num_threads`` (torch CPU threads; 1 is often fastest on a busy machine),
    ``cpu_engine`` (``off``, the default: the plain generator above; ``auto``: the CPU engine of
    :mod:`agentenvs.agents.backends.cpu.engine` where it applies (a Llama or Qwen3 model on
    CPU), the embedded agent's default: with ``dtype="auto"`` the model is then bfloat16 where
    the CPU computes it natively; :meth:`run_metadata`'s ``engine`` line says what ran and why),
    ``engine`` (an :class:`~agentenvs.agents.backends.cpu.engine.EngineSettings`: the
    generator's tuning, ``share_prefix``, ``prefix_cache``, ``prefix_cache_mb`` and
    ``prefill``, and the CPU engine's parts; default: the measured ones).

    :meth:`with_options` takes the same options flat, as ``--agent-opt`` gives them
    (``prefix_cache=false``): the settings' fields among them go into ``engine``.
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
        num_threads: int | str | None = None,
        cpu_engine: str = "off",
        engine: EngineSettings = MEASURED,
        model_obj: Any = None,
        tokenizer: Any = None,
    ) -> None:
        super().__init__(spec or f"hf:{model}")
        import torch

        self.max_batch_size = int(max_batch_size)
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.share_prefix = engine.share_prefix
        if num_threads is not None:
            torch.set_num_threads(int(num_threads))
        if cpu_engine not in ("auto", "off"):
            raise ValueError(f"cpu_engine must be auto or off, got {cpu_engine!r}")
        if model_obj is None:
            if cpu_engine != "off" and dtype == "auto" and _on_cpu(device):
                dtype = "bfloat16" if cpu_has_bf16() else "float32"  # measured: 2-4x float32
            model_obj, tokenizer = load_model(
                model, device=device, dtype=dtype, gguf_file=gguf_file
            )
        elif tokenizer is None:
            raise ValueError("pass tokenizer= together with model_obj=")
        self.model = model_obj.eval()
        self.tokenizer = tokenizer
        self.device = next(self.model.parameters()).device
        self.engine: CpuEngine | None
        self.engine, self.engine_line = start_engine(self.model, model or None, cpu_engine, engine)
        self.rowwise_prefill = engine.prefill == "rows" or (
            engine.prefill == "auto" and self.device.type == "cpu"
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
        self.prefix_cache: PrefixCache | None = None
        if engine.prefix_cache:
            if engine.prefix_cache_mb == "auto":
                budget = default_budget_bytes(self.device)
            else:
                budget = int(float(engine.prefix_cache_mb) * (1 << 20))
            self.prefix_cache = PrefixCache(budget)

    @classmethod
    def with_options(cls, model: str = "", **options: Any) -> TransformersPolicy:
        """A policy from flat backend options (``--agent-opt KEY=VALUE``): those named like
        :class:`~agentenvs.agents.backends.cpu.engine.EngineSettings`' fields
        (``prefix_cache=false``, ``prefill=rows``, ...) make its ``engine``, the rest are the
        constructor's."""
        tuning = {k: options.pop(k) for k in list(options) if k in SETTINGS_FIELDS}
        if tuning:
            base = options.pop("engine", MEASURED)
            options["engine"] = EngineSettings.of(**{**asdict(base), **tuning})
        return cls(model, **options)

    @classmethod
    def from_model(cls, model_obj: Any, tokenizer: Any, **options: Any) -> TransformersPolicy:
        """Wrap an already loaded model and tokenizer (e.g. a trainer's current policy);
        ``options`` as :meth:`with_options` takes them."""
        return cls.with_options(
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
        if self.engine is not None and self.engine.cascade:
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
        if self.engine is not None:  # after an optimizer step its 4-bit copies follow
            self.engine.follow_weights(fingerprint)
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
        """The backend, device, dtype, thread count and engine line the run generated with."""
        import torch

        param = next(self.model.parameters()) if self.model is not None else None
        return {
            "backend": "transformers",
            "device": str(self.device),
            "dtype": str(param.dtype).removeprefix("torch.") if param is not None else None,
            "threads": torch.get_num_threads(),
            "engine": self.engine_line,
        }

    def close(self) -> None:
        self.model = self.engine = None
        import gc

        gc.collect()


def _on_cpu(device: str) -> bool:
    """Whether ``device`` (``auto`` included) puts the model on the CPU."""
    import torch

    return device == "cpu" or (device == "auto" and not torch.cuda.is_available())
