"""The prompt texts, verbatim: the paper's (TextCraft, BabyAI, ALFWorld) and verl-agent's (WebShop,
Sokoban). :mod:`agentenvs.agents.prompts` puts them together; this module only holds the strings.

Sources:

* ``papers/prefix-grpo.txt`` §7.4 (Prefix-GRPO). The PDF soft-wraps long lines of its
  verbatim boxes at about 70 characters; a wrapped line is joined back to the line before it
  (the continuation starts in lower case mid-sentence). Nothing else is changed.
* verl-agent ``agent_system/environments/prompts/{alfworld,webshop,sokoban}.py``:
  ``*_TEMPLATE_NO_HIS`` (first step, or no history window) and ``*_TEMPLATE`` (with the last N
  steps), kept to the character, including the non-breaking hyphen of "e‑commerce", the trailing
  spaces and the "observaitons" typo of the ALFWorld and Sokoban templates (the text GiGPO ran;
  verl-agent fixed both typos on 2025-10-02, PR #174).
* HappynessI/Prefix_GRPO ``verl/verl/interactions/{textcraft,babyai,alfworld}_interaction.py``
  ``get_invalid_action_prompt``: the user turn Prefix-GRPO's rollouts answer an unparseable reply
  with (``*_INVALID_ACTION``), and ``alfworld_interaction._format_observation``'s
  ``AVAILABLE ACTIONS:`` line (:data:`AGENTGYM_AVAILABLE_ACTIONS`).
"""

# ruff: noqa: E501  (the prompt texts are kept verbatim, long lines included)

from __future__ import annotations

__all__ = [
    "AGENTGYM_AVAILABLE_ACTIONS",
    "ALFWORLD_INVALID_ACTION",
    "ALFWORLD_SYSTEM",
    "ALFWORLD_TEMPLATE",
    "ALFWORLD_TEMPLATE_NO_HIS",
    "ALFWORLD_USER",
    "BABYAI_INVALID_ACTION",
    "BABYAI_SYSTEM",
    "SOKOBAN_TEMPLATE",
    "SOKOBAN_TEMPLATE_NO_HIS",
    "TEXTCRAFT_INVALID_ACTION",
    "TEXTCRAFT_SYSTEM",
    "WEBSHOP_TEMPLATE",
    "WEBSHOP_TEMPLATE_NO_HIS",
]

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

BABYAI_SYSTEM = """You are an exploration master in the BabyAI environment. Every round I will give you an observation and the currently available actions. Your goal is to complete the given navigation or object-manipulation task.

Common actions include:
- turn left
- turn right
- move forward
- go to <object> <id>
- pickup <object> <id>
- drop
- toggle
- go through <door> <id>
- toggle and go through <door> <id>
- check available actions

Your response should use exactly this format:
Thought:
your thoughts.

Action:
[[ your next action ]]

IMPORTANT: Output exactly one executable action and always wrap it in [[ ]]."""

ALFWORLD_SYSTEM = """You are an agent in the ALFWorld environment. Your goal is to complete household tasks by interacting with objects in various rooms.

You can use actions like:
- go to [location]
- take [object] from [location]
- put [object] in/on [location]
- open [object]
- close [object]
- toggle [object]
- clean [object] with [location]
- heat [object] with [location]
- cool [object] with [location]
- examine [object]
- inventory

Instructions:
- Read the task instruction carefully.
- Plan your actions to complete the task.
- Navigate between rooms as needed.
- Manipulate objects correctly.

Your response should contain only the action."""

ALFWORLD_USER = (
    "Please help me complete the household task. I will provide you with the task description."
)

ALFWORLD_TEMPLATE_NO_HIS = """
You are an expert agent operating in the ALFRED Embodied Environment.
Your current observation is: {current_observation}
Your admissible actions of the current situation are: [{admissible_actions}].

Now it's your turn to take an action.
You should first reason step-by-step about the current situation. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""

ALFWORLD_TEMPLATE = """
You are an expert agent operating in the ALFRED Embodied Environment. Your task is to: {task_description}
Prior to this step, you have already taken {step_count} step(s). Below are the most recent {history_length} observaitons and the corresponding actions you took: {action_history}
You are now at step {current_step} and your current observation is: {current_observation}
Your admissible actions of the current situation are: [{admissible_actions}].

Now it's your turn to take an action.
You should first reason step-by-step about the current situation. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""

# Prefix-GRPO (AgentGym interactions): the answer to a reply without an action.
TEXTCRAFT_INVALID_ACTION = (
    "Please provide a valid action. "
    "Example actions:\n"
    "- craft 1 blue dye using 1 lapis lazuli\n"
    "- get 9 slime ball\n"
    "- inventory"
)

BABYAI_INVALID_ACTION = (
    "Please provide a valid action wrapped in [[ ]].\n"
    "Example actions:\n"
    "- [[ turn left ]] or [[ turn right ]]\n"
    "- [[ move forward ]]\n"
    "- [[ pickup red ball 1 ]]\n"
    "- [[ go to blue key 1 ]]\n"
    "- [[ toggle ]]\n"
    "- [[ check available actions ]]"
)

ALFWORLD_INVALID_ACTION = (
    "Please provide a valid action. "
    "Example actions: go to <object>, take <object> from <receptacle>, "
    "put <object> in/on <receptacle>, examine <object>"
)

# Prefix-GRPO's ALFWorld interaction appends the admissible commands to every observation.
AGENTGYM_AVAILABLE_ACTIONS = "AVAILABLE ACTIONS: "

WEBSHOP_TEMPLATE_NO_HIS = """
You are an expert autonomous agent operating in the WebShop e\u2011commerce environment. 
Your task is to: {task_description}.
Your current observation is: {current_observation}.
Your admissible actions of the current situation are: 
[
{available_actions}
].

Now it's your turn to take one action for the current step.
You should first reason step-by-step about the current situation, then think carefully which admissible action best advances the shopping goal. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""

WEBSHOP_TEMPLATE = """
You are an expert autonomous agent operating in the WebShop e\u2011commerce environment.
Your task is to: {task_description}.
Prior to this step, you have already taken {step_count} step(s). Below are the most recent {history_length} observations and the corresponding actions you took: {action_history}
You are now at step {current_step} and your current observation is: {current_observation}.
Your admissible actions of the current situation are: 
[
{available_actions}
].

Now it's your turn to take one action for the current step.
You should first reason step-by-step about the current situation, then think carefully which admissible action best advances the shopping goal. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""

_SOKOBAN_HEAD = """
You are an expert agent operating in the Sokoban environment.

# Symbols and Their Meaning
- Walls (`#`): These block movement. You can't move through or push anything into walls.
- Floor (`_`): Open spaces where you can walk and move boxes.
- Targets (`O`): The spots where boxes need to go.
- Boxes (`X`): These are what you need to push onto the targets.
- Player (`P`): That's you! You'll move around the grid to push boxes.
- Box on Target (`\u221a`): A box successfully placed on a target.
- Player on Target (`S`): You standing on a target.

# Your Goal
Your goal is to push all the boxes (`X`) onto the target spots (`O`). Once all boxes are on the targets, you win!

# Rules
You can only push boxes. You can't pull them, so plan ahead to avoid getting stuck.
You can't walk through or push boxes into walls (`#`).
To avoid traps, do not push boxes into corners or against walls where they can't be moved again.

# Current Step
"""

_SOKOBAN_TAIL = """Your admissible actions are ["up", "down", "left", "right"].

Now it's your turn to make a move (choose ONE action only for the current step).
You should first reason step-by-step about the current situation \u2014 observe the positions of boxes and targets, plan a path to push a box toward a target, and avoid traps like corners or walls. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""

SOKOBAN_TEMPLATE_NO_HIS = (
    _SOKOBAN_HEAD
    + """Your current observation is:
{current_observation}
"""
    + _SOKOBAN_TAIL
)

SOKOBAN_TEMPLATE = (
    _SOKOBAN_HEAD
    + """Prior to this step, you have already taken {step_count} step(s). Below are the most recent {history_length} observaitons and the corresponding actions you took: {action_history}
You are now at step {current_step} and your current observation is:
{current_observation}
"""
    + _SOKOBAN_TAIL
)
