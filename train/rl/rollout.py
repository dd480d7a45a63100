"""The rollout step: play k episodes from each start with the current policy.

Every start goes through :func:`agentenvs.agents.rollout.run_rollouts` (one batched generation call per
turn over every episode in flight, per-episode KV-cache keys, the environment-worker pool of
``config.workers`` or an open ``env_pool``). A task start is a plain episode spec; a query
start (Prefix-GRPO) is a cut-state spec: the environment replays the query's prefix actions
after the task's reset (inside the worker for process and Ray pools), the conversation starts
from the query's canonical prompt (system + prefix history + cut-state observation), the
prefix turns count against ``max_turns``, and a replay that no longer reaches the recorded cut
observation ends that episode with ``error`` ("replay failed: ...") while the others go on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentenvs.agents.envworkers import EnvWorkerPool
from agentenvs.agents.policy import Policy
from agentenvs.agents.prompts import env_prompt, prompt_messages
from agentenvs.agents.rollout import EpisodeSpec, RolloutConfig, RolloutStats, run_rollouts
from agentenvs.agents.trajectory import Trajectory
from agentenvs.train.rl.starts import QueryStart, Start

__all__ = ["Episode", "collect_episodes", "episode_spec", "resolve_history"]


@dataclass
class Episode:
    """One played episode and where it started.

    ``first_user_turn`` is the index (among the trajectory's user messages) of the prompt of the
    first generated reply: 0 for a task start, the canonical prompt's last user turn for a query.
    """

    start: Start
    trajectory: Trajectory
    first_user_turn: int = 0

    @property
    def group_id(self) -> str:
        return self.trajectory.group_id

    @property
    def episode_id(self) -> str:
        return f"{self.trajectory.group_id}/{self.trajectory.sample_index}"

    @property
    def error(self) -> str | None:
        return self.trajectory.error

    def step_prompt(self, step: int) -> list[dict[str, str]]:
        """The messages the policy saw before the reply of ``step`` (0 = first generated)."""
        traj = self.trajectory
        history, prompt = traj.metadata.get("history"), traj.metadata.get("prompt")
        return prompt_messages(
            traj.env_id, traj.messages, self.first_user_turn + step, history, prompt
        )


def resolve_history(env_id: str, history: int | None | str) -> int | None:
    """The history window in effect (``default``: the environment's own)."""
    if history == "default":
        return env_prompt(env_id).default_history
    if isinstance(history, str):
        raise ValueError(f"history must be 'default', None or an int >= 0, got {history!r}")
    return history


def episode_spec(start: Start, group_id: str, sample_index: int) -> EpisodeSpec:
    """The :class:`~agentenvs.agents.rollout.EpisodeSpec` of one episode from ``start``."""
    if not isinstance(start, QueryStart):
        return EpisodeSpec(start.task_id, group_id, sample_index)
    return EpisodeSpec(
        start.task_id,
        group_id,
        sample_index,
        prefix_actions=start.prefix_actions,
        start_messages=start.prompt_messages,
        prefix_turns=start.prefix_turns,
        cut_observation=start.cut_observation,
        metadata={"query_id": start.query_id},
    )


def collect_episodes(
    policy: Policy,
    env_id: str,
    starts: Sequence[Start],
    samples: int,
    config: RolloutConfig,
    *,
    group_prefix: str = "",
    stats: RolloutStats | None = None,
    env_pool: EnvWorkerPool | None = None,
) -> list[Episode]:
    """``samples`` episodes from every start, ordered by (start, sample); group ids are
    ``<group_prefix><position>:<start name>`` (unique within the call). ``env_pool``: an open
    environment pool to play in (:func:`agentenvs.agents.rollout.make_rollout_pool`), else one made from
    ``config.workers`` for this call."""
    if any(isinstance(s, QueryStart) for s in starts):
        _check_query_prompt(env_id, config.history, config.protocol)
    groups = [f"{group_prefix}{i}:{s.name}" for i, s in enumerate(starts)]
    specs = [
        episode_spec(s, g, j) for s, g in zip(starts, groups, strict=True) for j in range(samples)
    ]
    by_group = dict(zip(groups, starts, strict=True))
    episodes = [
        Episode(by_group[traj.group_id], traj, _first_user_turn(by_group[traj.group_id]))
        for traj in run_rollouts(policy, env_id, specs, config, stats=stats, env_pool=env_pool)
    ]
    order = {g: i for i, g in enumerate(groups)}
    episodes.sort(key=lambda e: (order[e.group_id], e.trajectory.sample_index))
    return episodes


def _check_query_prompt(env_id: str, history: int | None | str, protocol: str | None) -> None:
    """A query's canonical prompt holds its whole prefix: the rollout must keep every turn."""
    from agentenvs.agents.protocol_rules import ProtocolRules

    rules = ProtocolRules.of(env_id, protocol)
    name, spec = rules.name, rules.prompt
    resolved = resolve_history(env_id, rules.history(history))
    if spec.style != "chat" or resolved is not None:
        raise ValueError(
            f"cut-state queries need a chat-style prompt with every turn kept (the canonical "
            f"prompt holds the whole prefix); {env_id} under protocol {name!r} has the "
            f"{spec.style!r} prompt {spec.name!r} and history {resolved!r} (set "
            "rollout.history=none; with a template prompt use protocol=prefix-grpo)"
        )


def _first_user_turn(start: Start) -> int:
    if not isinstance(start, QueryStart):
        return 0
    return sum(1 for m in start.prompt_messages if m["role"] == "user") - 1
