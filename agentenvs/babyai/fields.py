"""Structured fields of BabyAI-Text observations (for ``fields`` and ``match``)."""

from __future__ import annotations

import json
import re
from typing import Any

from agentenvs.core import normalize_whitespace

__all__ = ["parse_fields"]

_OBJECT = re.compile(
    r"There is a ([a-z]+(?: [a-z]+)*?) (\d+) (?:right in front of you (\d+) steps away"
    r"|(\d+) steps in front of you and (\d+) steps to your (left|right))\."
)
_FACING = re.compile(r"You are facing a (wall|box) (\d+) steps away\.")
_CARRYING = re.compile(r"You are carrying a ([a-z]+ [a-z]+)\.")
_ACTIONS_PREFIX = "Available actions: ["
_GOAL_PREFIX = "Your goal: "
_VIEW_STARTS = (
    "In front of you in this room, you can see several objects:",
    "You cannot see any objects within sight.",
)
_VIEW_MARK = "The room has walls around you."
_COMPLETED = "The task is completed."


def parse_fields(observation: str) -> dict[str, Any]:
    """The fields of a BabyAI-Text observation; ``{}`` for text that is not one.

    Whitespace does not matter (the text is normalised first). Keys, always all present:
    ``goal`` (str or None: only the reset observation has it), ``objects`` (list of
    ``[name, id, steps_forward, steps_right]``, left negative, in the description's order),
    ``facing`` (``[wall|box, steps]`` or None), ``carrying`` (``"red ball"`` or None),
    ``message`` (the text of a feedback observation: an error, ``No change in state.`` or the
    action listing; None for a view description), ``completed`` (bool) and
    ``available_actions`` (list of str).
    """
    text = normalize_whitespace(observation)
    at = text.rfind(_ACTIONS_PREFIX)
    if at < 0:
        return {}
    try:
        actions = json.loads(text[at + len(_ACTIONS_PREFIX) - 1 :])
    except ValueError:
        return {}
    if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
        return {}
    body = text[:at].strip()
    goal = None
    if body.startswith(_GOAL_PREFIX):
        starts = [i for i in (body.find(s) for s in _VIEW_STARTS) if i >= 0]
        end = min(starts) if starts else len(body)
        goal, body = body[len(_GOAL_PREFIX) : end].strip(), body[end:]
    completed = body.endswith(_COMPLETED)
    if completed:
        body = body[: -len(_COMPLETED)].strip()
    fields: dict[str, Any] = {
        "goal": goal,
        "objects": [],
        "facing": None,
        "carrying": None,
        "message": None,
        "completed": completed,
        "available_actions": actions,
    }
    if _VIEW_MARK not in body:
        fields["message"] = body
        return fields
    for m in _OBJECT.finditer(body):
        if m.group(3) is not None:
            forward, right = int(m.group(3)), 0
        else:
            forward = int(m.group(4))
            right = int(m.group(5)) * (1 if m.group(6) == "right" else -1)
        fields["objects"].append([m.group(1), int(m.group(2)), forward, right])
    facing = _FACING.search(body)
    if facing:
        fields["facing"] = [facing.group(1), int(facing.group(2))]
    carrying = _CARRYING.search(body)
    if carrying:
        fields["carrying"] = carrying.group(1)
    return fields
