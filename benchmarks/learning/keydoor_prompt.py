"""KeyDoor-v0's prompt and protocol setup: a one-message template like the benchmark's Sokoban
(verl-agent's style): the fixed instructions, the last :data:`HISTORY` steps, the current
observation, and a reply in ``<think> </think>`` / ``<action> </action>`` tags. An unparseable
reply is answered with the format feedback (the environment not stepped; it uses a turn)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentenvs.agents.parsing import ReplyFormat
from agentenvs.agents.prompts.base import EnvPrompt, PastStep, history_text

__all__ = [
    "HIDDEN_TRAPS_PROMPTS",
    "HIDDEN_TRAPS_PROTOCOLS",
    "HIDDEN_TRAPS_PROTOCOL_NAME",
    "HISTORY",
    "PROMPT",
    "PROMPTS",
    "PROTOCOLS",
    "PROTOCOL_NAME",
    "TRAPS_PROMPTS",
    "TRAPS_PROTOCOLS",
    "TRAPS_PROTOCOL_NAME",
    "render_keydoor",
    "render_keydoor_hidden_traps",
    "render_keydoor_traps",
    "setup",
]

HISTORY = 2
"""Steps of history in the prompt (verl-agent's Sokoban window)."""

_HEAD = """
You are an agent in a row of rooms. The hall has a sign that names the colour of the door and
some keys; the door is in the last room to the east. Only the key of the sign's colour opens the
door, and once you take a key the other keys crumble, so read the sign before you take one.
Actions: east, west, north, south (move through an exit), take <colour> (take a key in the hall),
open door (in the door's room).
"""

_TRAPS = """An exit marked (trap) ends the episode without reward: at a fork take the other way on.
"""

_HIDDEN_TRAPS = """Some ways on are traps that end the episode without reward; they are not marked.
"""

_TAIL = """
Reason briefly inside <think> </think> tags, then give exactly one action inside
<action> </action> tags.
"""

TEMPLATE_NO_HISTORY = _HEAD + "Your current observation is:\n{current_observation}\n" + _TAIL
TEMPLATE = (
    _HEAD
    + "Your last {history_length} step(s): {action_history}\n"
    + "Your current observation is:\n{current_observation}\n"
    + _TAIL
)


def render_keydoor(
    observation: str,
    info: Mapping[str, Any],
    past: Sequence[PastStep],
    task: str,
    history: int | None,
) -> str:
    """The user message of one step."""
    if not past or history == 0:
        return TEMPLATE_NO_HISTORY.format(current_observation=observation)
    action_history, shown = history_text(past, history)
    return TEMPLATE.format(
        history_length=shown, action_history=action_history, current_observation=observation
    )


def render_keydoor_traps(
    observation: str,
    info: Mapping[str, Any],
    past: Sequence[PastStep],
    task: str,
    history: int | None,
) -> str:
    """The user message of one step of KeyDoor-traps-v0: KeyDoor-v0's with the trap rule added
    to the instructions."""
    text = render_keydoor(observation, info, past, task, history)
    return text.replace(_HEAD, _HEAD + _TRAPS, 1)


def render_keydoor_hidden_traps(
    observation: str,
    info: Mapping[str, Any],
    past: Sequence[PastStep],
    task: str,
    history: int | None,
) -> str:
    """The user message of one step of KeyDoor-hidden-traps-v0: KeyDoor-v0's with a line that
    says unmarked traps exist."""
    text = render_keydoor(observation, info, past, task, history)
    return text.replace(_HEAD, _HEAD + _HIDDEN_TRAPS, 1)


PROMPT = EnvPrompt(
    "KeyDoor-v0",
    "",
    "template",
    ReplyFormat.TAGS,
    "east",
    default_history=HISTORY,
    render=render_keydoor,
    name="keydoor",
)


def setup(env_id: str = "KeyDoor-v0", prompt: str = "keydoor") -> Any:
    """The protocol setup (the ``ptgpo`` protocol's shape: template prompt, groups, temperature
    1 in training; no invalid-action penalty, the reward stays sparse and terminal)."""
    from agentenvs.agents.protocols import EnvProtocol, Sampling
    from agentenvs.benchmarks.learning.keydoor import MAX_TURNS

    sampling = Sampling(1.0, 1.0, 512)
    return EnvProtocol(
        env_id,
        env_kwargs={},
        prompt=prompt,
        admissible="template",
        parser="tags",
        unparseable="feedback",
        invalid_feedback="Invalid response format: give one action inside <action> </action>.",
        max_turns={"eval": MAX_TURNS, "train": MAX_TURNS},
        history=HISTORY,
        sampling={"eval": sampling, "train": sampling},
        invalid_penalty=0.0,
        sources={"all": "agentenvs.benchmarks.learning.keydoor_prompt (the benchmark's own)"},
    )


PROMPTS = (PROMPT,)
"""KeyDoor-v0's prompts (its plugin's ``prompts``)."""

TRAPS_PROMPTS = (
    EnvPrompt(
        "KeyDoor-traps-v0",
        "",
        "template",
        ReplyFormat.TAGS,
        "east",
        default_history=HISTORY,
        render=render_keydoor_traps,
        name="keydoor-traps",
    ),
)
"""KeyDoor-traps-v0's prompts (its plugin's ``prompts``)."""

HIDDEN_TRAPS_PROMPTS = (
    EnvPrompt(
        "KeyDoor-hidden-traps-v0",
        "",
        "template",
        ReplyFormat.TAGS,
        "east",
        default_history=HISTORY,
        render=render_keydoor_hidden_traps,
        name="keydoor-hidden-traps",
    ),
)
"""KeyDoor-hidden-traps-v0's prompts (its plugin's ``prompts``)."""

PROTOCOL_NAME = "keydoor"
TRAPS_PROTOCOL_NAME = "keydoor-traps"
HIDDEN_TRAPS_PROTOCOL_NAME = "keydoor-hidden-traps"


def _protocols() -> tuple[Any, ...]:
    from agentenvs.agents.protocols import Protocol

    title = "KeyDoor-v0, the learning benchmark's credit testbed (agentenvs.benchmarks.learning)"
    return (Protocol(PROTOCOL_NAME, title, {"KeyDoor-v0": setup()}),)


PROTOCOLS = _protocols()
"""KeyDoor-v0's protocol (its plugin's ``protocols``; also its default)."""


def _traps_protocols() -> tuple[Any, ...]:
    from agentenvs.agents.protocols import Protocol

    title = "KeyDoor-traps-v0, the credit testbed with trap forks (agentenvs.benchmarks.learning)"
    env = setup("KeyDoor-traps-v0", "keydoor-traps")
    return (Protocol(TRAPS_PROTOCOL_NAME, title, {"KeyDoor-traps-v0": env}),)


TRAPS_PROTOCOLS = _traps_protocols()
"""KeyDoor-traps-v0's protocol (its plugin's ``protocols``; also its default)."""


def _hidden_traps_protocols() -> tuple[Any, ...]:
    from agentenvs.agents.protocols import Protocol

    title = "KeyDoor-hidden-traps-v0, the credit testbed with unmarked trap forks"
    env = setup("KeyDoor-hidden-traps-v0", "keydoor-hidden-traps")
    return (Protocol(HIDDEN_TRAPS_PROTOCOL_NAME, title, {"KeyDoor-hidden-traps-v0": env}),)


HIDDEN_TRAPS_PROTOCOLS = _hidden_traps_protocols()
"""KeyDoor-hidden-traps-v0's protocol (its plugin's ``protocols``; also its default)."""
