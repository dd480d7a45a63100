"""BabyAI-Text-v0's plugin: the object ``pyproject.toml``'s ``agentenvs.envs`` entry point names."""

from __future__ import annotations

from agentenvs.plugins import EnvPlugin

PLUGIN = EnvPlugin(
    env_id="BabyAI-Text-v0",
    env="agentenvs.babyai:BabyAITextEnv",
    expert="agentenvs.babyai.expert:BabyAIExpert",
    prompts="agentenvs.agents.prompts.babyai:PROMPTS",
    protocols="agentenvs.agents.protocols:BABYAI",
    default_protocol="prefix-grpo",
    splits=("train", "test", "all"),
    extra="babyai",
    requires=("minigrid",),
)
