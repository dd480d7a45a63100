"""The table of agentenvs environment ids and their Gymnasium registration.

``import agentenvs`` calls :func:`register_all`, after which ``gym.make("TextCraft-v0")`` works
(or ``gym.make("agentenvs:TextCraft-v0")`` without a prior import). Entry points are strings, so
registering imports no environment module: an environment's own dependencies (minigrid,
alfworld, ...) load only when that environment is made. A dependency that does not import is one
:class:`MissingDependencyError` at ``gym.make``, naming the extra that installs it
(``pip install 'agentenvs[alfworld]'``), never an error in the middle of a run;
``agentenvs list`` shows that error in place of the environment's splits.

``gym.make`` returns the environment itself, unwrapped (``order_enforce=False``,
``disable_env_checker=True``): our base class enforces reset-before-step itself, every id passes
``gymnasium.utils.env_checker.check_env`` in the test suite, and so ``env.snapshot()``,
``env.task_ids(...)`` and the rest of the contract are reachable without ``env.unwrapped``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

__all__ = [
    "ENVIRONMENTS",
    "EnvEntry",
    "MissingDependencyError",
    "check_dependencies",
    "env_class",
    "make",
    "missing_dependency",
    "register_all",
]


@dataclass(frozen=True)
class EnvEntry:
    """One registered id: its entry point, the extra its dependencies come from and the modules
    that extra provides (``requires``, imported by :func:`check_dependencies`)."""

    env_id: str
    entry_point: str
    extra: str = ""
    requires: tuple[str, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


ENVIRONMENTS: dict[str, EnvEntry] = {
    e.env_id: e
    for e in [
        EnvEntry("TextCraft-v0", "agentenvs.textcraft:TextCraftEnv"),
        EnvEntry("Sokoban-v0", "agentenvs.sokoban:SokobanEnv"),
        # ALFWorld's engine modules are imported (and checked) by agentenvs.alfworld.engine, which
        # undoes alfworld's import-time side effect on $ALFWORLD_DATA
        EnvEntry("ALFWorld-v0", "agentenvs.alfworld:ALFWorldEnv", extra="alfworld"),
        EnvEntry(
            "WebShop-v0",
            "agentenvs.webshop:WebShopEnv",
            extra="webshop",
            requires=("regex", "jinja2"),
        ),
        EnvEntry(
            "BabyAI-Text-v0",
            "agentenvs.babyai:BabyAITextEnv",
            extra="babyai",
            requires=("minigrid",),
        ),
    ]
}


class MissingDependencyError(ImportError):
    """An environment's dependency does not import; the message names the extra to install."""


def missing_dependency(env_id: str, exc: ImportError) -> MissingDependencyError:
    """The one error for ``env_id`` whose dependency failed to import with ``exc``."""
    entry = _entry(env_id)
    name = exc.name or str(exc)
    return MissingDependencyError(
        f"{env_id} needs the {entry.extra!r} extra ({name} does not import: {exc}); install it "
        f"with: pip install 'agentenvs[{entry.extra}]'",
        name=exc.name,
    )


def check_dependencies(env_id: str) -> None:
    """Import the modules ``env_id`` needs; raise :class:`MissingDependencyError` (naming the
    extra to install) for the first that does not import. The environments call it when made."""
    import importlib

    for module in _entry(env_id).requires:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise missing_dependency(env_id, exc) from exc


def register_all() -> None:
    """Register every id of :data:`ENVIRONMENTS` with Gymnasium (idempotent)."""
    for entry in ENVIRONMENTS.values():
        if entry.env_id in gym.registry:
            continue
        gym.register(
            id=entry.env_id,
            entry_point=entry.entry_point,
            kwargs=dict(entry.kwargs),
            order_enforce=False,
            disable_env_checker=True,
        )


def env_class(env_id: str) -> type:
    """The environment class behind ``env_id`` (imports its module)."""
    import importlib

    entry = _entry(env_id)
    module, _, name = entry.entry_point.partition(":")
    return getattr(importlib.import_module(module), name)


def make(env_id: str, **kwargs: Any) -> Any:
    """``gym.make`` for an agentenvs id, with a clear error for an unknown one."""
    _entry(env_id)
    register_all()
    return gym.make(env_id, **kwargs)


def _entry(env_id: str) -> EnvEntry:
    try:
        return ENVIRONMENTS[env_id]
    except KeyError:
        raise gym.error.UnregisteredEnv(
            f"unknown environment id {env_id!r}; agentenvs registers {sorted(ENVIRONMENTS)}"
        ) from None
