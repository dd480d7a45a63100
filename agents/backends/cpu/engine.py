"""The CPU engine: the one object a :class:`~agentenvs.agents.backends.transformers_backend.
TransformersPolicy` asks for with ``cpu_engine="auto"`` (``docs/cpu-engine.md`` has the
measurements behind every choice here).

A policy with the engine runs its prefill chunks and decoding steps through the engine's own
forward pass (:class:`~agentenvs.agents.backends.cpu.decode_step.LeanModel`, a flat loop over
the model's layers) instead of the model's: two-bmm or compiled attention
(:mod:`~agentenvs.agents.backends.cpu.attention`, :mod:`~agentenvs.agents.backends.cpu.kernels`),
4-bit copies of the decoder weights and an 8-bit LM head for decoding steps
(:mod:`~agentenvs.agents.backends.cpu.int4`), the batch's shared system prompt read once per step
(cascade), and a compiled sampler. Everything it needs lives in the :class:`CpuEngine` object the
policy owns: the model is not changed (no attention implementation registered or switched, no
module's ``forward`` replaced, no buffers added), and nothing is switched for the process, so two
policies on one model do not affect each other.

The parts are fixed, chosen by measurement (:data:`MEASURED`); where one cannot run here it
falls back (no C compiler: the two-bmm attention and torch's 4-bit kernel; no AMX tiles: the
two-bmm prefill attention) and :attr:`CpuEngine.line` says so. ``run.json`` records that line.
:class:`EngineSettings` names the parts for tests and measurements that compare them, and
holds the generator's tuning around the engine (prefix sharing, the prefix cache, prefill).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

__all__ = ["MEASURED", "SETTINGS_FIELDS", "CpuEngine", "EngineSettings", "start"]


_PARTS = {
    "decode_attention": ("kernel", "bmm"),
    "prefill_attention": ("kernel", "bmm"),
    "decode_weights": ("int4", "int4_torch", "model"),
    "sampler": ("compiled", "torch"),
}
_FLAGS = ("cascade", "share_prefix", "prefix_cache")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclass(frozen=True)
class EngineSettings:
    """How the transformers backend generates on CPU: the generator's tuning, and the CPU
    engine's parts when it runs (``cpu_engine="auto"``).

    The parts' defaults are :data:`MEASURED`, what the engine runs; the other values exist for
    the tests and benchmarks that compare parts. The tuning applies with or without the engine.
    """

    decode_attention: str = "kernel"
    """``kernel`` (compiled, AMX tiles where the CPU has them) or ``bmm`` (two batched products)."""
    prefill_attention: str = "kernel"
    """``kernel`` (AMX tiles) or ``bmm``."""
    decode_weights: str = "int4"
    """``int4`` (compiled kernel), ``int4_torch`` (torch's kernel) or ``model`` (the weights)."""
    cascade: bool = True
    """The shared system prompt's keys read once per step for all rows."""
    sampler: str = "compiled"
    """``compiled`` or ``torch``."""
    share_prefix: bool = True
    """Compute a batch's common prompt prefix once."""
    prefix_cache: bool = True
    """Keep each episode's KV cache across turns when ``generate`` gets ``keys``."""
    prefix_cache_mb: float | str = "auto"
    """The prefix cache's memory budget in MiB (``auto``: a quarter of the free accelerator
    memory, or of the available RAM on CPU)."""
    prefill: str = "auto"
    """``rows`` (prompts one by one, then batched decoding: fastest on CPU), ``batch`` (one
    padded batch, for GPUs) or ``auto`` (rows on CPU, batch elsewhere)."""

    def __post_init__(self) -> None:
        for name, allowed in _PARTS.items():
            if getattr(self, name) not in allowed:
                raise ValueError(
                    f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}"
                )
        for name in _FLAGS:
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.prefill not in ("auto", "rows", "batch"):
            raise ValueError(f"prefill must be auto, rows or batch, got {self.prefill!r}")
        budget = self.prefix_cache_mb
        if budget != "auto" and not (isinstance(budget, (int, float)) and budget > 0):
            raise ValueError(f"prefix_cache_mb must be auto or a size > 0 in MiB, got {budget!r}")

    @classmethod
    def of(cls, **options: Any) -> EngineSettings:
        """Settings from command-line values (``"false"``, ``"2.5"``, ...) or typed ones."""
        values = dict(options)
        for name in _FLAGS:
            text = str(values.get(name, "")).strip().lower()
            if text in _TRUE or text in _FALSE:
                values[name] = text in _TRUE
        budget = values.get("prefix_cache_mb")
        if isinstance(budget, str) and budget != "auto":
            try:
                values["prefix_cache_mb"] = float(budget)
            except ValueError:
                pass  # __post_init__ names the problem
        return cls(**values)

    @property
    def parts(self) -> dict[str, Any]:
        """The engine's parts (the fields that matter only when it runs)."""
        return {name: getattr(self, name) for name in (*_PARTS, "cascade")}


SETTINGS_FIELDS = tuple(f.name for f in fields(EngineSettings))
"""The names of :class:`EngineSettings`' fields (the backend options that go into it)."""
MEASURED = EngineSettings()


def start(
    model: Any, source: Any, cpu_engine: str, settings: EngineSettings = MEASURED
) -> tuple[CpuEngine | None, str]:
    """(the engine, its line) or (None, ``"off: <why>"``) for ``cpu_engine``: ``"off"``, or
    ``"auto"`` (``settings``' parts where the engine applies; their defaults are
    :data:`MEASURED`). ``source``: the model's directory (its float32 weights are quantized
    when it has them)."""
    if cpu_engine == "off":
        if settings.parts != MEASURED.parts:
            raise ValueError(
                "the CPU engine's parts (decode_attention, prefill_attention, decode_weights, "
                "cascade, sampler) are read only with cpu_engine=auto"
            )
        return None, "off: cpu_engine=off"
    if cpu_engine != "auto":
        raise ValueError(f"cpu_engine must be auto or off, got {cpu_engine!r}")
    reason = unsupported(model)
    if reason is not None:
        return None, f"off: {reason}"
    engine = CpuEngine(model, source, settings)
    return engine, engine.line


def unsupported(model: Any) -> str | None:
    """Why the engine cannot run ``model`` (None when it can)."""
    import torch

    from agentenvs.agents.backends.cpu.decode_step import LeanModel
    from agentenvs.agents.backends.kv_cache import writes_in_place

    try:
        param = next(model.parameters())
    except (StopIteration, AttributeError):
        return "not a torch model"
    if param.device.type != "cpu":
        return f"the model is on {param.device.type}"
    if param.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        return f"dtype {str(param.dtype).removeprefix('torch.')}"
    if not writes_in_place():
        return "transformers before 5 (no in-place cache buffers)"
    return LeanModel.unsupported(model)


class CpuEngine:
    """The engine's state for one policy on one model (module docstring)."""

    def __init__(self, model: Any, source: Any, settings: EngineSettings = MEASURED) -> None:
        from agentenvs.agents.backends.cpu import kernels
        from agentenvs.agents.backends.cpu.decode_step import LeanModel
        from agentenvs.agents.backends.kv_cache import weights_fingerprint

        self.model = model
        self.settings = settings
        self.source = source
        dtype = next(model.parameters()).dtype
        self.dtype = str(dtype).removeprefix("torch.")
        compiled = kernels.load() is not None
        notes: list[str] = []
        self.kernel_attention = False
        if settings.decode_attention == "kernel":
            if not kernels.takes_dtype(dtype):
                notes.append("two-bmm decoding attention: the kernel takes bfloat16 and float32")
            elif not compiled:
                notes.append(f"two-bmm attention: {kernels.load_error()}")
            else:
                self.kernel_attention = True
        self.kernel_prefill = False
        if settings.prefill_attention == "kernel":
            why = kernels.prefill_kernel_error(model)
            if why is None:
                self.kernel_prefill = True
            elif compiled or settings.decode_attention != "kernel":
                notes.append(f"two-bmm prefill attention: {why}")
        self.weights: Any = None
        self.compiled_weights = settings.decode_weights == "int4"
        if settings.decode_weights != "model":
            self._install_weights(source)
            if self.weights is None:
                notes.append("model weights: no 4-bit copies for this dtype or torch build")
            self._fingerprint = weights_fingerprint(model)
        self.cascade = settings.cascade
        self.compiled_sampler = settings.sampler == "compiled" and compiled
        self.lean = LeanModel(model, self._linear, self._fused)
        self.cascade_rows = 0  # rows decoded with the shared prefix kept once
        self.packed_rows = 0  # rows prefilled in a pass shared with other rows
        self.steps = 0  # decoding steps taken
        parts = [self.dtype]
        if compiled:
            tiles = ", amx tiles" if kernels.tiles_available() else ""
            parts.append(f"compiled kernels ({kernels.int_dot_path()} dot products{tiles})")
        else:
            parts.append(f"no compiled kernels: {kernels.load_error()}")
        report = self.weights.report if self.weights is not None else None
        if report is not None:
            kind = "compiled" if report.compiled else "torch"
            head = " + 8-bit head" if report.head_relative_error is not None else ""
            parts.append(f"4-bit weights ({kind}{head}, max error {report.max_relative_error:.2g})")
        if settings != MEASURED:
            parts.append(f"settings {settings}")
        self.line = "cpu engine: " + ", ".join(parts + notes)

    # ----- weights ---------------------------------------------------------------------------

    def _install_weights(self, source: Any) -> None:
        from agentenvs.agents.backends.cpu.int4 import install_for

        self.weights = install_for(self.model, source, compiled=self.compiled_weights)

    def follow_weights(self, fingerprint: Any) -> None:
        """Re-quantize the 4-bit copies when the model's weights changed (an optimizer step)."""
        if self.weights is not None and fingerprint != self._fingerprint:
            self._install_weights(None)
            self._fingerprint = fingerprint

    def _linear(self, module: Any, x: Any, decoding: bool) -> Any:
        if self.weights is None:
            return module(x)
        return self.weights.linear(module, x, decoding)

    def _fused(self, parent: Any, group: str, rows: int) -> tuple[Any, ...] | None:
        """A fused 4-bit copy's :func:`~agentenvs.agents.backends.cpu.int4.product` arguments
        after ``x`` for a decoding step of ``rows`` rows, or None."""
        if self.weights is None:
            return None
        copy = self.weights.fused.get((parent, group))
        if copy is None or rows > copy.max_rows:
            return None
        return copy.packed, copy.scales, copy.outputs, copy.compiled

    # ----- passes ----------------------------------------------------------------------------

    def prefill_pass(
        self, input_ids: Any, position_ids: Any, cache: Any, layout: Any, ends: Any
    ) -> Any:
        """Logits ``[1, len(ends), vocab]`` of one packed prefill pass (``layout``: per chunk
        (key row, start, stop, new, query row, end), :func:`~agentenvs.agents.backends.cpu.
        attention.rows_attention`)."""
        from agentenvs.agents.backends.cpu.attention import rows_attention

        kernel = self.kernel_prefill

        def attend(query: Any, keys: Any, values: Any, scale: float) -> Any:
            return rows_attention(query, keys, values, layout, scale, kernel=kernel)

        return self.lean.prefill(input_ids, position_ids, cache, attend, ends)

    def decode_step(
        self, input_ids: Any, attention_mask: Any, position_ids: Any, cache: Any, prefix: Any
    ) -> Any:
        """Logits ``[batch, vocab]`` of one decoding step (``prefix``: the cascade's shared
        prefix per layer, or None)."""
        self.steps += 1
        return self.lean.step(
            input_ids,
            attention_mask,
            position_ids,
            cache,
            kernel=self.kernel_attention,
            prefixes=prefix,
        )

    def sample(self, logits: Any, sampling: Any, generator: Any) -> tuple[Any, Any]:
        """(tokens, log-probs at temperature 1): the compiled sampler where it applies
        (temperature > 0, ``top_p`` 1: the same uniform draws and inversion of each row's
        distribution as torch's path, in one pass), else the backend's torch sampler."""
        import torch

        from agentenvs.agents.backends.cpu import kernels
        from agentenvs.agents.backends.hf_loading import sample_with_logprobs, uniform_draws

        if self.compiled_sampler and sampling.temperature > 0 and sampling.top_p >= 1.0:
            draws = uniform_draws(logits.shape[0], generator, logits.device, torch.float32)
            return kernels.sample_rows(logits, sampling.temperature, draws[:, 0])
        return sample_with_logprobs(logits, sampling, generator)
