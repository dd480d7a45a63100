"""TextCraft-v0's plugin: the object ``pyproject.toml``'s ``agentenvs.envs`` entry point names."""

from __future__ import annotations

from agentenvs.plugins import EnvPlugin

PLUGIN = EnvPlugin(
    env_id="TextCraft-v0",
    env="agentenvs.textcraft:TextCraftEnv",
    expert="agentenvs.textcraft.expert:TextCraftExpert",
    prompts="agentenvs.agents.prompts.textcraft:PROMPTS",
    protocols="agentenvs.agents.protocols:TEXTCRAFT",
    default_protocol="prefix-grpo",
    splits=("train", "test", "adapt"),
)
