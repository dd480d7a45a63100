"""What the MCP tools of ``agentenvs serve --api mcp`` / ``agentenvs mcp`` tell a model.

An MCP client shows a model each tool's name, description and input schema, and the server's
``instructions``; nothing else says what the environment expects. So every description here is
made for one environment from its own facts (splits and their task counts, task id forms, turn
budget, action length limit, whether it lists admissible actions) and from :data:`BRIEFS`, the
environment's action language: the action forms the environment parses and the symbols of its
observations (the same forms the prompts of ``agentenvs.agents.prompts`` give; this package may
not import those, so the forms are stated here and ``tests/serve/test_mcp_describe.py`` holds
them to the expert's actions).

The schemas are plain JSON Schema dicts (the MCP SDK is not imported here).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from agentenvs.core import TextEnv

__all__ = [
    "BRIEFS",
    "DEFAULT_TASK_PAGE",
    "MAX_TASK_PAGE",
    "EnvBrief",
    "ToolSpec",
    "action_pattern",
    "lists_admissible",
    "server_instructions",
    "tool_specs",
]

DEFAULT_TASK_PAGE = 100
"""Task ids ``list_tasks`` returns when no ``limit`` is given: a page a model can read."""
MAX_TASK_PAGE = 1000
"""The most task ids one ``list_tasks`` call returns (Sokoban's training split has 65,536)."""


@dataclass(frozen=True)
class EnvBrief:
    """One environment's action language: what it is, the action forms it parses, and notes
    (observation symbols, where the task is stated)."""

    summary: str
    actions: tuple[str, ...]
    notes: str = ""


BRIEFS: dict[str, EnvBrief] = {
    "TextCraft-v0": EnvBrief(
        summary="TextCraft: craft a Minecraft item from base materials by following recipes.",
        actions=(
            "get <count> <item>",
            "craft <count> <item> using <count> <item>, ...",
            "inventory",
        ),
        notes=(
            "The first observation lists the crafting commands (recipes) and the goal. Base "
            "materials are taken with get; crafted items need their ingredients in the "
            "inventory, in the counts the recipe names."
        ),
    ),
    "BabyAI-Text-v0": EnvBrief(
        summary="BabyAI: navigate a grid world and manipulate objects to reach a stated goal.",
        actions=(
            "turn left",
            "turn right",
            "move forward",
            "go to <object> <id>",
            "pickup <object> <id>",
            "drop",
            "toggle",
            "go through <door> <id>",
            "toggle and go through <door> <id>",
            "check available actions",
        ),
        notes=(
            "Each observation starts with the goal and ends with the available actions; "
            "objects are named as the observation names them (e.g. 'grey key 1')."
        ),
    ),
    "ALFWorld-v0": EnvBrief(
        summary="ALFWorld: complete a household task in a text room (find, take, clean, heat, "
        "cool, use and place objects).",
        actions=(
            "go to <receptacle>",
            "take <object> from <receptacle>",
            "move <object> to <receptacle>",
            "put <object> in/on <receptacle>",
            "open <receptacle>",
            "close <receptacle>",
            "use <object>",
            "toggle <object>",
            "clean <object> with <receptacle>",
            "heat <object> with <receptacle>",
            "cool <object> with <receptacle>",
            "examine <object or receptacle>",
            "look",
            "inventory",
        ),
        notes=(
            "The first observation describes the room and ends with 'Your task is to: ...'. "
            "Objects and receptacles carry numbers ('mug 1', 'fridge 1'); the admissible "
            "actions list every action valid now."
        ),
    ),
    "WebShop-v0": EnvBrief(
        summary="WebShop: buy the product that best matches a shopping instruction on a "
        "web shop given as text pages.",
        actions=("search[<query>]", "click[<button or product>]"),
        notes=(
            "Pages are text with fields joined by ' [SEP] '; the instruction is on every page. "
            "Search from the search page, click a product id from the results, its options "
            "(e.g. a size), then click[buy now]; the reward scores how well the bought "
            "product matches. The admissible actions list what can be clicked now."
        ),
    ),
    "Sokoban-v0": EnvBrief(
        summary="Sokoban: push every box onto a target on a grid.",
        actions=("up", "down", "left", "right"),
        notes=(
            "The observation is the grid: '#' wall, '_' floor, 'O' target, 'X' box, 'P' you, "
            "'\u221a' box on a target, 'S' you on a target. You push a box by walking into it; "
            "boxes cannot be pulled, so a box pushed into a corner is stuck."
        ),
    ),
}


def action_pattern(form: str) -> re.Pattern[str]:
    """A regular expression an action of ``form`` matches: each ``<...>`` stands for some text,
    ``in/on`` for either word or both (ALFWorld writes ``in/on``), ``, ...`` for more of the
    same."""
    text = re.escape(form.replace(", ...", "")).replace("in/on", "(?:in/on|in|on)")
    text = re.sub(r"<[^>]*>", ".+", text.replace("\\<", "<").replace("\\>", ">"))
    if form.endswith(", ..."):
        text += "(?:, .+)*"
    return re.compile(rf"^{text}$")


@dataclass(frozen=True)
class ToolSpec:
    """One tool as MCP lists it: name, description, input and output JSON Schemas."""

    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None = None


def _brief(env: TextEnv) -> EnvBrief:
    return BRIEFS.get(
        env.env_id,
        EnvBrief(summary=f"{env.env_id}: a text environment.", actions=()),
    )


def lists_admissible(env: TextEnv) -> bool:
    """Whether ``env``'s class lists admissible actions (it overrides the base's ``None``)."""
    return type(env)._admissible_actions is not TextEnv._admissible_actions


def _actions_text(env: TextEnv) -> str:
    brief = _brief(env)
    lines = [f"- {form}" for form in brief.actions]
    head = "Actions it understands:\n" if lines else ""
    return head + "\n".join(lines) + (f"\n{brief.notes}" if brief.notes else "")


def _forms_text(env: TextEnv) -> str:
    forms = getattr(env, "task_id_forms", ())
    return "; ".join(forms) if forms else "see list_tasks"


def server_instructions(env: TextEnv, counts: dict[str, int]) -> str:
    """The server's ``instructions``: the environment, how an episode goes, the tools' order."""
    splits = ", ".join(f"{s} ({n} tasks)" for s, n in counts.items())
    return (
        f"{_brief(env).summary}\n\n"
        f"This MCP server holds one {env.env_id} environment per MCP session. Start an episode "
        "with reset (a task id, a split and index, or a seed), then call step with one action "
        "at a time until the result says the episode is over (won, lost, or the turn budget "
        f"of {env.max_turns} actions ran out). Splits: {splits}. admissible_actions lists "
        "the actions valid now where the environment has such a list; snapshot and restore "
        "save and return to a state.\n\n" + _actions_text(env)
    )


_OBSERVATION_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "observation": {"type": "string", "description": "the environment's text"},
        "reward": {"type": "number", "description": "this action's reward (0 on reset)"},
        "terminated": {"type": "boolean", "description": "the task ended (won or lost)"},
        "truncated": {"type": "boolean", "description": "the turn budget ran out"},
        "done": {"type": "boolean", "description": "terminated or truncated"},
        "won": {"type": "boolean"},
        "valid": {"type": "boolean", "description": "the action was understood and legal"},
        "turn": {"type": "integer", "description": "actions taken so far"},
        "max_turns": {"type": "integer"},
        "task_id": {"type": "string"},
        "family": {"type": "string"},
        "admissible_actions": {
            "type": ["array", "null"],
            "items": {"type": "string"},
            "description": "the actions valid now (null: this environment lists none)",
        },
        "info": {"type": "object", "description": "agentenvs' full info record"},
    },
    "required": ["observation", "reward", "terminated", "truncated", "done", "turn", "task_id"],
}


def _reset_spec(env: TextEnv, counts: dict[str, int]) -> ToolSpec:
    splits = list(counts)
    description = (
        f"Start a new {env.env_id} episode and return its first observation (any episode "
        "running in this session ends). Choose the task by exactly one of: task_id (forms: "
        f"{_forms_text(env)}; list_tasks gives the ids of each split); split and index (the "
        "index-th task of that split); seed (a training task drawn with that seed; with split, "
        "a task of that split drawn with that seed). With no argument a training task is "
        "drawn at random. The result says the task, the turn budget and, where the "
        "environment lists them, the admissible actions.\n\n" + _actions_text(env)
    )
    schema = {
        "type": "object",
        "properties": {
            "task_id": {"type": "string", "description": f"a task id ({_forms_text(env)})"},
            "split": {"type": "string", "enum": splits, "description": "a split of tasks"},
            "index": {
                "type": "integer",
                "minimum": 0,
                "description": "with split: the task at this position of the split",
            },
            "seed": {"type": "integer", "minimum": 0, "description": "draws the task"},
        },
        "additionalProperties": False,
    }
    return ToolSpec("reset", description, schema, _OBSERVATION_OUTPUT)


def _step_spec(env: TextEnv) -> ToolSpec:
    listed = (
        "admissible_actions (and each result) lists the actions valid now. "
        if lists_admissible(env)
        else ""
    )
    description = (
        f"Take one action in the running {env.env_id} episode and return the next "
        "observation, the reward and whether the episode is over. An action the environment "
        "does not understand or allow is not an error: the observation says so, valid is "
        f"false, and it uses a turn. {listed}After the episode is over, call reset (or "
        f"restore).\n\n" + _actions_text(env)
    )
    schema = {
        "type": "object",
        "properties": {
            "action": {
                "type": "string",
                "maxLength": env.max_action_length,
                "description": "one action, e.g. "
                + (repr(_brief(env).actions[0]) if _brief(env).actions else "'look'"),
            }
        },
        "required": ["action"],
        "additionalProperties": False,
    }
    return ToolSpec("step", description, schema, _OBSERVATION_OUTPUT)


_EMPTY: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


def tool_specs(env: TextEnv, counts: dict[str, int]) -> list[ToolSpec]:
    """The six tools of an environment: reset, step, admissible_actions, list_tasks, snapshot,
    restore. ``env`` is a template instance of the served variant; ``counts`` its split sizes."""
    task_schema = {
        "type": "object",
        "properties": {
            "split": {"type": "string", "enum": list(counts), "description": "default: test"},
            "family": {"type": "string", "description": "only tasks of this family"},
            "offset": {"type": "integer", "minimum": 0, "description": "default 0"},
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_TASK_PAGE,
                "description": f"default {DEFAULT_TASK_PAGE}",
            },
        },
        "additionalProperties": False,
    }
    sizes = ", ".join(f"{s}: {n}" for s, n in counts.items())
    return [
        _reset_spec(env, counts),
        _step_spec(env),
        ToolSpec(
            "admissible_actions",
            "The actions valid in the current state of the running episode (null where "
            f"{env.env_id} lists none: then any action of the forms in step's description "
            "may be tried).",
            _EMPTY,
        ),
        ToolSpec(
            "list_tasks",
            f"The task ids of a split of {env.env_id} ({sizes} tasks), with each task's "
            f"family, a page at a time (offset, limit; at most {MAX_TASK_PAGE}). Pass an id "
            "to reset as task_id.",
            task_schema,
        ),
        ToolSpec(
            "snapshot",
            "Save the running episode's state as a token (a string). restore with it returns "
            "to exactly this state, in this session or another session of a server of the "
            "same agentenvs version and environment settings.",
            _EMPTY,
        ),
        ToolSpec(
            "restore",
            "Return this session's episode to the state of a snapshot token and return that "
            "state's observation; the episode goes on from there.",
            {
                "type": "object",
                "properties": {"snapshot": {"type": "string", "description": "a snapshot token"}},
                "required": ["snapshot"],
                "additionalProperties": False,
            },
            _OBSERVATION_OUTPUT,
        ),
    ]
