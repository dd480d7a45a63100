"""The verifiers environment package of agentenvs (taskset id ``agentenvs-verifiers``): the
classes verifiers' loader looks for, from :mod:`agentenvs.integrations.verifiers.environment`."""

from agentenvs.integrations.verifiers.environment import (
    AgentenvsData,
    AgentenvsEnv,
    AgentenvsEnvConfig,
    AgentenvsTask,
    AgentenvsTaskset,
    AgentenvsTasksetConfig,
)

__all__ = [
    "AgentenvsData",
    "AgentenvsEnv",
    "AgentenvsEnvConfig",
    "AgentenvsTask",
    "AgentenvsTaskset",
    "AgentenvsTasksetConfig",
]
