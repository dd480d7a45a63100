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
  ``nb_effect_atoms``: replaced by small records of these fields (:func:`slim_state`);
* the game's entity records (``PddlEnv._get_entity_infos``, one per object and receptacle, with
  alfworld's demangled names): made once per game and shared (:func:`entity_infos`).
"""

from __future__ import annotations

import json
import os
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["GAME_FILES", "GameFiles", "entity_infos", "slim_state"]

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
    """The fields of fast-downward's ``Operator`` that ``PddlState.apply`` reads."""

    id: int
    nb_effect_atoms: int


class _EntityInfos(dict):
    """A game's ``{PDDL name: EntityInfo}`` (a dict that a weak reference can point to)."""

    __slots__ = ("__weakref__",)


_ENTITY_INFOS: weakref.WeakValueDictionary[tuple[str, str], _EntityInfos] = (
    weakref.WeakValueDictionary()
)


def entity_infos(original: Callable[[Any], dict]) -> Callable[[Any], dict]:
    """``PddlEnv._get_entity_infos`` made once per game (domain, problem) and shared.

    The records are a function of the game's initial facts; alfworld's ``AlfredDemangler`` then
    sets each record's ``name`` from its ``id`` alone (``shuffle=False``), the same name in every
    session, and from then on textworld only reads them (the fast path's ``copy_context`` already
    shares them between derivations)."""

    def get_entity_infos(pddl_env: Any) -> dict:
        logic = pddl_env._logic
        key = (logic.domain, pddl_env._pddl_state.pddl_problem)
        infos = _ENTITY_INFOS.get(key)
        if infos is None:
            infos = _ENTITY_INFOS[key] = _EntityInfos(original(pddl_env))
        return infos

    return get_entity_infos


def slim_state(pddl_env: Any) -> None:
    """Drop what textworld's ``PddlEnv`` keeps but never reads again (see the module's notes)."""
    pddl_env.prev_state = None
    pddl_state = getattr(pddl_env, "_pddl_state", None)
    operators = getattr(pddl_state, "_operators", None)
    if operators:
        pddl_state._operators = {
            key: op if isinstance(op, _Operator) else _Operator(op.id, op.nb_effect_atoms)
            for key, op in operators.items()
        }
