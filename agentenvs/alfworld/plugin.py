"""ALFWorld-v0's plugin: the object ``pyproject.toml``'s ``agentenvs.envs`` entry point names."""

from __future__ import annotations

from agentenvs.plugins import EnvPlugin

# ALFWorld's engine modules are imported (and checked) by agentenvs.alfworld.engine, which undoes
# alfworld's import-time side effect on $ALFWORLD_DATA: no ``requires`` here
PLUGIN = EnvPlugin(
    env_id="ALFWorld-v0",
    env="agentenvs.alfworld:ALFWorldEnv",
    expert="agentenvs.alfworld.expert:ALFWorldExpert",
    prompts="agentenvs.agents.prompts.alfworld:PROMPTS",
    protocols="agentenvs.agents.protocols:ALFWORLD",
    default_protocol="ptgpo",
    splits=("train", "test", "valid_seen", "valid_unseen", "agentgym_train"),
    extra="alfworld",
)
