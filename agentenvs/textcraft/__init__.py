"""TextCraft-v0: ADaPT's Minecraft crafting benchmark (AgentGym's indexing), bugs fixed.

Its other parts (docs/architecture.md): the scripted expert in ``expert.py`` here; the prompts
in :mod:`agentenvs.agents.prompts.textcraft`; the benchmark protocol entries in
:mod:`agentenvs.agents.protocols`; the speed benchmark in
:mod:`agentenvs.benchmarks.speed.textcraft`.
"""

from __future__ import annotations

from agentenvs.textcraft.crafting import CraftingTree, default_tree, item_id_to_str
from agentenvs.textcraft.env import TEST_IDS, TextCraftEnv, TextCraftTask, parse_fields

__all__ = [
    "TEST_IDS",
    "CraftingTree",
    "TextCraftEnv",
    "TextCraftTask",
    "default_tree",
    "item_id_to_str",
    "parse_fields",
]
