"""What the page shows of one episode: a short summary for lists, a full record for its view.

An episode is a trajectory line (:class:`agentenvs.agents.trajectory.Trajectory`) or a replay
stage row (:class:`agentenvs.replay.query.CutQuery`, with its validation and sidecar columns when
the file is a later stage). Both become the same two JSON shapes, so the page has one renderer:

* the **summary** (:func:`trajectory_summary`, :func:`query_summary`): task, group, sample,
  outcome, turns, error type, generated tokens, teacher prefix turns;
* the **record** (:func:`trajectory_record`, :func:`query_record`): the summary plus the system
  prompt, the teacher prefix (its messages up to the cut observation) and every turn (the
  observation the action was chosen from, the raw reply, the parsed action, valid, reward, won,
  the structured fields, the token count and log-probs where the policy recorded them).

A trajectory that started from a replayed prefix holds the prefix's messages before its first
generated reply: its assistant messages outnumber its step records by the prefix's turns.
"""

from __future__ import annotations

import math
from typing import Any

from agentenvs.agents.trajectory import Trajectory
from agentenvs.benchmarks.eval.metrics import error_type

__all__ = [
    "query_record",
    "query_summary",
    "split_prefix",
    "trajectory_record",
    "trajectory_summary",
]


def _tokens(traj: Trajectory) -> int | None:
    """Generated tokens over the episode (None: the policy recorded none, e.g. a script)."""
    counts = [len(s.token_ids) for s in traj.steps if s.token_ids is not None]
    return sum(counts) if counts else None


def trajectory_summary(traj: Trajectory) -> dict[str, Any]:
    """The list entry of one episode."""
    prefix, _ = split_prefix(traj)
    return {
        "task_id": traj.task_id,
        "family": traj.family,
        "group_id": traj.group_id,
        "sample": traj.sample_index,
        "won": bool(traj.won),
        "reward": traj.total_reward,
        "turns": traj.turns,
        "invalid": sum(not s.valid for s in traj.steps),
        "truncated": bool(traj.truncated),
        "error": error_type(traj.error) if traj.error else None,
        "error_message": traj.error,
        "tokens": _tokens(traj),
        "prefix_turns": sum(m["role"] == "assistant" for m in prefix),
    }


def split_prefix(traj: Trajectory) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(teacher prefix, the rest) of the messages after the system prompt: the prefix ends with
    the cut-state observation (empty when the episode started at the task's reset)."""
    messages = [m for m in traj.messages if m["role"] != "system"]
    assistant = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    prefix_turns = len(assistant) - len(traj.steps)
    if prefix_turns <= 0:
        return [], messages
    cut = assistant[prefix_turns - 1] + 2  # the prefix's last reply and the observation after
    return messages[:cut], messages[cut:]


def _logprob_stats(logprobs: list[float] | None) -> dict[str, float] | None:
    """Sum, mean and min of a turn's finite log-probs (None: none recorded)."""
    if not logprobs:
        return None
    finite = [x for x in logprobs if math.isfinite(x)]
    if not finite:
        return None
    total = sum(finite)
    return {"sum": total, "mean": total / len(finite), "min": min(finite)}


def trajectory_record(traj: Trajectory) -> dict[str, Any]:
    """The full view of one episode (see the module docstring)."""
    system = next((m["content"] for m in traj.messages if m["role"] == "system"), None)
    prefix, _ = split_prefix(traj)
    turns = []
    for n, step in enumerate(traj.steps):
        turns.append(
            {
                "turn": n + 1,
                "observation": step.anchor,
                "reply": step.completion,
                "action": step.action,
                "valid": step.valid,
                "reward": step.reward,
                "won": step.info.get("won"),
                "fields": step.fields,
                "tokens": None if step.token_ids is None else len(step.token_ids),
                "logprobs": step.logprobs,
                "logprob_stats": _logprob_stats(step.logprobs),
                "info": {k: v for k, v in step.info.items() if k not in ("won", "turn")},
                "result": step.observation,
            }
        )
    return {
        **trajectory_summary(traj),
        "env_id": traj.env_id,
        "agent": traj.agent,
        "protocol": traj.protocol,
        "variant": traj.variant,
        "terminated": bool(traj.terminated),
        "metadata": {k: v for k, v in traj.metadata.items() if k != "sampling"},
        "system": system,
        "prefix": prefix,
        "prefix_actions": None,
        "steps": turns,
    }


def query_summary(row: dict[str, Any]) -> dict[str, Any]:
    """The list entry of one replay query; ``won`` is the teacher's outcome, ``error`` the
    validation status when it is not ``validated``."""
    status = row.get("status")
    return {
        "task_id": row["task_id"],
        "family": row.get("family", ""),
        "group_id": row.get("group_id", ""),
        "sample": row.get("sample_index", 0),
        "won": bool(row.get("teacher_won", False)),
        "reward": None,
        "turns": row["prefix_turns"],
        "invalid": 0,
        "truncated": False,
        "error": status if status not in (None, "validated") else None,
        "error_message": row.get("reason") if status not in (None, "validated") else None,
        "tokens": row.get("prefix_token_count"),
        "prefix_turns": row["prefix_turns"],
        "strategy": row.get("strategy"),
        "status": status,
    }


_QUERY_NOTES = (
    "query_id",
    "strategy",
    "cut_from_env",
    "cut_token",
    "status",
    "reason",
    "cut_match",
    "probe_match",
    "replayed_observation",
    "observation_replaced",
    "prompt_length",
    "prefix_token_count",
    "sidecar_violations",
)


def query_record(row: dict[str, Any]) -> dict[str, Any]:
    """The full view of one replay query: its teacher prefix up to the cut observation, and the
    teacher's next step (the probe) as its one turn."""
    messages = row.get("messages") or row.get("prompt_messages") or []  # a sample: its prompt
    system = next((m["content"] for m in messages if m["role"] == "system"), None)
    prefix = [m for m in messages if m["role"] != "system"]
    steps = []
    if row.get("probe_action") is not None:
        steps.append(
            {
                "turn": row["prefix_turns"] + 1,
                "observation": row["cut_observation"],
                "reply": None,
                "action": row["probe_action"],
                "valid": True,
                "reward": None,
                "won": None,
                "fields": {},
                "tokens": None,
                "logprobs": None,
                "logprob_stats": None,
                "info": {"probe": "the teacher's next step, replayed by validation"},
                "result": row.get("probe_observation"),
            }
        )
    return {
        **query_summary(row),
        "env_id": row.get("env_id"),
        "agent": row.get("agent"),
        "protocol": None,
        "variant": row.get("env_kwargs") or {},
        "terminated": False,
        "metadata": {k: row[k] for k in _QUERY_NOTES if row.get(k) is not None},
        "system": system,
        "prefix": prefix if row["prefix_turns"] else [],
        "prefix_actions": list(row.get("prefix_actions", [])),
        "steps": steps,
    }
