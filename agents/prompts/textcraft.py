"""TextCraft's prompt: the paper's system prompt (the Prefix-GRPO paper, §7.4; a line the
PDF soft-wrapped is joined back, nothing else changed) and Prefix-GRPO's answer to a reply
without an action (``verl/verl/interactions/textcraft_interaction.py``,
``get_invalid_action_prompt``)."""

# ruff: noqa: E501  (the prompt texts are kept verbatim, long lines included)

from __future__ import annotations

from agentenvs.agents.parsing import ReplyFormat
from agentenvs.agents.prompts.base import EnvPrompt

__all__ = ["PROMPTS", "TEXTCRAFT_INVALID_ACTION", "TEXTCRAFT_SYSTEM"]

TEXTCRAFT_SYSTEM = """You are a Minecraft Assistant. Your goal is to craft items by managing resources and recipes.

CORE PROTOCOL:
1. THINK FIRST: before any action, analyze the current state.
2. ONE ACTION: output exactly one action per turn.
3. BOX FORMAT: wrap your command in [[ ]], e.g., Action: [[ inventory ]]
4. NO HALLUCINATION: do not simulate the environment response.

REASONING LOGIC:
When trying to acquire an item [Target]:
1. Check inventory. If you already have [Target], proceed.
2. Check recipe. If [Target] has a recipe, get missing ingredients first.
3. If [Target] is a base material, use get [Target].
4. If get or craft fails, check recipes and exact item names again.

CORE COMMAND SET:
- craft [target] using [ingredients]
- get [item]
- inventory

INTERACTION EXAMPLE:
[Environment]
Goal: craft powered rail
Recipes:
- craft 6 powered rail using 1 redstone, 1 stick, 6 gold ingot
- craft 1 gold ingot using 9 gold nugget
- craft 1 stick using 2 bamboo

[You]
Think: Recipe for powered rail needs redstone, stick, gold ingot.
I need to check what I have.
Action: [[ inventory ]]

[Environment]
Inventory: [redstone] (1)

[You]
Think: I have redstone. I miss stick and gold ingot. Gold ingot needs gold nugget, so I should get gold nugget first.
Action: [[ get 54 gold nugget ]]

[Environment]
Got 54 gold nugget.

[You]
Think: Now I have nuggets. I can craft gold ingots.
Action: [[ craft 6 gold ingot using 54 gold nugget ]]

[Environment]
Crafted 6 gold ingot.

[You]
Think: Now I need a stick. Recipe says stick needs bamboo.
Action: [[ get 2 bamboo ]]

[Environment]
Got 2 bamboo.

[You]
Think: I have bamboo. I can craft the stick.
Action: [[ craft 1 stick using 2 bamboo ]]

[Environment]
Crafted 1 stick.

[You]
Think: I have redstone, gold ingots, and stick. I can finally craft the powered rail.
Action: [[ craft 6 powered rail using 1 redstone, 1 stick, 6 gold ingot ]]

[Environment]
Crafted 6 powered rail.

[You]
Think: Goal achieved.
Action: [[ Task Completed! ]]"""


# Prefix-GRPO (AgentGym interactions): the answer to a reply without an action.
TEXTCRAFT_INVALID_ACTION = (
    "Please provide a valid action. "
    "Example actions:\n"
    "- craft 1 blue dye using 1 lapis lazuli\n"
    "- get 9 slime ball\n"
    "- inventory"
)


_TEXTCRAFT = EnvPrompt(
    "TextCraft-v0",
    TEXTCRAFT_SYSTEM,
    "chat",
    ReplyFormat.THINK_BRACKETS,
    "inventory",
    name="textcraft-paper",
)

PROMPTS = (_TEXTCRAFT,)
"""TextCraft's prompts, its default first."""
