"""The table of agentenvs environment ids and their Gymnasium registration.

Every id comes from an environment plugin (:mod:`agentenvs.plugins`): an entry point in the group
``agentenvs.envs``, ours declared in agentenvs' own ``pyproject.toml`` and any other package's in
its own. :data:`ENVIRONMENTS` is that table (it follows :func:`agentenvs.plugins.refresh_plugins`).

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

from typing import Any

import gymnasium as gym

from agentenvs.plugins import EnvPlugin, LiveTable, load_part, plugin, plugins

__all__ = [
    "ENVIRONMENTS",
    "EnvPlugin",
    "MissingDependencyError",
    "build_env",
    "check_dependencies",
    "env_class",
    "make",
    "missing_dependency",
    "register_all",
]

ENVIRONMENTS: LiveTable[str, EnvPlugin] = LiveTable(plugins, "environments")
"""Every environment id whose plugin loaded -> its :class:`~agentenvs.plugins.EnvPlugin`."""


class MissingDependencyError(ImportError):
    """An environment's dependency does not import; the message names the extra to install."""


def _install_hint(extra: str) -> str:
    """``pip install 'agentenvs[x]'`` for one of our extras, else ``pip install 'x'``."""
    import importlib.metadata

    try:
        ours = set(importlib.metadata.metadata("agentenvs").get_all("Provides-Extra") or ())
    except importlib.metadata.PackageNotFoundError:
        ours = set()
    return f"pip install 'agentenvs[{extra}]'" if extra in ours else f"pip install '{extra}'"


def missing_dependency(env_id: str, exc: ImportError) -> MissingDependencyError:
    """The one error for ``env_id`` whose dependency failed to import with ``exc``."""
    entry = plugin(env_id)
    name = exc.name or str(exc)
    return MissingDependencyError(
        f"{env_id} needs the {entry.extra!r} extra ({name} does not import: {exc}); install it "
        f"with: {_install_hint(entry.extra)}",
        name=exc.name,
    )


def check_dependencies(env_id: str) -> None:
    """Import the modules ``env_id`` needs; raise :class:`MissingDependencyError` (naming the
    extra to install) for the first that does not import. The environments call it when made."""
    import importlib

    for module in plugin(env_id).requires:
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
            entry_point=entry.env,
            kwargs=dict(entry.kwargs),
            order_enforce=False,
            disable_env_checker=True,
        )


def env_class(env_id: str) -> type:
    """The environment class behind ``env_id`` (imports its module, after checking the modules
    its plugin ``requires``: a missing one is a :class:`MissingDependencyError`)."""
    check_dependencies(env_id)
    cls = load_part(env_id, "env")
    if not isinstance(cls, type):
        from agentenvs.plugins import PluginError, source

        raise PluginError(
            f"environment plugin {env_id!r} ({source(env_id)}) is broken: its env "
            f"{plugin(env_id).env!r} is a {type(cls).__name__}, not a class"
        )
    return cls


def build_env(env_id: str, **kwargs: Any) -> Any:
    """The environment ``gym.make(env_id, **kwargs)`` wraps, unwrapped: its class called with its
    plugin's ``kwargs`` overridden by ``kwargs``. Every tool that needs the bare environment (the
    server's sessions, task listings, recorded variants) makes it here, so a plugin's default
    keywords hold everywhere ``gym.make`` applies them."""
    cls = env_class(env_id)
    return cls(**{**plugin(env_id).kwargs, **kwargs})


def make(env_id: str, **kwargs: Any) -> Any:
    """``gym.make`` for an agentenvs id, with a clear error for an unknown or broken one and
    for a missing dependency (:func:`check_dependencies`)."""
    check_dependencies(env_id)
    register_all()
    return gym.make(env_id, **kwargs)
