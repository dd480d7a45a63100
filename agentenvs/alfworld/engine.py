"""The real ALFWorld engine, driven safely: textworld's PDDL environment, alfworld's wrappers.

One :class:`Engine` is what alfworld's ``AlfredTWEnv`` builds for one game: textworld 1.7's
``PddlEnv`` (the game logic, fast-downward's planner library) wrapped in alfworld 0.4.2's
``AlfredDemangler`` (object names such as ``desk 2``) and ``AlfredInfos``, asking for the same
infos (``won``, ``admissible_commands``). Nothing of the game is re-implemented here; this module
only handles the engine's hazards:

* ``fast_downward.pddl2sas`` overwrites ``sys.argv`` (and swaps ``sys.stdout``); every engine call
  runs inside :func:`_engine_call`, which puts ``sys.argv`` back;
* importing alfworld sets ``$ALFWORLD_DATA`` as a side effect; the import is undone;
* ``AlfredDemangler(shuffle=True)`` shuffles names with the global ``random``; we never shuffle
  (AgentGym's and alfworld's evaluation setting);
* loading a game parses its grammar (about 0.2 s) and translates its PDDL twice, on load and again
  on every reset (about 0.3 s each). Both are pure functions of the game text, so they are cached
  per process (:class:`_ProcessCache`, a small LRU): a second reset of a game costs only the
  planner's state setup.

Each engine holds its own copy of fast-downward's shared library (textworld loads a private copy per
environment because the library keeps global state), so engines never share state. A copy stays
loaded until the process ends (unloading one crashed later loads), so make an environment once per
worker and reuse it across tasks. Not thread-safe.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from agentenvs.registration import missing_dependency

__all__ = ["Engine", "clear_process_cache", "import_engine"]

_CACHE_GAMES = 8  # games whose parsed grammar and translations stay cached (about 4 MB each)


def _import_engine() -> Any:
    """Import the engine modules, undoing alfworld's import-time ``$ALFWORLD_DATA`` side effect."""
    had_var = "ALFWORLD_DATA" in os.environ
    old_value = os.environ.get("ALFWORLD_DATA")
    try:
        import fast_downward
        import textworld
        from alfworld.agents.environment import alfred_tw_env
        from textworld.envs.pddl import logic as pddl_logic
        from textworld.envs.pddl.pddl import PddlEnv
    except ImportError as exc:
        raise missing_dependency("ALFWorld-v0", exc) from exc
    finally:
        if had_var:
            os.environ["ALFWORLD_DATA"] = old_value or ""
        else:
            os.environ.pop("ALFWORLD_DATA", None)
    return _Modules(fast_downward, textworld, pddl_logic, PddlEnv, alfred_tw_env)


class _Modules:
    def __init__(self, fast_downward, textworld, pddl_logic, pddl_env, alfred_tw_env) -> None:
        self.fast_downward = fast_downward
        self.textworld = textworld
        self.pddl_logic = pddl_logic
        self.PddlEnv = pddl_env
        self.AlfredDemangler = alfred_tw_env.AlfredDemangler
        self.AlfredInfos = alfred_tw_env.AlfredInfos


_MODULES: _Modules | None = None


def import_engine() -> None:
    """Import the engine once per process; a module that does not import raises
    :class:`~agentenvs.registration.MissingDependencyError` naming the ``alfworld`` extra."""
    _modules()


def _modules() -> _Modules:
    global _MODULES
    if _MODULES is None:
        _MODULES = _import_engine()
    return _MODULES


class _ProcessCache:
    """LRU caches of the two pure, expensive steps of loading a game, shared by the process.

    ``game_logic(domain, grammar)`` is textworld's parsed ``GameLogic`` (read-only after parsing;
    the planner state only adds types it already has); ``pddl2sas(domain, problem, ...)`` is
    fast-downward's translation (a parsed task and its SAS text, both only read afterwards).
    """

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._logic: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._sas: OrderedDict[tuple[str, str, bool], Any] = OrderedDict()

    def clear(self) -> None:
        self._logic.clear()
        self._sas.clear()

    def _get(self, table: OrderedDict, key: tuple, make: Callable[[], Any], size: int) -> Any:
        if key in table:
            table.move_to_end(key)
            return table[key]
        value = make()
        table[key] = value
        while len(table) > size:
            table.popitem(last=False)
        return value

    def game_logic_factory(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def game_logic(domain: str, grammar: str) -> Any:
            return self._get(
                self._logic,
                (domain, grammar),
                lambda: original(domain=domain, grammar=grammar),
                self.maxsize,
            )

        return game_logic

    def pddl2sas_factory(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False):
            return self._get(
                self._sas,
                (domain, problem, bool(optimize)),
                lambda: original(domain, problem, verbose=verbose, optimize=optimize),
                2 * self.maxsize,
            )

        return pddl2sas


_CACHE = _ProcessCache(_CACHE_GAMES)


def clear_process_cache() -> None:
    """Forget the cached grammars and translations (the next load of each game is cold)."""
    _CACHE.clear()


@contextlib.contextmanager
def _engine_call(modules: _Modules) -> Iterator[None]:
    """Run engine code with the process cache installed, then restore what it changes.

    textworld calls ``pddl_logic.GameLogic(...)`` and ``fast_downward.pddl2sas(...)`` through
    their modules, so the cached versions are installed there for the duration of the call only.
    """
    argv = sys.argv
    stdout = sys.stdout
    logic_cls = modules.pddl_logic.GameLogic
    pddl2sas = modules.fast_downward.pddl2sas
    modules.pddl_logic.GameLogic = _CACHE.game_logic_factory(logic_cls)
    modules.fast_downward.pddl2sas = _CACHE.pddl2sas_factory(pddl2sas)
    try:
        yield
    finally:
        modules.pddl_logic.GameLogic = logic_cls
        modules.fast_downward.pddl2sas = pddl2sas
        sys.argv = argv
        sys.stdout = stdout


class Engine:
    """One alfworld game engine: load a game file, reset it, step it, ask its planner.

    Mirrors what ``AlfredTWEnv.init_env`` builds (``AlfredDemangler(shuffle=False)``,
    ``AlfredInfos``, ``EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])``),
    one game at a time.
    """

    def __init__(self, transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        """``transform`` (optional) rewrites each game's JSON before the engine reads it (the
        game version, :mod:`agentenvs.alfworld.versions`); without it the file is read as is."""
        self._transform = transform
        self._m = _modules()
        infos = self._m.textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
        with _engine_call(self._m):
            self._pddl = self._m.PddlEnv(infos)
        self._env = self._m.AlfredInfos(self._m.AlfredDemangler(self._pddl, shuffle=False))
        self._game_file: str | None = None
        self._state: Any = None

    # ----- game lifecycle -------------------------------------------------------------------

    @property
    def game_file(self) -> str | None:
        return self._game_file

    @property
    def ready(self) -> bool:
        """True once a game is loaded and reset (until the next load or close)."""
        return self._state is not None

    def load(self, game_file: str) -> None:
        """Load a ``game.tw-pddl`` (a no-op when it is the game already loaded)."""
        if game_file == self._game_file:
            return
        self._game_file = None
        self._state = None
        source: str | dict[str, Any] = game_file
        if self._transform is not None:
            with open(game_file, encoding="utf-8") as f:
                source = self._transform(json.load(f))
        with _engine_call(self._m):
            self._env.load(source)  # textworld's PddlEnv.load takes a path or the game's JSON
        self._game_file = game_file

    def reset(self) -> str:
        """Restart the loaded game; returns the engine's intro text (banner, room, task)."""
        if self._game_file is None:
            raise RuntimeError("Engine.reset() before load()")
        with _engine_call(self._m):
            self._state = self._env.reset()
        self._admissible = frozenset(self._state["admissible_commands"])
        return self._state["feedback"]

    def step(self, command: str) -> tuple[str, bool]:
        """Apply one command; returns ``(feedback, valid)``.

        ``valid`` says the engine recognised the command (it is one of the admissible commands,
        after the engine's own ``strip()``); otherwise the engine answers ``Nothing happens.``.
        """
        valid = command.strip() in self._admissible
        with _engine_call(self._m):
            self._state, _, _ = self._env.step(command)
        self._admissible = frozenset(self._state["admissible_commands"])
        return self._state["feedback"], valid

    # ----- read-outs ------------------------------------------------------------------------

    @property
    def won(self) -> bool:
        return bool(self._state["won"])

    @property
    def admissible_commands(self) -> list[str]:
        """The engine's sorted command list for the current state (a fresh list)."""
        return list(self._state["admissible_commands"])

    @property
    def walkthrough(self) -> list[str]:
        """The game file's stored reference solution (empty if the file has none)."""
        return list(self._pddl.walkthrough or [])

    def plan(self) -> list[str]:
        """fast-downward's plan from the current state to the goal (textworld's ``replan``).

        Empty when the planner finds none. Takes from milliseconds to tens of seconds.
        """
        with _engine_call(self._m):
            return list(self._pddl._pddl_state.replan(self._pddl._entity_infos))

    def close(self) -> None:
        """Free the planner's task in this engine's library copy (the engine is unusable after).

        The library copy itself stays mapped: ``dlclose`` of these copies (fast-downward's
        ``close_lib``) crashed a later ``dlopen`` of another copy in the same process.
        """
        lib = getattr(self._pddl, "downward_lib", None)
        if lib is not None and self._game_file is not None:
            lib.cleanup()
        self._game_file = None
        self._state = None
