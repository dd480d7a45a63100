"""The real ALFWorld engine, driven safely: textworld's PDDL environment, alfworld's wrappers.

One :class:`Engine` is what alfworld's ``AlfredTWEnv`` builds for one game: textworld 1.7's
``PddlEnv`` (the game logic, fast-downward's planner library) wrapped in alfworld 0.4.2's
``AlfredDemangler`` (object names such as ``desk 2``) and ``AlfredInfos``, asking for the same
infos (``won``, ``admissible_commands``). Nothing of the game is re-implemented here; every
engine call runs inside :func:`_engine_call`, which installs the fast path
(:mod:`agentenvs.alfworld.fastpath`: the engine's pure, repeated parses and translations done
once per process, the same text) and contains the engine's hazards:

* ``fast_downward.pddl2sas`` overwrites ``sys.argv`` (and swaps ``sys.stdout``); both are put
  back after every call;
* importing alfworld sets ``$ALFWORLD_DATA`` as a side effect; the import is undone;
* ``AlfredDemangler(shuffle=True)`` shuffles names with the global ``random``; we never shuffle
  (AgentGym's and alfworld's evaluation setting).

The engines of a game share one copy of fast-downward's shared library, each holding only its
state id in the copy's state registry (:mod:`agentenvs.alfworld.planner`; textworld loads a
private copy per environment because the library keeps its task and state in globals). A copy
stays loaded until the process ends (unloading one crashed later loads); a copy whose engines have
all left their game is reused for the next game. Engine calls of all engines of a process take
turns (:data:`ENGINE_LOCK`): the translator's options, the fast path's replacements, the shared
library copies and the derivation memo's current path are process-wide.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

from agentenvs.alfworld import fastpath
from agentenvs.alfworld.shared import GAME_FILES, entity_infos, slim_state
from agentenvs.registration import missing_dependency

__all__ = ["ENGINE_LOCK", "Engine", "clear_process_cache", "import_engine"]

ENGINE_LOCK = threading.RLock()  # held by every engine call (and by the memo around one)


def _import_engine() -> Any:
    """Import the engine modules, undoing alfworld's import-time ``$ALFWORLD_DATA`` side effect."""
    had_var = "ALFWORLD_DATA" in os.environ
    old_value = os.environ.get("ALFWORLD_DATA")
    try:
        import fast_downward
        import textworld
        from alfworld.agents.environment import alfred_tw_env
        from textworld.envs.pddl import logic as pddl_logic
        from textworld.envs.pddl import textgen
        from textworld.envs.pddl.pddl import PddlEnv
        from textworld.logic import Rule
    except ImportError as exc:
        raise missing_dependency("ALFWorld-v0", exc) from exc
    finally:
        if had_var:
            os.environ["ALFWORLD_DATA"] = old_value or ""
        else:
            os.environ.pop("ALFWORLD_DATA", None)
    return _Modules(fast_downward, textworld, pddl_logic, textgen, Rule, PddlEnv, alfred_tw_env)


class _Modules:
    def __init__(
        self, fast_downward, textworld, pddl_logic, textgen, rule, pddl_env, alfred_tw_env
    ) -> None:
        self.fast_downward = fast_downward
        self.textworld = textworld
        self.pddl_logic = pddl_logic
        self.textgen = textgen
        self.Rule = rule
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


def clear_process_cache() -> None:
    """Forget the remembered parses, game logic and translations (the next load of each game
    is cold)."""
    fastpath.clear()
    GAME_FILES.clear()


@contextlib.contextmanager
def _engine_call(modules: _Modules) -> Iterator[None]:
    """Run engine code with the fast path installed (:mod:`agentenvs.alfworld.fastpath`), then
    restore what it changes: the fast path's replacements, ``sys.argv`` and ``sys.stdout``."""
    with ENGINE_LOCK:
        with _contained(modules):
            yield


@contextlib.contextmanager
def _contained(modules: _Modules) -> Iterator[None]:
    argv = sys.argv
    stdout = sys.stdout
    try:
        with fastpath.installed(
            modules.fast_downward, modules.pddl_logic, modules.textgen, modules.Rule
        ):
            yield
    finally:
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
        share = entity_infos(self._m.PddlEnv._get_entity_infos)  # one set per game
        self._pddl._get_entity_infos = types.MethodType(share, self._pddl)
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
        source = GAME_FILES.get(game_file, self._transform)  # one parsed copy per game and version
        with _engine_call(self._m):
            self._env.load(source)  # textworld's PddlEnv.load takes a path or the game's JSON
        self._game_file = game_file

    def reset(self) -> str:
        """Restart the loaded game; returns the engine's intro text (banner, room, task)."""
        if self._game_file is None:
            raise RuntimeError("Engine.reset() before load()")
        with _engine_call(self._m):
            self._state = self._env.reset()
        self._after_call()
        return self._state["feedback"]

    def step(self, command: str) -> tuple[str, bool]:
        """Apply one command; returns ``(feedback, valid)``.

        ``valid`` says the engine recognised the command (it is one of the admissible commands,
        after the engine's own ``strip()``); otherwise the engine answers ``Nothing happens.``.
        """
        valid = command.strip() in self._admissible
        with _engine_call(self._m):
            self._state, _, _ = self._env.step(command)
        self._after_call()
        return self._state["feedback"], valid

    def _after_call(self) -> None:
        """Keep only what the next call reads (:func:`~agentenvs.alfworld.shared.slim_state`)."""
        slim_state(self._pddl)
        self._admissible = frozenset(self._state["admissible_commands"])

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
            fastpath.ready_to_plan(self._pddl._pddl_state)
            return list(self._pddl._pddl_state.replan(self._pddl._entity_infos))

    def close(self) -> None:
        """Leave the game's shared library copy (the engine is unusable after).

        A copy no engine uses is kept for the next game, never unloaded: ``dlclose`` of these
        copies (fast-downward's ``close_lib``) crashed a later ``dlopen`` of another copy in the
        same process.
        """
        lib = getattr(self._pddl, "downward_lib", None)
        if lib is not None:
            lib.cleanup()  # a SessionPlanner: unbinds this engine (again: nothing)
        self._game_file = None
        self._state = None
