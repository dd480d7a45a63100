"""TextCraft-v0: ADaPT's Minecraft crafting benchmark (AgentGym's indexing), bugs fixed.

Its plugin (``plugin.py`` here, declared in ``pyproject.toml``'s ``agentenvs.envs`` entry
points) names its parts: the class, the scripted expert in ``expert.py`` here, the prompts in
:mod:`agentenvs.agents.prompts.textcraft` and the benchmark protocol entries in
:mod:`agentenvs.agents.protocols`. Its speed benchmark is
:mod:`agentenvs.benchmarks.speed.textcraft`.
"""

from __future__ import annotations

from agentenvs.plugins import lazy_exports

# name -> the module defining it, imported on first use (importing the package, e.g. for its
# plugin declaration, imports none of them)
_EXPORTS = {
    "CraftingTree": "crafting",
    "default_tree": "crafting",
    "item_id_to_str": "crafting",
    "TEST_IDS": "env",
    "TextCraftEnv": "env",
    "TextCraftTask": "env",
    "parse_fields": "env",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
