"""Where episodes start: a task's reset state, or a replay-validated cut-state query.

A :class:`TaskStart` names a task id; a :class:`QueryStart` is one row of a ``replay.sample``
file (``agentenvs replay sidecar``): the task, the teacher's prefix actions that lead the
environment to the cut state, the canonical prompt (system + prefix history + cut-state
observation) with its token ids, and the prefix sidecar (span, mask, SFT old log-probs) in those
prompt-token coordinates.

:class:`StartStream` hands out starts in a seeded order that depends only on the seed and how
many starts were taken before (each pass over the list is a fresh permutation), so the data
position of a run is one integer, saved in its checkpoints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

__all__ = ["QueryStart", "StartStream", "TaskStart", "load_query_starts", "task_starts"]


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
    """The explicit ``tasks`` (not checked here: a bad id fails its episodes only), else every
    task of ``split`` (with ``limit``: that many, a seeded sample across the task families,
    :func:`agentenvs.agents.task_sample.sample_tasks`, the same one ``agentenvs eval --limit`` draws)."""
    if tasks:
        return [TaskStart(t) for t in tasks]
    from agentenvs.registration import env_class
    from agentenvs.agents.task_sample import sample_tasks

    env = env_class(env_id)()
    ids = sample_tasks(env.task_ids(split), env.family, limit, seed)
    env.close()
    if not ids:
        raise ValueError(f"{env_id} split {split!r} has no tasks")
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
        raise ValueError(
            f"no usable {env_id} queries in {path} (left out: {skipped}); build them with "
            "'agentenvs replay cuts|validate|sidecar' and check data.strategies"
        )
    return kept, skipped


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
