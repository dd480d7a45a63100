"""Environment plugins: every environment, ours and a stranger's, comes through one door.

A distribution declares an entry point in the group ``agentenvs.envs``; its name is the
environment id and its value names one :class:`EnvPlugin`::

    [project.entry-points."agentenvs.envs"]
    Guess-v0 = "guess_env.plugin:PLUGIN"

The plugin object is data: its heavy parts (the environment class, the expert, the prompts, the
protocols) are ``"module:attr"`` strings, so finding every environment imports only the modules
that declare the plugins. The agentenvs distribution declares its five environments the same way
(``pyproject.toml``), so this door is the one every environment uses.

A broken plugin (an entry point that does not load, an object that is not an
:class:`EnvPlugin`, an id that another distribution already declared, a part that does not
resolve) is one :class:`PluginError` naming its distribution, its entry point and the fault; the
other environments keep working. Discovery warns once per process (:class:`PluginWarning`) for
each plugin that does not load, ``agentenvs list`` shows it, and using its id raises the error.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from agentenvs.cli_errors import CommandError

__all__ = [
    "ENTRY_POINT_GROUP",
    "EnvPlugin",
    "LiveTable",
    "PluginError",
    "PluginSource",
    "PluginWarning",
    "broken_plugins",
    "generation",
    "lazy_exports",
    "load_part",
    "plugin",
    "plugins",
    "refresh_plugins",
    "source",
]

ENTRY_POINT_GROUP = "agentenvs.envs"
OWN_DISTRIBUTION = "agentenvs"  # its plugins are read first: a stranger cannot shadow our ids

_PARTS = ("env", "expert", "prompts", "protocols")


class PluginError(CommandError):
    """A broken environment plugin; the message names its distribution and the fault."""


class PluginWarning(UserWarning):
    """An installed environment plugin does not load (the others work)."""


@dataclass(frozen=True)
class PluginSource:
    """Where a plugin was declared: the distribution (name and version) and its entry point."""

    distribution: str
    version: str
    entry_point: str

    def __str__(self) -> str:
        return (
            f"entry point {self.entry_point!r} of distribution {self.distribution} {self.version}"
        )


@dataclass(frozen=True)
class EnvPlugin:
    """One environment: everything the tools need, heavy parts as ``"module:attr"`` strings.

    ``env_id``: the Gymnasium id (equal to the entry point's name). ``env``: the
    :class:`~agentenvs.core.TextEnv` subclass. ``expert``: its scripted
    :class:`~agentenvs.expert.Expert` (None: none). ``prompts``: a sequence of
    ``agentenvs.agents.prompts.EnvPrompt``, the default first; each prompt's ``reply_format``
    is the parser of replies to it (None: the environment has no prompt, and no model can play
    it). ``protocols``: a sequence of ``agentenvs.agents.protocols.Protocol`` with setups for
    this id (None: none). ``default_protocol``: the name ``--protocol default`` plays (None:
    none). ``splits``: the split names ``task_ids`` takes. ``extra``: the agentenvs extra (or
    any pip requirement) that installs the dependencies; ``requires``: the modules that
    dependency provides, imported by :func:`agentenvs.registration.check_dependencies`.
    ``kwargs``: keywords ``gym.make`` passes by default.
    """

    env_id: str
    env: str
    expert: str | None = None
    prompts: str | None = None
    protocols: str | None = None
    default_protocol: str | None = None
    splits: tuple[str, ...] = ("train", "test")
    extra: str = ""
    requires: tuple[str, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.env_id, str) or not self.env_id:
            raise TypeError(f"env_id must be a non-empty string, got {self.env_id!r}")
        for name in _PARTS:
            value = getattr(self, name)
            if value is None and name != "env":
                continue
            if not isinstance(value, str) or value.count(":") != 1 or value.startswith(":"):
                raise TypeError(f"{name} must be a 'module:attr' string, got {value!r}")
        if isinstance(self.splits, str) or not all(isinstance(s, str) for s in self.splits):
            raise TypeError(f"splits must be a tuple of split names, got {self.splits!r}")

    @property
    def entry_point(self) -> str:
        """The environment class (Gymnasium's ``entry_point``)."""
        return self.env


@dataclass
class _Loaded:
    plugins: dict[str, EnvPlugin] = field(default_factory=dict)
    sources: dict[str, PluginSource] = field(default_factory=dict)
    broken: dict[str, PluginError] = field(default_factory=dict)
    generation: int = 0


_STATE: _Loaded | None = None
_GENERATION = 0


def _entry_points() -> Iterator[tuple[importlib.metadata.EntryPoint, PluginSource]]:
    """Every ``agentenvs.envs`` entry point, ours first, each (distribution, name) once (an
    editable install may show one distribution twice on ``sys.path``; the first copy that
    declares an entry point wins)."""
    declaring = []
    for dist in importlib.metadata.distributions():
        text = dist.read_text("entry_points.txt")  # reading it alone: parsing METADATA is slower
        if text and f"[{ENTRY_POINT_GROUP}]" in text:
            declaring.append((dist.metadata["Name"] or "?", dist))
    seen: set[tuple[str, str]] = set()
    for name, dist in sorted(
        declaring, key=lambda d: (_norm(d[0]) != OWN_DISTRIBUTION, _norm(d[0]))
    ):
        for ep in dist.entry_points:
            if ep.group != ENTRY_POINT_GROUP or (_norm(name), ep.name) in seen:
                continue
            seen.add((_norm(name), ep.name))
            yield ep, PluginSource(name, dist.version or "?", f"{ep.name} = {ep.value}")


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _load(ep: importlib.metadata.EntryPoint, source: PluginSource) -> EnvPlugin:
    try:
        obj = ep.load()
    except Exception as exc:
        raise PluginError(
            f"environment plugin {ep.name!r} ({source}) does not load: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(obj, EnvPlugin):
        raise PluginError(
            f"environment plugin {ep.name!r} ({source}) names a {type(obj).__name__}, not an "
            "agentenvs.plugins.EnvPlugin"
        )
    if obj.env_id != ep.name:
        raise PluginError(
            f"environment plugin {ep.name!r} ({source}) declares env_id {obj.env_id!r}; the "
            "entry point's name must be the environment id"
        )
    return obj


def _discover() -> _Loaded:
    loaded = _Loaded(generation=_GENERATION)
    for ep, source in _entry_points():
        if ep.name in loaded.plugins:
            loaded.broken.setdefault(
                ep.name,
                PluginError(
                    f"environment plugin {ep.name!r} ({source}) is ignored: "
                    f"{loaded.sources[ep.name]} already declares {ep.name!r}"
                ),
            )
            continue
        try:
            loaded.plugins[ep.name] = _load(ep, source)
            loaded.sources[ep.name] = source
        except PluginError as exc:
            loaded.broken[ep.name] = exc
    for exc in loaded.broken.values():
        warnings.warn(f"{exc}; the other environments work", PluginWarning, stacklevel=4)
    return loaded


def _state() -> _Loaded:
    global _STATE
    if _STATE is None or _STATE.generation != _GENERATION:
        _STATE = _discover()
    return _STATE


def refresh_plugins() -> None:
    """Read the entry points again (after ``sys.path`` or the installed distributions changed);
    every table built from them (:class:`LiveTable`) follows."""
    global _GENERATION
    _GENERATION += 1
    importlib.invalidate_caches()


def generation() -> int:
    """A number that changes whenever the plugins are read again."""
    _state()
    return _GENERATION


def plugins() -> dict[str, EnvPlugin]:
    """Every environment that loaded, by id (ours first)."""
    return dict(_state().plugins)


def broken_plugins() -> dict[str, PluginError]:
    """Every entry point that did not give a usable plugin, by its name, with its error."""
    return dict(_state().broken)


def plugin(env_id: str) -> EnvPlugin:
    """The plugin of ``env_id``: its :class:`PluginError` for a broken one, else an
    ``UnregisteredEnv`` error listing the valid ids for an unknown one."""
    state = _state()
    if env_id in state.plugins:
        return state.plugins[env_id]
    if env_id in state.broken:
        raise state.broken[env_id]
    import gymnasium as gym

    raise gym.error.UnregisteredEnv(
        f"unknown environment id {env_id!r}; agentenvs registers {sorted(state.plugins)}"
    )


def source(env_id: str) -> PluginSource:
    """The distribution and entry point that declared ``env_id``."""
    plugin(env_id)
    return _state().sources[env_id]


def load_part(env_id: str, part: str) -> Any:
    """Import and return ``part`` (``env``, ``expert``, ``prompts`` or ``protocols``) of
    ``env_id``'s plugin (None where the plugin has none); a part that does not resolve is a
    :class:`PluginError` naming the distribution, the part and the fault. An ``ImportError``
    raised by the part's own module propagates unchanged when it names the plugin's extra (a
    missing dependency is :class:`~agentenvs.registration.MissingDependencyError`'s job)."""
    if part not in _PARTS:
        raise ValueError(f"part must be one of {_PARTS}, got {part!r}")
    entry = plugin(env_id)
    target = getattr(entry, part)
    if target is None:
        return None
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if "pip install" in str(exc):  # a MissingDependencyError naming the extra
            raise
        raise _part_error(env_id, part, target, exc) from exc
    except Exception as exc:
        raise _part_error(env_id, part, target, exc) from exc
    try:
        obj = module
        for name in attr.split("."):
            obj = getattr(obj, name)
    except AttributeError as exc:
        raise _part_error(env_id, part, target, exc) from exc
    return obj


def _part_error(env_id: str, part: str, target: str, exc: BaseException) -> PluginError:
    return PluginError(
        f"environment plugin {env_id!r} ({source(env_id)}) is broken: its {part} "
        f"{target!r} does not load: {type(exc).__name__}: {exc}"
    )


K = TypeVar("K")
V = TypeVar("V")


class LiveTable(Mapping[K, V], Generic[K, V]):
    """A read-only mapping built from the plugins by ``build`` and rebuilt when they are read
    again (:func:`refresh_plugins`); importing it by name (``from x import TABLE``) stays live."""

    def __init__(self, build: Callable[[], Mapping[K, V]], what: str = "") -> None:
        self._build = build
        self._what = what
        self._cache: Mapping[K, V] | None = None
        self._generation = -1

    def _table(self) -> Mapping[K, V]:
        now = generation()
        if self._cache is None or self._generation != now:
            self._cache = dict(self._build())
            self._generation = now
        return self._cache

    def __getitem__(self, key: K) -> V:
        return self._table()[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())

    def __repr__(self) -> str:
        return f"LiveTable({self._what or 'plugins'}: {dict(self._table())!r})"


def lazy_exports(
    package: str, names: Mapping[str, str], before: Callable[[], None] | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for an environment package whose names (name -> the
    submodule defining it) load on first use, so that importing the package (its plugin
    declaration beside it) imports none of its modules. ``before`` runs ahead of the first load
    (e.g. :func:`agentenvs.registration.check_dependencies`)."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if before is not None:
            before()
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    def __dir__() -> list[str]:
        return sorted(names)

    return __getattr__, __dir__
