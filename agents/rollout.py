"""Batched rollouts: N tasks x k samples played together, one generation call per turn.

:func:`run_rollouts` keeps up to ``max_active`` episodes in flight. Each turn it builds every
active episode's prompt (:class:`agentenvs.agents.prompts.Conversation`, history window applied),
makes **one** ``policy.generate`` call over all of them (scripted policies act next to their
environments instead), parses each reply (:func:`agentenvs.agents.prompts.parse_action`), steps the
environments whose reply had an action in one batch (in this process, in worker processes or
on Ray actors: :mod:`agentenvs.agents.envworkers`), and answers the others with the format-error
feedback, recording that step with ``valid = False`` and ``action = None`` without touching the
environment.

An episode ends when the environment terminates or truncates, when it has used ``max_turns``
replies (format errors count: each reply is a turn), or on an error (environment exception,
scripted policy failure, an environment worker lost or past ``env_timeout``); it is then turned
into a :class:`~agentenvs.agents.trajectory.Trajectory` and handed to ``on_episode`` at once (the
evaluator appends it to its JSONL file right there). The environment of an episode that ended on
an error is closed, never reused: the next episode in its slot gets a new one.

The k samples of one task form a group: same ``group_id`` (the task id, made unique with
``#<n>`` when a task is listed more than once), ``sample_index`` 0..k-1. Backend errors (bad
credentials, unknown model) are not caught: they stop the run, since every episode would hit them.

An episode can also start at a *cut state* (Prefix-GRPO's queries: a teacher trajectory cut
after one of its turns): its :class:`EpisodeSpec` carries the ``prefix_actions`` that the
environment replays after the task's reset (where the environment lives: in a worker process or
Ray actor for those pools, so a retried episode replays them again), the ``start_messages`` the
conversation begins with (system, prefix history, cut-state observation: chat-style prompts
only), the ``prefix_turns`` that count against ``max_turns``, and optionally the recorded
``cut_observation``: a replay that no longer reaches it (neither equal nor an ``env.match``), that
ends the episode, or that raises, ends the episode with ``error`` ("replay failed: ...").

A benchmark protocol (``RolloutConfig.protocol``, :mod:`agentenvs.agents.protocols`) chooses the
prompt, the parser, what an unparseable reply does and the environment's variant keywords
(:class:`agentenvs.agents.protocol_rules.ProtocolRules`, resolved once per run; each episode is an
:class:`agentenvs.agents.episode.Episode`, the stepper the TRL and verl integrations use too): with
``unparseable="feedback"`` (Prefix-GRPO's) as above, with its feedback text; with ``"project"``
(verl-agent's) the parser's projection of every reply is stepped, and a reply that broke the format
is recorded ``valid = False`` with ``info["format_error"]`` (the raw reply is the step's
``completion``), which the trainer's invalid-action penalty reads. Scripted policies' replies are
rewritten in the protocol's reply format. Every trajectory records the protocol, its prompt and the
environment's ``variant``.

Language-model policies get each episode's key (``"<group id>/<sample index>"``) with its
conversation (``generate(..., keys=...)``), so a backend can keep the episode's KV cache from
one turn to the next (the transformers backend does); when an episode ends, or the run stops,
the rollout calls the policy's ``end_episodes(keys)`` to free it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentenvs.agents.envworkers import (
    DEFAULT_ENV_TIMEOUT_S,
    EnvFailure,
    EnvWorkerPool,
    make_env_pool,
    parse_env_workers,
)
from agentenvs.agents.episode import Episode
from agentenvs.agents.policy import Completion, Policy, SamplingParams
from agentenvs.agents.prompts import EnvPrompt
from agentenvs.agents.protocol_rules import ProtocolRules
from agentenvs.agents.protocols import get_protocol
from agentenvs.agents.trajectory import Trajectory

__all__ = [
    "EpisodeSpec",
    "RolloutConfig",
    "RolloutStats",
    "episode_seed",
    "make_rollout_pool",
    "plan_episodes",
    "run_rollouts",
]


@dataclass(frozen=True)
class RolloutConfig:
    """How rollouts run.

    ``max_turns``: replies per episode (None: the environment's ``default_max_turns``); the
    environment is made with the same budget. ``history``: the prompt's history window
    (``"default"``: the environment's, see :mod:`agentenvs.agents.prompts`; None: every turn).
    ``max_active``: episodes in flight at once (each generation call batches all of them).
    ``workers``: where environments step, a count or an environment-worker spec (0 or
    ``"inprocess"``: here; N or ``"process:N"``: N worker processes; ``"ray:N@ADDRESS"``: Ray
    actors; :mod:`agentenvs.agents.envworkers`). ``env_kwargs``: passed to ``agentenvs.make`` (after
    the protocol's). ``protocol``: a benchmark protocol's name (:mod:`agentenvs.agents.protocols`);
    ``"default"`` (the default): the environment's default protocol; None: none, the environment's
    default prompt and reply format, an unparseable reply answered with
    :func:`agentenvs.agents.prompts.format_error_feedback`. ``history="default"`` means the
    protocol's window (without one, the prompt's). ``episode_seeds`` (with ``sampling.seed``): each
    reply is drawn with its own seed, :func:`episode_seed` of the seed, the episode's key and its
    turn, instead of one seed per generation call (the default, ``seed + call number``): an
    episode's draws then do not depend on which episodes share its batch, in what order, or on
    ``max_active``; trajectories record it. Whether the replies are then identical depends on the
    backend's arithmetic, where a row's float sums may run in another order in another batch: with
    the embedded agent's defaults every reply of ``agentenvs.benchmarks.speed.rollout``'s 8 episodes
    x 4 turns was the same, bit for bit, batched and one at a time (README). ``env_timeout``:
    seconds one environment operation may take on remote workers (process, Ray, http; None: no
    limit) before the worker counts as hung
    (:data:`~agentenvs.agents.envworkers.DEFAULT_ENV_TIMEOUT_S` by default).
    """

    max_turns: int | None = None
    history: int | None | str = "default"
    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_active: int = 64
    workers: int | str = 0
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    protocol: str | None = "default"
    episode_seeds: bool = False
    env_timeout: float | None = DEFAULT_ENV_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.protocol not in (None, "default"):
            get_protocol(self.protocol)  # an unknown name fails here, listing the valid ones
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if self.max_active < 1:
            raise ValueError(f"max_active must be >= 1, got {self.max_active}")
        if self.env_timeout is not None and not self.env_timeout > 0:
            raise ValueError(f"env_timeout must be > 0 seconds or None, got {self.env_timeout}")

    def pool_options(self) -> dict[str, Any]:
        """The options of the environment pool ``workers`` names (the timeout of a remote one)."""
        if parse_env_workers(self.workers).kind == "inprocess":
            return {}
        return {"step_timeout_s": self.env_timeout}


@dataclass
class RolloutStats:
    """Where the time went: wall time, inside generation, inside environment calls; and how many
    environment workers were replaced after dying (``env_worker_restarts``)."""

    episodes: int = 0
    turns: int = 0
    generate_calls: int = 0
    generated_tokens: int = 0
    wall_seconds: float = 0.0
    generate_seconds: float = 0.0
    env_seconds: float = 0.0
    env_worker_restarts: int = 0

    @property
    def env_share(self) -> float:
        return self.env_seconds / self.wall_seconds if self.wall_seconds else 0.0


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to play: task, group and sample index; and where it starts.

    By default at the task's reset. A cut start (see the module docstring) sets
    ``prefix_actions`` (replayed after the reset), ``start_messages`` (the conversation so far,
    ending with the cut-state user turn; None: a fresh conversation from the reached
    observation), ``prefix_turns`` (replies already used; None: the assistant messages of
    ``start_messages``, else the number of prefix actions) and ``cut_observation`` (what the
    replay must reach; None: not checked). ``metadata`` is added to the trajectory's.
    """

    task_id: str
    group_id: str
    sample_index: int
    prefix_actions: tuple[str, ...] = ()
    start_messages: Sequence[Mapping[str, str]] | None = field(default=None, hash=False)
    prefix_turns: int | None = None
    cut_observation: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prefix_actions", tuple(self.prefix_actions))
        if self.start_messages is not None and (
            not self.start_messages or self.start_messages[-1].get("role") != "user"
        ):
            raise ValueError(
                f"episode {self.group_id}/{self.sample_index}: start_messages must end with the "
                "cut-state user turn"
            )
        if self.prefix_turns is not None and self.prefix_turns < 0:
            raise ValueError(f"prefix_turns must be >= 0, got {self.prefix_turns}")

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.task_id, self.group_id, self.sample_index)

    @property
    def is_cut_start(self) -> bool:
        """Whether the episode starts at a cut state rather than the task's reset."""
        return (
            bool(self.prefix_actions)
            or self.start_messages is not None
            or self.cut_observation is not None
        )

    @property
    def turns_before(self) -> int:
        """Replies counted against ``max_turns`` before the first generated one."""
        if self.prefix_turns is not None:
            return self.prefix_turns
        if self.start_messages is not None:
            return sum(1 for m in self.start_messages if m.get("role") == "assistant")
        return len(self.prefix_actions)

    def reset_item(self, slot: int) -> tuple:
        """The environment pool's reset item of this episode in ``slot``."""
        if not self.prefix_actions and self.cut_observation is None:
            return (slot, self.task_id)
        return (slot, self.task_id, self.prefix_actions, self.cut_observation)


def plan_episodes(task_ids: Sequence[str], samples: int) -> list[EpisodeSpec]:
    """Every (task, sample) pair, task-major, with group ids (see the module docstring)."""
    if samples < 1:
        raise ValueError(f"samples per task must be >= 1, got {samples}")
    counts = Counter(task_ids)
    seen: Counter[str] = Counter()
    specs = []
    for task_id in task_ids:
        group = task_id if counts[task_id] == 1 else f"{task_id}#{seen[task_id]}"
        seen[task_id] += 1
        specs.extend(EpisodeSpec(task_id, group, i) for i in range(samples))
    return specs


class _Episode:
    """One episode in flight: its spec, its slot in the pool and its :class:`Episode`."""

    def __init__(self, spec: EpisodeSpec, slot: int, episode: Episode) -> None:
        self.spec = spec
        self.slot = slot
        self.episode = episode
        self.family = ""
        self.error: str | None = None
        self.done = False

    @property
    def key(self) -> str:
        return f"{self.spec.group_id}/{self.spec.sample_index}"

    @property
    def turns_used(self) -> int:
        """Replies counted against ``max_turns``: the prefix's and the generated ones."""
        return self.spec.turns_before + len(self.episode.steps)


def make_rollout_pool(
    env_id: str, config: RolloutConfig | None = None, **options: Any
) -> EnvWorkerPool:
    """The environment pool :func:`run_rollouts` would make for ``config`` (``config.workers``,
    the environment made with the rollout's turn budget), to keep open across calls: pass it as
    ``env_pool=`` and close it when done. ``options`` go to :func:`agentenvs.agents.envworkers.
    make_env_pool`."""
    config = config or RolloutConfig()
    rules = ProtocolRules.of(env_id, config.protocol)
    options = {**config.pool_options(), **options}
    return make_env_pool(env_id, config.workers, _budget(env_id, config, rules)[1], **options)


def run_rollouts(
    policy: Policy,
    env_id: str,
    episodes: Iterable[EpisodeSpec],
    config: RolloutConfig | None = None,
    *,
    on_episode: Callable[[Trajectory], None] | None = None,
    stats: RolloutStats | None = None,
    env_pool: EnvWorkerPool | None = None,
) -> list[Trajectory]:
    """Play ``episodes`` with ``policy`` (see the module docstring); returns the trajectories in
    the order they finished. ``stats`` (if given) is filled with timings. ``env_pool``: an open
    pool to step in (kept open, e.g. across training iterations; :func:`make_rollout_pool`)
    instead of one made from ``config.workers`` for this call."""
    config = config or RolloutConfig()
    stats = stats if stats is not None else RolloutStats()
    rules = ProtocolRules.of(env_id, config.protocol)  # an unknown id fails here, before envs start
    pending = deque(episodes)
    _check_starts(env_id, pending, rules.prompt)
    max_turns, env_kwargs = _budget(env_id, config, rules)
    if env_pool is not None:
        env_pool.check_compatible(env_id, env_kwargs)
    runner = env_pool or make_env_pool(env_id, config.workers, env_kwargs, **config.pool_options())
    env_seconds_before, restarts_before = runner.env_seconds, runner.restarts
    start = time.perf_counter()
    run = _Rollout(
        policy,
        env_id,
        runner,
        rules,
        config,
        stats=stats,
        on_episode=on_episode,
        max_turns=max_turns,
        env_kwargs=env_kwargs,
        slots=min(config.max_active, len(pending)),
    )
    try:
        while pending or run.active:
            run.admit(pending)
            if run.active:
                run.play_turn()
    finally:
        run.end_active()
        stats.env_seconds += runner.env_seconds - env_seconds_before
        stats.env_worker_restarts += runner.restarts - restarts_before
        stats.wall_seconds += time.perf_counter() - start
        if env_pool is None:
            runner.close()
    return run.finished


class _Rollout:
    """The state of one :func:`run_rollouts` call: the episodes in flight, the free pool slots,
    the finished trajectories; it starts episodes, plays turns and finishes episodes."""

    def __init__(
        self,
        policy: Policy,
        env_id: str,
        runner: EnvWorkerPool,
        rules: ProtocolRules,
        config: RolloutConfig,
        *,
        stats: RolloutStats,
        on_episode: Callable[[Trajectory], None] | None,
        max_turns: int,
        env_kwargs: dict[str, Any],
        slots: int,
    ) -> None:
        self.policy, self.env_id, self.runner = policy, env_id, runner
        self.rules, self.config, self.stats = rules, config, stats
        self.on_episode = on_episode
        self.max_turns = max_turns
        self.free_slots = list(range(slots - 1, -1, -1))
        self.active: list[_Episode] = []
        self.finished: list[Trajectory] = []
        self.metadata = _run_metadata(config, rules, max_turns, env_kwargs)
        self.variant = _variant(env_id, env_kwargs)

    def admit(self, pending: deque[EpisodeSpec]) -> None:
        """Start pending episodes in the free slots (one batched reset); those whose start
        failed finish at once."""
        starting = []
        while pending and self.free_slots:
            episode = Episode(self.rules, self.config.history)
            starting.append(_Episode(pending.popleft(), self.free_slots.pop(), episode))
        for ep in _start(self.runner, starting):
            if ep.done:
                self.finish(ep)
            else:
                self.active.append(ep)

    def play_turn(self) -> None:
        """One reply for every active episode (one generation call), their environments stepped
        in one batch, the episodes that ended finished."""
        completions = _generate(self.policy, self.runner, self.active, self.config, self.stats)
        if self.policy.acts_from_state:
            completions = [self.rules.reformat(c) for c in completions]
        _apply(self.runner, self.active, completions, self.max_turns)
        self.stats.turns += len(self.active)
        for ep in [ep for ep in self.active if ep.done]:
            self.finish(ep)
        self.active = [ep for ep in self.active if not ep.done]

    def finish(self, ep: _Episode) -> None:
        """Free the episode's slot and caches, make its trajectory and hand it on."""
        self.free_slots.append(ep.slot)
        if self.policy.acts_from_state:
            self.runner.end(self.policy, [(ep.slot, ep.key)])
        else:
            self.policy.end_episodes([ep.key])  # frees per-episode backend caches
        notes = self.runner.release(ep.slot)  # environment-worker failures it survived (or not)
        if ep.error is not None:  # the slot's next episode gets a new environment
            self.runner.drop([ep.slot])
        metadata = {**self.metadata, **_episode_metadata(ep, notes)}
        traj = _trajectory(self.env_id, self.policy.spec, ep, metadata)
        traj.protocol, traj.variant = self.rules.name, dict(self.variant)
        self.finished.append(traj)
        self.stats.episodes += 1
        if self.on_episode is not None:
            self.on_episode(traj)

    def end_active(self) -> None:
        """Free the backend caches of the episodes still in flight (the run stopped)."""
        if not self.policy.acts_from_state:
            self.policy.end_episodes([ep.key for ep in self.active])


def _run_metadata(
    config: RolloutConfig, rules: ProtocolRules, max_turns: int, env_kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The trajectory metadata every episode of a run shares (the sampling, the protocol's
    prompt, parser and unparseable-reply handling, the environment keywords)."""
    return {
        "history": None,
        "max_turns": max_turns,
        "sampling": dataclasses.asdict(config.sampling),
        "episode_seeds": config.episode_seeds,
        "reply_format": rules.prompt.reply_format.value,
        "prompt": rules.prompt_name,
        "parser": rules.parser_name,
        "unparseable": rules.unparseable,
        "env_kwargs": {k: v for k, v in env_kwargs.items() if k != "max_turns"},
    }


def _budget(env_id: str, config: RolloutConfig, rules: ProtocolRules) -> tuple[int, dict[str, Any]]:
    """The rollout's ``max_turns`` and the keyword arguments its environments are made with."""
    from agentenvs.registration import env_class

    max_turns = config.max_turns or int(env_class(env_id).default_max_turns)
    return max_turns, {"max_turns": max_turns, **rules.env_kwargs(), **config.env_kwargs}


def _variant(env_id: str, env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The ``variant`` of an environment made with ``env_kwargs`` (made here, never reset)."""
    from agentenvs.registration import build_env

    env = build_env(env_id, **env_kwargs)
    try:
        return dict(env.variant)
    finally:
        env.close()


def _check_starts(env_id: str, specs: Iterable[EpisodeSpec], prompt: EnvPrompt) -> None:
    if prompt.render is not None and any(s.start_messages is not None for s in specs):
        raise ValueError(
            f"{env_id} has a template-style prompt: episodes can start from start_messages only "
            "with a chat-style prompt (TextCraft, BabyAI, ALFWorld)"
        )


def _start(runner: EnvWorkerPool, starting: list[_Episode]) -> list[_Episode]:
    """Reset (and, for cut starts, replay) the environments of ``starting`` in one batch and
    begin their conversations; an episode whose start failed is marked done with ``error``."""
    results = runner.reset([ep.spec.reset_item(ep.slot) for ep in starting])
    for ep, result in zip(starting, results, strict=True):
        spec = ep.spec
        if isinstance(result, EnvFailure):
            ep.error = f"{'replay' if spec.is_cut_start else 'reset'} failed: {result.error}"
            ep.done = True
            continue
        observation, info = result
        ep.family = str(info.get("family", ""))
        if spec.start_messages is not None:
            ep.episode.resume(spec.start_messages, observation, info)
        else:
            ep.episode.start(observation, info)
    return starting


def episode_seed(seed: int, key: str, turn: int) -> int:
    """The sampling seed of reply ``turn`` (0-based, counting a cut start's prefix turns) of the
    episode ``key`` (``"<group id>/<sample index>"``) in a run seeded with ``seed``: 63 bits of
    a BLAKE2b digest, the same in every process."""
    digest = hashlib.blake2b(f"{seed}|{key}|{turn}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def _generate(
    policy: Policy,
    runner: Any,
    active: list[_Episode],
    config: RolloutConfig,
    stats: RolloutStats,
) -> list[Completion]:
    sampling = config.sampling
    t0 = time.perf_counter()
    if policy.acts_from_state:
        completions = runner.act(policy, [(ep.slot, ep.key) for ep in active])
        completions = [
            Completion(text="", error=f"policy failed: {c.error}")
            if isinstance(c, EnvFailure)
            else c
            for c in completions
        ]
    else:
        prompts = [ep.episode.prompt() for ep in active]
        keys = [ep.key for ep in active]
        if sampling.seed is not None and config.episode_seeds:
            seeds = [episode_seed(sampling.seed, ep.key, ep.turns_used) for ep in active]
            completions = policy.generate(prompts, sampling, keys=keys, seeds=seeds)
        else:
            if sampling.seed is not None:  # a different, repeatable seed for every call
                sampling = dataclasses.replace(sampling, seed=sampling.seed + stats.generate_calls)
            completions = policy.generate(prompts, sampling, keys=keys)
    if len(completions) != len(active):
        raise RuntimeError(
            f"{policy!r} returned {len(completions)} completions for {len(active)} prompts"
        )
    stats.generate_calls += 1
    stats.generate_seconds += time.perf_counter() - t0
    stats.generated_tokens += sum(len(c.token_ids or ()) for c in completions)
    return completions


def _apply(
    runner: Any,
    active: list[_Episode],
    completions: list[Completion],
    max_turns: int,
) -> None:
    """Take every reply (:meth:`Episode.reply`); step the environments of the parseable (or
    projected) ones in one batch."""
    to_step: list[tuple[_Episode, str]] = []
    for ep, completion in zip(active, completions, strict=True):
        if completion.error is not None:
            ep.error = completion.error
            ep.done = True
            continue
        action = ep.episode.reply(completion)
        if action is not None:
            to_step.append((ep, action))
    results = runner.step([(ep.slot, action) for ep, action in to_step]) if to_step else []
    for (ep, _), result in zip(to_step, results, strict=True):
        if isinstance(result, EnvFailure):
            ep.error = f"step failed: {result.error}"
            ep.done = True
            continue
        ep.episode.observe(*result)
    for ep in active:
        if ep.done:
            continue
        if ep.episode.terminated or ep.episode.truncated:
            ep.done = True
        elif ep.turns_used >= max_turns:
            ep.episode.truncated = ep.done = True


def _episode_metadata(ep: _Episode, notes: list[str]) -> dict[str, Any]:
    """The trajectory metadata of one episode: its history window, its spec's metadata, its
    prefix turns (cut starts) and the environment-worker failures it survived (if any)."""
    out: dict[str, Any] = {"history": ep.episode.conversation.history, **ep.spec.metadata}
    if ep.spec.is_cut_start:
        out["prefix_turns"] = ep.spec.turns_before
    if notes:
        out["env_worker_failures"] = notes
    return out


def _trajectory(env_id: str, agent: str, ep: _Episode, metadata: dict[str, Any]) -> Trajectory:
    return Trajectory(
        env_id=env_id,
        task_id=ep.spec.task_id,
        family=ep.family,
        group_id=ep.spec.group_id,
        sample_index=ep.spec.sample_index,
        agent=agent,
        messages=list(ep.episode.conversation.messages),
        steps=ep.episode.steps,
        total_reward=ep.episode.total_reward,
        won=ep.episode.won,
        turns=len(ep.episode.steps),
        terminated=ep.episode.terminated,
        truncated=ep.episode.truncated,
        error=ep.error,
        metadata=metadata,
    )
