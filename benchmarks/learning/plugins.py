"""The learning benchmark's own environments, as environment plugins of this process only.

``KeyDoor-v0`` (the credit testbed, :mod:`agentenvs.benchmarks.learning.keydoor`),
``KeyDoor-traps-v0`` and ``KeyDoor-hidden-traps-v0`` (the same with marked or unmarked trap
forks) and
``Sokoban-oracle-v0`` (Sokoban-v0 with the expert's step credit in ``info``,
:mod:`agentenvs.benchmarks.learning.envs`) are controls of the benchmark, not environments users
pick, so the agentenvs distribution does not declare them. :func:`register_benchmark_envs` makes
them plugins of the running process through the one door every environment uses (an
``agentenvs.envs`` entry point, :mod:`agentenvs.plugins`): it adds a distribution that only
this process sees (:class:`_BenchmarkFinder`, Python's ``importlib.metadata`` finder hook) and
reads the plugins again. The benchmark's units, the trainer and the rollouts then find them
like any other id; ``agentenvs list`` in another process does not.
"""

from __future__ import annotations

import importlib.abc
import importlib.metadata
import pathlib
import sys
from collections.abc import Iterator
from typing import Any

from agentenvs.plugins import EnvPlugin

__all__ = [
    "DISTRIBUTION",
    "KEYDOOR",
    "KEYDOOR_HIDDEN_TRAPS",
    "KEYDOOR_TRAPS",
    "ORACLE_SOKOBAN",
    "register_benchmark_envs",
    "unregister_benchmark_envs",
]

DISTRIBUTION = "agentenvs-learning-benchmark"

KEYDOOR = EnvPlugin(
    env_id="KeyDoor-v0",
    env="agentenvs.benchmarks.learning.keydoor:KeyDoorEnv",
    expert="agentenvs.benchmarks.learning.keydoor:KeyDoorExpert",
    prompts="agentenvs.benchmarks.learning.keydoor_prompt:PROMPTS",
    protocols="agentenvs.benchmarks.learning.keydoor_prompt:PROTOCOLS",
    default_protocol="keydoor",
    splits=("train", "validation", "test"),
)

KEYDOOR_TRAPS = EnvPlugin(
    env_id="KeyDoor-traps-v0",
    env="agentenvs.benchmarks.learning.keydoor:KeyDoorTrapsEnv",
    expert="agentenvs.benchmarks.learning.keydoor:KeyDoorTrapsExpert",
    prompts="agentenvs.benchmarks.learning.keydoor_prompt:TRAPS_PROMPTS",
    protocols="agentenvs.benchmarks.learning.keydoor_prompt:TRAPS_PROTOCOLS",
    default_protocol="keydoor-traps",
    splits=("train", "validation", "test"),
)

KEYDOOR_HIDDEN_TRAPS = EnvPlugin(
    env_id="KeyDoor-hidden-traps-v0",
    env="agentenvs.benchmarks.learning.keydoor:KeyDoorHiddenTrapsEnv",
    expert="agentenvs.benchmarks.learning.keydoor:KeyDoorHiddenTrapsExpert",
    prompts="agentenvs.benchmarks.learning.keydoor_prompt:HIDDEN_TRAPS_PROMPTS",
    protocols="agentenvs.benchmarks.learning.keydoor_prompt:HIDDEN_TRAPS_PROTOCOLS",
    default_protocol="keydoor-hidden-traps",
    splits=("train", "validation", "test"),
)

ORACLE_SOKOBAN = EnvPlugin(
    env_id="Sokoban-oracle-v0",
    env="agentenvs.benchmarks.learning.envs:SokobanOracleEnv",
    expert="agentenvs.sokoban.expert:SokobanExpert",
    prompts="agentenvs.benchmarks.learning.envs:PROMPTS",
    protocols="agentenvs.benchmarks.learning.envs:PROTOCOLS",
    default_protocol="ptgpo",
)

_ENTRY_POINTS = "[agentenvs.envs]\n" + "".join(
    f"{p.env_id} = {__name__}:{name}\n"
    for name, p in (
        ("KEYDOOR", KEYDOOR),
        ("KEYDOOR_TRAPS", KEYDOOR_TRAPS),
        ("KEYDOOR_HIDDEN_TRAPS", KEYDOOR_HIDDEN_TRAPS),
        ("ORACLE_SOKOBAN", ORACLE_SOKOBAN),
    )
)


class _BenchmarkDistribution(importlib.metadata.Distribution):
    """A distribution of this process that declares the plugins' entry points."""

    def read_text(self, filename: str) -> str | None:
        if filename == "METADATA":
            return f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: 1\n"
        if filename == "entry_points.txt":
            return _ENTRY_POINTS
        return None

    def locate_file(self, path: Any) -> pathlib.Path:
        return pathlib.Path(str(path))


class _BenchmarkFinder(importlib.abc.MetaPathFinder):
    """Finds no module; lists :class:`_BenchmarkDistribution` among the distributions."""

    def find_spec(self, *args: Any, **kwargs: Any) -> None:
        return None

    def find_distributions(self, context: Any = None) -> Iterator[importlib.metadata.Distribution]:
        name = getattr(context, "name", None)
        if name is None or name.lower().replace("_", "-") == DISTRIBUTION:
            yield _BenchmarkDistribution()


def register_benchmark_envs() -> None:
    """Make the benchmark's environments (``KeyDoor-v0`` and its trap variants,
    ``Sokoban-oracle-v0``) known in this process (idempotent)."""
    from agentenvs.plugins import plugins, refresh_plugins

    if any(isinstance(f, _BenchmarkFinder) for f in sys.meta_path):
        return
    sys.meta_path.append(_BenchmarkFinder())
    refresh_plugins()
    ours = (KEYDOOR, KEYDOOR_TRAPS, KEYDOOR_HIDDEN_TRAPS, ORACLE_SOKOBAN)
    missing = {p.env_id for p in ours} - set(plugins())
    if missing:
        raise RuntimeError(f"the benchmark's environments did not register: {sorted(missing)}")


def unregister_benchmark_envs() -> None:
    """Forget the benchmark's environments again (a process that ran the benchmark in-process
    and goes on to other work, such as a test session)."""
    from agentenvs.plugins import refresh_plugins

    finders = [f for f in sys.meta_path if isinstance(f, _BenchmarkFinder)]
    for finder in finders:
        sys.meta_path.remove(finder)
    if finders:
        refresh_plugins()
