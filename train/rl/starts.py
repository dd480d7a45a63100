"""Where episodes start: a task's reset state, or a replay-validated cut-state query.

A :class:`TaskStart` names a task id; a :class:`QueryStart` is one row of a ``replay.sample``
file (``agentenvs replay sidecar``): the task, the teacher's prefix actions that lead the
environment to the cut state, the canonical prompt (system + prefix history + cut-state
observation) with its token ids, and the prefix sidecar (span, mask, SFT old log-probs) in those
prompt-token coordinates.

:class:`StartStream` hands out starts in a seeded order that depends only on the seed and how
many starts were taken before (each pass over the list is a fresh permutation), so the data
position of a run is one integer, saved in its checkpoints.

:func:`episode_starts` gives a run its starts checked against its settings before any episode
plays: a start that no episode could play (a query whose prefix uses the whole turn budget, an
unknown task id) or whose rows the update would all drop (a prompt over ``max_seq_len``) is found
there, and a run left with none stops at start-up with the fix (:class:`ConfigError`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from agentenvs.train.config import ConfigError

if TYPE_CHECKING:
    from agentenvs.train.rl.config import RLConfig

__all__ = [
    "QueryStart",
    "StartStream",
    "TaskStart",
    "episode_starts",
    "load_query_starts",
    "task_starts",
]


@dataclass(frozen=True)
class TaskStart:
    """Episodes that start at ``task_id``'s reset."""

    task_id: str

    @property
    def name(self) -> str:
        return self.task_id


@dataclass(frozen=True)
class QueryStart:
    """Episodes that start at a replayed cut state (one ``replay.sample`` row)."""

    query_id: str
    family_id: str
    """The teacher trajectory the query was cut from (``trajectory_id``)."""
    task_id: str
    strategy: str
    prefix_turns: int
    prefix_actions: tuple[str, ...]
    prompt_messages: tuple[dict[str, str], ...]
    prompt_token_ids: tuple[int, ...]
    cut_observation: str
    sidecar: dict[str, Any]
    """``assistant_prefix_span``, ``prefix_mask``, ``assistant_prefix_old_log_probs``,
    ``prefix_token_count`` (empty span for a raw query)."""

    @property
    def name(self) -> str:
        return self.query_id

    @property
    def is_raw(self) -> bool:
        return self.prefix_turns == 0

    @property
    def turns_used(self) -> int:
        """Turns of the budget the prefix takes: its replies (counted by the rollout) or its
        actions (counted by the environment), whichever is more."""
        return max(self.prefix_turns, len(self.prefix_actions))

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> QueryStart:
        observation = row.get("replayed_observation") or row["cut_observation"]
        return cls(
            query_id=str(row["query_id"]),
            family_id=str(row["trajectory_id"]),
            task_id=str(row["task_id"]),
            strategy=str(row["strategy"]),
            prefix_turns=int(row["prefix_turns"]),
            prefix_actions=tuple(row["prefix_actions"]),
            prompt_messages=tuple(dict(m) for m in row["prompt_messages"]),
            prompt_token_ids=tuple(int(t) for t in row["prompt_token_ids"]),
            cut_observation=str(observation),
            sidecar={
                "assistant_prefix_span": dict(row["assistant_prefix_span"]),
                "prefix_mask": list(row["prefix_mask"]),
                "assistant_prefix_old_log_probs": list(row["assistant_prefix_old_log_probs"]),
                "prefix_token_count": int(row["prefix_token_count"]),
            },
        )


Start = TaskStart | QueryStart


def task_starts(
    env_id: str, tasks: Sequence[str], split: str, limit: int | None = None, seed: int = 0
) -> list[TaskStart]:
    """The explicit ``tasks`` (checked by :func:`episode_starts`), else every task of ``split``
    (with ``limit``: that many, a seeded sample across the task families,
    :func:`agentenvs.agents.task_sample.sample_tasks`, the same one ``agentenvs eval --limit``
    draws)."""
    if tasks:
        return [TaskStart(t) for t in tasks]
    from agentenvs.agents.task_sample import sample_tasks
    from agentenvs.registration import build_env

    env = build_env(env_id)
    ids = sample_tasks(env.task_ids(split), env.family, limit, seed)
    env.close()
    if not ids:
        raise ConfigError(f"{env_id} split {split!r} has no tasks: choose another data.split")
    return [TaskStart(t) for t in ids]


def load_query_starts(
    path: str | Path, env_id: str, strategies: Sequence[str] = ()
) -> tuple[list[QueryStart], dict[str, int]]:
    """The usable queries of a ``replay.sample`` file and counts of the rows left out.

    Left out: rows of another environment, of a strategy not in ``strategies`` (when given), and
    rows with sidecar invariant violations (``sidecar_violations``).
    """
    from agentenvs.replay.io import SAMPLE_SCHEMA, read_rows

    kept: list[QueryStart] = []
    skipped = {"other_env": 0, "other_strategy": 0, "sidecar_violations": 0}
    for row in read_rows(path, SAMPLE_SCHEMA):
        if row.get("env_id") != env_id:
            skipped["other_env"] += 1
        elif strategies and row.get("strategy") not in strategies:
            skipped["other_strategy"] += 1
        elif row.get("sidecar_violations"):
            skipped["sidecar_violations"] += 1
        else:
            kept.append(QueryStart.from_row(row))
    if not kept:
        raise ConfigError(
            f"no usable {env_id} queries in {path} (left out: {skipped}); build them with "
            "'agentenvs replay cuts|validate|sidecar' and check data.strategies"
        )
    return kept, skipped


def episode_starts(config: RLConfig, warn: Callable[[str], None]) -> list[Start]:
    """The starts of the run ``config`` describes, checked before any episode plays.

    Tasks: the split's (``data.limit``: a seeded sample) or ``data.tasks``, whose ids the
    environment does not know are named in a warning (their episodes fail), or are a
    :class:`ConfigError` when no id is known. Queries (``data.queries``): those left out of the
    file are counted in a warning, and so are the queries no episode could use: a prefix that
    takes the whole turn budget (``QueryStart.turns_used >= rollout.max_turns``: the episode is
    over at the cut) or a prompt of at least ``max_seq_len`` tokens (every row is dropped); a
    :class:`ConfigError` naming the fix when none is left.
    """
    data = config.data
    if config.spec.starts == "tasks":
        starts = task_starts(data.env_id, data.tasks, data.split, data.limit, data.task_seed)
        if data.tasks:
            _check_task_ids(data.env_id, data.tasks, warn)
        return starts
    starts, skipped = load_query_starts(data.queries, data.env_id, data.strategies)
    if any(skipped.values()):
        warn(f"queries left out of {data.queries}: {skipped}")
    turns, seq_len = config.rollout.max_turns, config.max_seq_len
    over_turns = [q for q in starts if q.turns_used >= turns]
    over_length = [q for q in starts if seq_len is not None and len(q.prompt_token_ids) >= seq_len]
    left_out = {id(q) for q in (*over_turns, *over_length)}
    playable = [q for q in starts if id(q) not in left_out]
    if not playable:
        raise ConfigError(_unplayable(data.queries, len(starts), over_turns, over_length, config))
    if len(playable) < len(starts):
        reasons = {
            f"prefixes of >= rollout.max_turns={turns} turns (nothing left to play)": over_turns,
            f"prompts of >= max_seq_len={seq_len} tokens (every row dropped)": over_length,
        }
        why = ", ".join(f"{len(qs)} with {text}" for text, qs in reasons.items() if qs)
        warn(f"{len(starts) - len(playable)} of {len(starts)} queries left out: {why}")
    return playable


def _unplayable(
    path: str, n: int, over_turns: list[QueryStart], over_length: list[QueryStart], config: Any
) -> str:
    """Why no query of ``path`` can be played, and the settings that fix it."""
    turns, seq_len = config.rollout.max_turns, config.max_seq_len
    if over_turns:
        shortest = min(q.turns_used for q in over_turns)
        return (
            f"every one of the {n} queries in {path} is unplayable: {len(over_turns)} have "
            f"prefixes of >= rollout.max_turns={turns} turns (the shortest {shortest}), so each "
            f"episode is over at its cut with nothing left to play: set rollout.max_turns above "
            f"{shortest} (the protocol's limit: leave it unset), or cut shorter prefixes "
            "('agentenvs replay cuts'; data.strategies=raw keeps the no-prefix queries)"
        )
    shortest = min(len(q.prompt_token_ids) for q in over_length)
    return (
        f"every one of the {n} queries in {path} has a prompt of >= max_seq_len={seq_len} tokens "
        f"(the shortest {shortest}), so the update would drop every row: set max_seq_len above "
        f"{shortest} plus the reply tokens (rollout.max_new_tokens), or leave it unset"
    )


def _check_task_ids(env_id: str, tasks: Sequence[str], warn: Callable[[str], None]) -> None:
    """Warn of the ids of ``tasks`` that ``env_id`` does not know (not in a split, and a reset
    refuses them); a :class:`ConfigError` when it knows none."""
    from agentenvs.core import UnknownTaskError
    from agentenvs.registration import build_env
    from agentenvs.suggestions import did_you_mean

    env = build_env(env_id)
    try:
        listed = {t for split in env.splits for t in env.task_ids(split)}
        unknown = []
        for task in dict.fromkeys(t for t in tasks if t not in listed):
            try:
                env.reset(options={"task_id": task})
            except UnknownTaskError:
                unknown.append(task)
    finally:
        env.close()
    if not unknown:
        return
    hint = did_you_mean(unknown[0], sorted(listed))
    if len(unknown) == len(set(tasks)):
        raise ConfigError(
            f"data.tasks: {env_id} knows none of {unknown}, so every episode would fail: give "
            f"task ids of 'agentenvs list' (or leave data.tasks empty for data.split).{hint}"
        )
    warn(f"data.tasks: {env_id} does not know {unknown}; their episodes will fail.{hint}")


class StartStream:
    """An endless seeded shuffle of ``starts``; ``position`` is how many were taken."""

    def __init__(self, starts: Sequence[Start], seed: int, position: int = 0) -> None:
        if not starts:
            raise ValueError("no episode starts to sample from")
        self.starts = list(starts)
        self.seed = int(seed)
        self.position = int(position)
        self._epoch = -1
        self._order: list[int] = []

    def take(self, count: int) -> list[Start]:
        out = []
        n = len(self.starts)
        for _ in range(count):
            epoch, index = divmod(self.position, n)
            if epoch != self._epoch:
                generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
                self._order = torch.randperm(n, generator=generator).tolist()
                self._epoch = epoch
            out.append(self.starts[self._order[index]])
            self.position += 1
        return out
