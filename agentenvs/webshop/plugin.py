"""WebShop-v0's plugin: the object ``pyproject.toml``'s ``agentenvs.envs`` entry point names."""

from __future__ import annotations

from agentenvs.plugins import EnvPlugin

PLUGIN = EnvPlugin(
    env_id="WebShop-v0",
    env="agentenvs.webshop:WebShopEnv",
    expert="agentenvs.webshop.expert:WebShopExpert",
    prompts="agentenvs.agents.prompts.webshop:PROMPTS",
    protocols="agentenvs.agents.protocols:WEBSHOP",
    default_protocol="ptgpo",
    splits=("train", "test"),
    extra="webshop",
    requires=("regex", "jinja2"),
)
