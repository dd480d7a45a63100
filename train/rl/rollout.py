"""The rollout step: play k episodes from each start with the current policy.

Every start goes through :func:`agentenvs.agents.rollout.run_rollouts` (one batched generation call
per turn over every episode in flight, per-episode KV-cache keys, the environment-worker pool of
``config.workers`` or an open ``env_pool``). A task start is a plain episode spec; a query start
(Prefix-GRPO) is a cut-state spec: the environment replays the query's prefix actions after the
task's reset (inside the worker for process and Ray pools), the conversation starts from the query's
canonical prompt (system + prefix history + cut-state observation), the prefix turns count against
``max_turns``, and a replay that no longer reaches the recorded cut observation ends that episode
with ``error`` ("replay failed: ...") while the others go on.

Failure policy (:func:`collect_episodes` with ``retries``): an episode that ended on an error (an
environment exception, a worker or server lost past its own retry, a timeout) is played again on
a new environment from the same spec (task, start state, prompt; its replies drawn from the
run's seeded stream), up to ``retries`` times; each retried trajectory lists the errors of its
earlier attempts in ``metadata["failed_attempts"]``. One that still fails keeps its error: the
trainer leaves its whole group out of the update (:func:`failed_groups`) and counts it, and too
many in one iteration stop the run with :class:`RolloutFailureError`, whose message gives the
first error and its fix (:func:`failure_fix`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agentenvs.agents.envworkers import EnvWorkerPool
from agentenvs.agents.policy import Policy
from agentenvs.agents.prompts import env_prompt, prompt_messages
from agentenvs.agents.rollout import EpisodeSpec, RolloutConfig, RolloutStats, run_rollouts
from agentenvs.agents.trajectory import Trajectory
from agentenvs.train.rl.starts import QueryStart, Start

__all__ = [
    "Episode",
    "RolloutFailureError",
    "collect_episodes",
    "episode_spec",
    "failed_groups",
    "failure_fix",
    "failure_metrics",
    "resolve_history",
]


class RolloutFailureError(RuntimeError):
    """Too many episodes of an iteration failed even after their retries (or the environment
    workers are gone): the run stopped after a checkpoint; the message gives the first error and
    its fix."""


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
    retries: int = 0,
) -> list[Episode]:
    """``samples`` episodes from every start, ordered by (start, sample); group ids are
    ``<group_prefix><position>:<start name>`` (unique within the call). ``env_pool``: an open
    environment pool to play in (:func:`agentenvs.agents.rollout.make_rollout_pool`), else one
    made from ``config.workers`` for this call. ``retries``: how many times an episode that
    ended on an error is played again (the module docstring's failure policy)."""
    if any(isinstance(s, QueryStart) for s in starts):
        _check_query_prompt(env_id, config.history, config.protocol)
    groups = [f"{group_prefix}{i}:{s.name}" for i, s in enumerate(starts)]
    specs = [
        episode_spec(s, g, j) for s, g in zip(starts, groups, strict=True) for j in range(samples)
    ]
    by_group = dict(zip(groups, starts, strict=True))

    def play(batch: list[EpisodeSpec]) -> list[Trajectory]:
        return run_rollouts(policy, env_id, batch, config, stats=stats, env_pool=env_pool)

    episodes = [
        Episode(by_group[traj.group_id], traj, _first_user_turn(by_group[traj.group_id]))
        for traj in _with_retries(play, specs, retries)
    ]
    order = {g: i for i, g in enumerate(groups)}
    episodes.sort(key=lambda e: (order[e.group_id], e.trajectory.sample_index))
    return episodes


def _with_retries(
    play: Callable[[list[EpisodeSpec]], list[Trajectory]],
    specs: list[EpisodeSpec],
    retries: int,
) -> list[Trajectory]:
    """``play(specs)``, then the specs whose episode ended on an error played again, up to
    ``retries`` times; every spec's last trajectory, with its earlier errors in its metadata."""
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    by_key = {(s.group_id, s.sample_index): s for s in specs}
    latest = {(t.group_id, t.sample_index): t for t in play(specs)}
    errors: dict[tuple[str, int], list[str]] = {}
    for _ in range(retries):
        failed = [key for key, traj in latest.items() if traj.error is not None]
        if not failed:
            break
        for key in failed:
            errors.setdefault(key, []).append(str(latest[key].error))
        for traj in play([by_key[key] for key in failed]):
            key = (traj.group_id, traj.sample_index)
            traj.metadata["failed_attempts"] = list(errors[key])
            latest[key] = traj
    return list(latest.values())


def failed_groups(episodes: Sequence[Episode]) -> set[str]:
    """The groups with an episode that ended on an error: left out of the update whole (a group
    without its failed member would compare the others against a biased baseline)."""
    return {ep.group_id for ep in episodes if ep.error is not None}


def failure_metrics(episodes: Sequence[Episode], dropped_groups: int) -> dict[str, float]:
    """``rollout/failed_episodes`` (failed after their retries), ``rollout/dropped_groups``
    and ``rollout/retried_episodes`` (played again at least once)."""
    return {
        "rollout/failed_episodes": float(sum(ep.error is not None for ep in episodes)),
        "rollout/dropped_groups": float(dropped_groups),
        "rollout/retried_episodes": float(
            sum(bool(ep.trajectory.metadata.get("failed_attempts")) for ep in episodes)
        ),
    }


# what to do about an episode's error, by what its message says (the first match wins)
_FIXES: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        ("no free session",),
        "give the server more sessions (agentenvs serve --max-sessions), add servers, or lower "
        "rollout.max_active",
    ),
    (
        ("gave no answer", "no server is left", "agentenvs server", "environment lost", "worker"),
        "the environment workers died or hung: restart them (agentenvs serve ... for "
        "--env-workers http://) and check the machines they run on; if they were only slow, "
        "raise rollout.env_timeout",
    ),
    (
        ("unknown_task", "UnknownTaskError", "unknown task"),
        "a task id the environment does not have: fix data.tasks (or the queries file)",
    ),
    (
        ("replay failed",),
        "a query's cut state no longer replays: validate the queries again with this agentenvs "
        "version (agentenvs replay validate) and train on the new file",
    ),
)


def failure_fix(error: str) -> str:
    """What to do about an episode's ``error`` (a message of the rollout or its workers)."""
    for needles, fix in _FIXES:
        if any(needle in error for needle in needles):
            return fix
    return (
        "the environment (or the scripted policy) raised: fix the cause the error names, or "
        "report it with the task id"
    )


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
