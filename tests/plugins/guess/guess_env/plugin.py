"""The plugin object: what ``pyproject.toml``'s ``agentenvs.envs`` entry point names."""

from agentenvs.plugins import EnvPlugin

PLUGIN = EnvPlugin(
    env_id="Guess-v0",
    env="guess_env.env:GuessEnv",
    expert="guess_env.expert:GuessExpert",
    prompts="guess_env.prompts:PROMPTS",
    protocols="guess_env.prompts:PROTOCOLS",
    default_protocol="guess-basic",
    splits=("train", "test"),
)
