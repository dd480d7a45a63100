"""Cut-state queries: a teacher trajectory cut after one of its assistant turns.

A query holds everything the later stages need, so each stage file stands alone: the prompt as the
teacher recorded it (system, prefix history, cut-state observation), the environment actions of
the prefix, the recorded cut observation, and the one-step probe (the teacher's next action and
what the environment answered). :func:`build_query` makes one from a trajectory and a turn;
:func:`raw_query` the no-prefix query every trajectory also contributes.

Alignment with :class:`agentenvs.agents.trajectory.Trajectory`: the i-th assistant message is the
reply of ``steps[i]``; the message after it, when it is a user message, shows
``steps[i].observation`` (the environment's answer, or the harness's format feedback when
``steps[i].action`` is None and the environment was not stepped).

The prompt of a query is what the policy sees at the cut state: :func:`agentenvs.agents.prompts.
prompt_messages` rebuilt from the stored messages with the trajectory's history window
(``metadata["history"]``). For the paper's chat-style prompts with every turn kept (TextCraft,
BabyAI, ALFWorld) that is exactly system + prefix history + cut-state observation; for a
template-style prompt (Sokoban, WebShop: one user message that quotes recent steps) it is that
one message, so such a prompt holds no teacher assistant tokens. An environment without a
registered prompt gets every message up to the cut.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from agentenvs.agents.trajectory import Trajectory

__all__ = [
    "DROP_EPISODE_OVER",
    "DROP_NO_OBSERVATION",
    "RAW_STRATEGY",
    "CutQuery",
    "DroppedCut",
    "TrajectoryShapeError",
    "assistant_message_indices",
    "build_query",
    "raw_query",
    "trajectory_id",
]

RAW_STRATEGY = "raw"
DROP_NO_OBSERVATION = "continuation does not start with an observation"
DROP_EPISODE_OVER = "episode over at the cut"


class TrajectoryShapeError(ValueError):
    """A trajectory whose messages and steps do not line up (the message says how)."""


@dataclass
class CutQuery:
    """One cut-state query (a ``replay.query`` row); see the module docstring.

    ``prefix_turns`` is the number of teacher assistant turns in the prompt (0 for the raw
    query); ``prefix_actions`` the environment actions they sent (unparsed replies left out).
    ``cut_from_env`` is False when the last prefix turn was unparsed, so the cut observation is
    harness feedback the environment never produced. ``cut_token`` describes the token that
    selected the cut (``position`` in the serialised trajectory, ``index`` in the assistant-token
    sequence, ``score``, ``entropy``), None for fixed-ratio and raw queries. ``env_kwargs``: the
    keywords the teacher's environment was made with besides ``max_turns`` (its protocol's, e.g.
    ALFWorld's ``game_version``; ``metadata["env_kwargs"]``), so the replay plays the same games.
    """

    query_id: str
    trajectory_id: str
    trajectory_index: int
    env_id: str
    task_id: str
    family: str
    group_id: str
    sample_index: int
    agent: str
    strategy: str
    prefix_turns: int
    messages: list[dict[str, str]]
    prefix_actions: list[str]
    cut_observation: str
    cut_from_env: bool
    probe_action: str | None
    probe_observation: str | None
    max_turns: int | None = None
    teacher_won: bool = False
    cut_token: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    env_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def is_raw(self) -> bool:
        return self.prefix_turns == 0

    @property
    def replay_key(self) -> tuple[int, str]:
        """Queries with the same key come from the same trajectory and share its replay."""
        return (self.trajectory_index, self.trajectory_id)

    def to_row(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> CutQuery:
        """The query part of a ``replay.query`` (or later-stage) row; other keys are ignored."""
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in row and n not in _OPTIONAL]
        if missing:
            raise ValueError(f"query row lacks {missing}")
        return cls(**{n: row[n] for n in names if n in row})


_OPTIONAL = {"max_turns", "teacher_won", "cut_token", "extra", "env_kwargs"}


@dataclass(frozen=True)
class DroppedCut:
    """A selected cut that made no query, and why (counted in the stage summary)."""

    trajectory_id: str
    strategy: str
    turn: int
    reason: str


def trajectory_id(traj: Trajectory) -> str:
    """``env/task/group/sample``: names a trajectory in reports (with its index, a key)."""
    return f"{traj.env_id}/{traj.task_id}/{traj.group_id}/{traj.sample_index}"


def assistant_message_indices(traj: Trajectory) -> list[int]:
    """Message indices of the assistant turns, checked against the step records."""
    indices = [i for i, m in enumerate(traj.messages) if m.get("role") == "assistant"]
    if len(indices) != len(traj.steps):
        raise TrajectoryShapeError(
            f"{trajectory_id(traj)}: {len(indices)} assistant messages but {len(traj.steps)} "
            "steps; each assistant reply must have its step record"
        )
    users = [i for i, m in enumerate(traj.messages) if m.get("role") == "user"]
    if not users or (indices and users[0] > indices[0]):
        raise TrajectoryShapeError(
            f"{trajectory_id(traj)}: no user observation before the first assistant turn"
        )
    return indices


def _common(traj: Trajectory, index: int) -> dict[str, Any]:
    return {
        "trajectory_id": trajectory_id(traj),
        "trajectory_index": index,
        "env_id": traj.env_id,
        "task_id": traj.task_id,
        "family": traj.family,
        "group_id": traj.group_id,
        "sample_index": traj.sample_index,
        "agent": traj.agent,
        "max_turns": traj.metadata.get("max_turns"),
        "env_kwargs": dict(traj.metadata.get("env_kwargs") or {}),
        "teacher_won": bool(traj.won),
    }


def _prompt_at(traj: Trajectory, end: int) -> list[dict[str, str]]:
    """The prompt the policy sees when the user message ``end - 1`` is the latest one (see the
    module docstring)."""
    from agentenvs.agents.prompts import UnknownPromptError, prompt_messages

    user_turn = sum(1 for m in traj.messages[:end] if m.get("role") == "user") - 1
    try:
        prompt = prompt_messages(
            traj.env_id,
            traj.messages,
            user_turn,
            traj.metadata.get("history"),
            traj.metadata.get("prompt"),
        )
    except UnknownPromptError:
        return [dict(m) for m in traj.messages[:end]]
    if not prompt or prompt[-1] != traj.messages[end - 1]:
        raise TrajectoryShapeError(
            f"{trajectory_id(traj)}: the prompt rebuilt for user turn {user_turn} does not end "
            "with that turn's message"
        )
    return prompt


def _probe(traj: Trajectory, step: int) -> tuple[str | None, str | None]:
    if step >= len(traj.steps) or traj.steps[step].action is None:
        return None, None
    return traj.steps[step].action, traj.steps[step].observation


def raw_query(traj: Trajectory, index: int) -> CutQuery:
    """The no-prefix query: system and the first observation (probe: the first action)."""
    assistant_message_indices(traj)
    first_user = next(i for i, m in enumerate(traj.messages) if m.get("role") == "user")
    recorded = traj.steps[0].anchor if traj.steps else traj.messages[first_user]["content"]
    probe_action, probe_observation = _probe(traj, 0)
    common = _common(traj, index)
    return CutQuery(
        query_id=f"{index}:{common['trajectory_id']}#{RAW_STRATEGY}@0",
        strategy=RAW_STRATEGY,
        prefix_turns=0,
        messages=_prompt_at(traj, first_user + 1),
        prefix_actions=[],
        cut_observation=recorded,
        cut_from_env=True,
        probe_action=probe_action,
        probe_observation=probe_observation,
        **common,
    )


def build_query(
    traj: Trajectory,
    index: int,
    turn: int,
    strategy: str,
    cut_token: dict[str, Any] | None = None,
) -> CutQuery | DroppedCut:
    """The query cut after assistant turn ``turn`` (0-based), or why there is none."""
    indices = assistant_message_indices(traj)
    if not 0 <= turn < len(indices):
        raise ValueError(f"turn {turn} is not an assistant turn (0..{len(indices) - 1})")
    tid = trajectory_id(traj)
    message = indices[turn]
    following = traj.messages[message + 1 : message + 2]
    if not following or following[0].get("role") != "user":
        return DroppedCut(tid, strategy, turn, DROP_NO_OBSERVATION)
    if turn == len(traj.steps) - 1 and (traj.terminated or traj.truncated):
        return DroppedCut(tid, strategy, turn, DROP_EPISODE_OVER)
    step = traj.steps[turn]
    probe_action, probe_observation = _probe(traj, turn + 1)
    return CutQuery(
        query_id=f"{index}:{tid}#{strategy}@{turn + 1}",
        strategy=strategy,
        prefix_turns=turn + 1,
        messages=_prompt_at(traj, message + 2),
        prefix_actions=[s.action for s in traj.steps[: turn + 1] if s.action is not None],
        cut_observation=step.observation,
        cut_from_env=step.action is not None,
        probe_action=probe_action,
        probe_observation=probe_observation,
        cut_token=cut_token,
        **_common(traj, index),
    )
