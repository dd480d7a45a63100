"""Sokoban-v0's plugin: the object ``pyproject.toml``'s ``agentenvs.envs`` entry point names."""

from __future__ import annotations

from agentenvs.plugins import EnvPlugin

PLUGIN = EnvPlugin(
    env_id="Sokoban-v0",
    env="agentenvs.sokoban:SokobanEnv",
    expert="agentenvs.sokoban.expert:SokobanExpert",
    prompts="agentenvs.agents.prompts.sokoban:PROMPTS",
    protocols="agentenvs.agents.protocols:SOKOBAN",
    default_protocol="ptgpo",
    splits=("train", "test"),
)
