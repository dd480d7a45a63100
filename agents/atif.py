"""Trajectories to and from ATIF, Harbor's Agent Trajectory Interchange Format (v1.8).

:func:`trajectory_to_atif` turns one episode (:class:`~agentenvs.agents.trajectory.Trajectory`)
into one ATIF document, checked against the ``atif`` package's pydantic models:

* ``agent``: name ``agentenvs`` and its version, the model (when the policy is an LLM) and our
  agent spec and protocol in ``agent.extra``;
* ``steps``: the system prompt (``source="system"``), a teacher prefix's messages (copied context:
  ``is_copied_context``), then the conversation: each user turn (the observation as the model read
  it) a ``user`` step, each reply an ``agent`` step whose message is the raw reply, whose one
  tool call ``act`` carries the parsed action (none for an unparseable reply), whose observation
  is what the environment answered, whose metrics hold the generated token ids, their count and
  log-probs where the policy recorded them, and whose ``extra["agentenvs"]`` holds the step's
  record (reward, valid, the observation it was chosen from, fields, info with ``won``);
* ``extra["agentenvs"]`` at the root: the episode (environment, task, group, sample, outcome,
  reward, ``won``, protocol, variant); ``final_metrics``: token totals, steps, reward and ``won``.

:func:`atif_to_trajectory` reads a document back: one of ours becomes the same trajectory; one
from another harness (tool calls, no environment fields) becomes a trajectory whose turns are its
agent steps: the reply, the tool calls as the action (``name {arguments}``), the tool results as
the environment's answer, the last thing the agent was shown as the observation it acted on;
its reward and ``won`` are what its ``extra`` or ``final_metrics.extra`` records (else 0 and
False), its token counts and reasoning go to each turn's ``info``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentenvs.agents.trajectory import TRAJECTORY_SCHEMA_VERSION, StepRecord, Trajectory

__all__ = [
    "ATIF_SCHEMA_VERSION",
    "ACT_TOOL",
    "AtifFormatError",
    "atif_to_trajectory",
    "is_atif",
    "read_atif",
    "trajectory_to_atif",
    "validate_atif",
]

ATIF_SCHEMA_VERSION = "ATIF-v1.8"  # the version the atif package's models implement
ACT_TOOL = "act"  # the tool call that carries a turn's parsed action
EXTRA = "agentenvs"  # the key of our records in ATIF's ``extra`` objects
_EPISODE_KEYS = (
    "env_id",
    "task_id",
    "family",
    "group_id",
    "sample_index",
    "agent",
    "total_reward",
    "won",
    "turns",
    "terminated",
    "truncated",
    "error",
    "metadata",
    "protocol",
    "variant",
)


class AtifFormatError(ValueError):
    """A document that is not a valid ATIF trajectory (the message says where and why)."""


def _atif_models() -> Any:
    from agentenvs.cli_errors import require_extra

    require_extra("atif", "atif")
    import atif

    return atif


def validate_atif(doc: dict[str, Any], where: str = "ATIF document") -> Any:
    """``doc`` as the ``atif`` package's :class:`atif.Trajectory` (its models' checks)."""
    atif = _atif_models()
    from pydantic import ValidationError

    try:
        return atif.Trajectory.model_validate(doc)
    except ValidationError as exc:
        raise AtifFormatError(f"{where} is not a valid ATIF trajectory: {exc}") from exc


def is_atif(doc: Any) -> bool:
    """Whether ``doc`` says it is an ATIF trajectory (its ``schema_version`` tag)."""
    return isinstance(doc, dict) and str(doc.get("schema_version", "")).startswith("ATIF-")


def _split_prefix(traj: Trajectory) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(teacher prefix, the rest) of the non-system messages: a replayed prefix's replies are
    the assistant messages beyond the step records."""
    messages = [m for m in traj.messages if m["role"] != "system"]
    assistant = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    prefix_turns = len(assistant) - len(traj.steps)
    if prefix_turns <= 0:
        return [], messages
    cut = assistant[prefix_turns - 1] + 2
    return messages[:cut], messages[cut:]


def _agent_step(step_id: int, record: StepRecord, turn: int, message: str | None) -> dict:
    call_id = f"turn-{turn}"
    out: dict[str, Any] = {
        "step_id": step_id,
        "source": "agent",
        "message": record.completion if record.completion is not None else (message or ""),
        "observation": {
            "results": [
                {
                    "source_call_id": call_id if record.action is not None else None,
                    "content": record.observation,
                }
            ]
        },
        "extra": {
            EXTRA: {
                "turn": turn,
                "anchor": record.anchor,
                "action": record.action,
                "reward": record.reward,
                "valid": record.valid,
                "won": record.info.get("won"),
                "fields": record.fields,
                "info": record.info,
                "reply_recorded": record.completion is not None,
            }
        },
    }
    if message is not None and message != out["message"]:  # the reply as the chat kept it
        out["extra"][EXTRA]["chat_message"] = message
    if record.action is not None:
        out["tool_calls"] = [
            {
                "tool_call_id": call_id,
                "function_name": ACT_TOOL,
                "arguments": {"action": record.action},
            }
        ]
    if record.token_ids is not None or record.logprobs is not None:
        out["metrics"] = {
            "completion_tokens": None if record.token_ids is None else len(record.token_ids),
            "completion_token_ids": record.token_ids,
            "logprobs": record.logprobs,
        }
    return out


def _plain_step(step_id: int, role: str, content: str, copied: bool = False) -> dict:
    source = {"system": "system", "user": "user", "assistant": "agent"}.get(role)
    if source is None:
        raise AtifFormatError(f"a message of role {role!r} has no ATIF source")
    step: dict[str, Any] = {"step_id": step_id, "source": source, "message": content}
    if copied:
        step["is_copied_context"] = True
    return step


def _steps(traj: Trajectory) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    for m in traj.messages:
        if m["role"] == "system":
            steps.append(_plain_step(len(steps) + 1, "system", m["content"]))
    prefix, rest = _split_prefix(traj)
    for m in prefix:
        steps.append(_plain_step(len(steps) + 1, m["role"], m["content"], copied=True))
    records = iter(enumerate(traj.steps, start=1))
    for m in rest:
        if m["role"] == "assistant":
            nxt = next(records, None)
            if nxt is not None:
                steps.append(_agent_step(len(steps) + 1, nxt[1], nxt[0], m["content"]))
                continue
        steps.append(_plain_step(len(steps) + 1, m["role"], m["content"]))
    for turn, record in records:  # step records beyond the messages (none in our runs)
        steps.append(_agent_step(len(steps) + 1, record, turn, None))
    return steps


def trajectory_to_atif(
    traj: Trajectory, *, model: str | None = None, session_id: str | None = None
) -> dict[str, Any]:
    """One episode as an ATIF v1.8 document (a JSON object), validated by the ``atif`` package's
    models; ``model``: the LLM that played (None: a scripted agent); ``session_id``: the run."""
    from agentenvs import __version__

    steps = _steps(traj)
    token_counts = [len(s.token_ids) for s in traj.steps if s.token_ids is not None]
    doc: dict[str, Any] = {
        "schema_version": ATIF_SCHEMA_VERSION,
        "session_id": session_id or traj.group_id,
        "trajectory_id": f"{traj.task_id}#{traj.group_id}#{traj.sample_index}",
        "agent": {
            "name": "agentenvs",
            "version": __version__,
            "model_name": model,
            "tool_definitions": [_act_tool_definition(traj.env_id)],
            "extra": {EXTRA: {"agent": traj.agent, "protocol": traj.protocol}},
        },
        "steps": steps,
        "final_metrics": {
            "total_completion_tokens": sum(token_counts) if token_counts else None,
            "total_steps": len(steps),
            "extra": {"reward": traj.total_reward, "won": bool(traj.won), "turns": traj.turns},
        },
        "extra": {
            EXTRA: {
                "schema_version": TRAJECTORY_SCHEMA_VERSION,
                **{k: getattr(traj, k) for k in _EPISODE_KEYS},
            }
        },
    }
    return validate_atif(doc).to_json_dict()


def _act_tool_definition(env_id: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": ACT_TOOL,
            "description": f"Take one action in {env_id} (the environment's text command).",
            "parameters": {
                "type": "object",
                "properties": {"action": {"type": "string"}},
                "required": ["action"],
            },
        },
    }


def read_atif(path: str | Path) -> dict[str, Any]:
    """The ATIF document in a ``.json`` file, validated (:class:`AtifFormatError` if not)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AtifFormatError(f"{path}: not JSON ({exc})") from exc
    if not is_atif(doc):
        raise AtifFormatError(f"{path}: no ATIF schema_version (e.g. {ATIF_SCHEMA_VERSION!r})")
    validate_atif(doc, str(path))
    return doc


def _text(content: Any) -> str:
    """A message or result's text: a string, or a content-part array's text parts (an image or
    audio part as ``[image: path]``)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if part.get("type") == "text":
            parts.append(part.get("text") or "")
        else:
            parts.append(f"[{part.get('type')}: {(part.get('source') or {}).get('path')}]")
    return "\n".join(parts)


def _foreign_action(calls: list[dict[str, Any]] | None) -> str | None:
    if not calls:
        return None
    return "\n".join(
        f"{c['function_name']} {json.dumps(c.get('arguments') or {}, ensure_ascii=False)}"
        for c in calls
    )


def _record(step: dict[str, Any], shown: str, turn: int) -> StepRecord:
    ours = (step.get("extra") or {}).get(EXTRA)
    results = (step.get("observation") or {}).get("results") or []
    observation = "\n".join(_text(r.get("content")) for r in results)
    metrics = step.get("metrics") or {}
    message = _text(step.get("message"))
    if ours is not None:
        return StepRecord(
            anchor=ours["anchor"],
            action=ours["action"],
            observation=observation,
            reward=ours["reward"],
            valid=ours["valid"],
            fields=ours.get("fields") or {},
            completion=message if ours.get("reply_recorded", True) else None,
            token_ids=metrics.get("completion_token_ids"),
            logprobs=metrics.get("logprobs"),
            info=ours.get("info") or {},
        )
    info: dict[str, Any] = {"turn": turn}
    for key in ("model_name", "reasoning_content", "timestamp"):
        if step.get(key) is not None:
            info[key] = step[key]
    for key in ("prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd"):
        if metrics.get(key) is not None:
            info[key] = metrics[key]
    extra = step.get("extra") or {}
    return StepRecord(
        anchor=shown,
        action=_foreign_action(step.get("tool_calls")),
        observation=observation,
        reward=float(extra.get("reward", 0.0) or 0.0),
        valid=bool(extra.get("valid", True)),
        fields={"tool_calls": step["tool_calls"]} if step.get("tool_calls") else {},
        completion=message,
        token_ids=metrics.get("completion_token_ids"),
        logprobs=metrics.get("logprobs"),
        info=info,
    )


def atif_to_trajectory(doc: dict[str, Any], name: str = "atif") -> Trajectory:
    """A (validated) ATIF document as a trajectory (see the module docstring); ``name``: what
    identifies it when the document names no trajectory or session (its file name, say)."""
    messages: list[dict[str, str]] = []
    records: list[StepRecord] = []
    shown = ""  # the last thing the agent was shown: a user message or a tool result
    for step in doc["steps"]:
        text = _text(step.get("message"))
        role = {"system": "system", "user": "user", "agent": "assistant"}[step["source"]]
        messages.append({"role": role, "content": text})
        if step["source"] == "agent" and not step.get("is_copied_context"):
            record = _record(step, shown, len(records) + 1)
            records.append(record)
            ours = (step.get("extra") or {}).get(EXTRA)
            if ours is not None:
                messages[-1]["content"] = ours.get("chat_message", text)
            elif not text and record.action is not None:
                messages[-1]["content"] = record.action
            shown = record.observation or shown
        elif step["source"] != "agent":
            shown = text
        if step.get("is_copied_context") and step.get("observation"):
            results = step["observation"].get("results") or []
            messages.append(
                {"role": "user", "content": "\n".join(_text(r.get("content")) for r in results)}
            )
    ours = (doc.get("extra") or {}).get(EXTRA)
    if ours is not None:
        episode = {k: ours[k] for k in _EPISODE_KEYS if k in ours}
        return Trajectory(**episode, messages=messages, steps=records)
    return _foreign_trajectory(doc, name, messages, records)


def _foreign_trajectory(
    doc: dict[str, Any], name: str, messages: list[dict[str, str]], records: list[StepRecord]
) -> Trajectory:
    agent = doc["agent"]
    extra = doc.get("extra") or {}
    final = (doc.get("final_metrics") or {}).get("extra") or {}
    reward = final.get("reward", extra.get("reward"))
    total = float(reward) if reward is not None else sum(r.reward for r in records)
    spec = f"{agent['name']} {agent['version']}"
    if agent.get("model_name"):
        spec += f" ({agent['model_name']})"
    return Trajectory(
        env_id=str(extra.get("env_id") or agent["name"]),
        task_id=str(extra.get("task_id") or doc.get("trajectory_id") or name),
        family=str(extra.get("family") or ""),
        group_id=str(doc.get("session_id") or name),
        sample_index=0,
        agent=spec,
        messages=messages,
        steps=records,
        total_reward=total,
        won=bool(final.get("won", extra.get("won", False))),
        turns=len(records),
        metadata={"atif": {"schema_version": doc["schema_version"], "notes": doc.get("notes")}},
    )
