"""What the sessions of a process share, and what a session keeps: a session holds only its state.

Profiled with tracemalloc on 8 test games x 8 live sessions, beyond the planner library
(:mod:`agentenvs.alfworld.planner`) a session held per-game data of its own and leftovers of its
previous step:

* the game file's JSON (its PDDL domain and problem, grammar and walkthrough; several hundred KB
  parsed): :class:`GameFiles` parses a file once per game version and hands every session the
  same dictionary, which textworld and alfworld's wrappers only read;
* ``PddlEnv.prev_state``, the whole previous game state (its actions, command texts, facts
  list), which ``PddlEnv.step`` reads only at its start, to find the command's action, before
  replacing it: dropped after each call (:func:`slim_state`);
* ``PddlState._operators``, which keeps the ctypes array of the applicable operators (1 KB each,
  their fixed-size name buffers) for ``PddlState.apply``, which reads an operator's ``id`` and
  ``nb_effect_atoms``: replaced by small records of the same fields (:func:`slim_state`).
"""

from __future__ import annotations

import json
import os
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["GAME_FILES", "GameFiles", "slim_state"]

_RECENT_GAMES = 8  # parsed games kept with no session using them (a few hundred KB each)


class _GameData(dict):
    """A game file's parsed JSON (a dict that a weak reference can point to)."""

    __slots__ = ("__weakref__",)


class GameFiles:
    """Parsed game files, one dictionary per (file, its size and modification time, transform).

    A dictionary is shared while any session holds it (weakly referenced) and the last
    :data:`_RECENT_GAMES` stay parsed after their sessions end.
    """

    def __init__(self, recent: int = _RECENT_GAMES) -> None:
        self._live: weakref.WeakValueDictionary[tuple, _GameData] = weakref.WeakValueDictionary()
        self._recent: OrderedDict[tuple, _GameData] = OrderedDict()
        self._max_recent = recent

    def get(
        self, path: str, transform: Callable[[dict[str, Any]], dict[str, Any]] | None
    ) -> dict[str, Any]:
        """The game's JSON after ``transform`` (the game version's rewrite, or None)."""
        stat = os.stat(path)
        key = (path, stat.st_size, stat.st_mtime_ns, transform)
        data = self._live.get(key)
        if data is None:
            with open(path, encoding="utf-8") as f:
                raw = json.load(f)
            data = _GameData(transform(raw) if transform is not None else raw)
            self._live[key] = data
        self._recent[key] = data
        self._recent.move_to_end(key)
        while len(self._recent) > self._max_recent:
            self._recent.popitem(last=False)
        return data

    def clear(self) -> None:
        self._recent.clear()
        self._live.clear()


GAME_FILES = GameFiles()  # one per process


class _Operator(NamedTuple):
    """The fields of fast-downward's ``Operator`` that textworld reads after listing them."""

    id: int
    name: str
    nb_effect_atoms: int


def slim_state(pddl_env: Any) -> None:
    """Drop what textworld's ``PddlEnv`` keeps but never reads again (see the module's notes)."""
    pddl_env.prev_state = None
    pddl_state = getattr(pddl_env, "_pddl_state", None)
    operators = getattr(pddl_state, "_operators", None)
    if operators:
        pddl_state._operators = {
            key: op if isinstance(op, _Operator) else _Operator(op.id, op.name, op.nb_effect_atoms)
            for key, op in operators.items()
        }
