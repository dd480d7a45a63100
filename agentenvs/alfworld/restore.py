"""Faster ALFWorld restores and replays: textworld's text derivations remembered per game state.

A restore is a reset plus a replay of the snapshot's commands (the engine has no public way to copy
or set its state: fast-downward's Python interface exposes no state ids, and the planner's state
lives in a C library). Replaying a command costs what a step costs, and most of a step is text:
textworld's ``PddlEnv`` derives, through its context-sensitive grammar, the feedback and the text
of *every* admissible command of the new state (about 25 derivations; about two thirds of a step
even with the fast path of :mod:`agentenvs.alfworld.fastpath`). The planner part (applicable
operators, applying one, updating the facts) is cheap.

A derivation is a deterministic function of the grammar, the symbol derived, the action's mapping
and the game state (textworld's grammar always takes the first applicable rule; no randomness).
The state after some valid commands is the state the same game file reaches after the same
commands from reset, so :class:`DerivationMemo` keys each derivation on ``(grammar, the game's
PDDL problem, the valid commands since reset, symbol, mapping)``; the environment's reset, steps
and restore replays go through :meth:`DerivationMemo.reset` / :meth:`DerivationMemo.step`, which
return remembered texts instead of deriving them again. Everything else runs on the real engine:
the planner applies every operator, the facts are updated, the admissible list is built from the
(remembered) command texts. A path played or restored once in a process is cheap the next time:
Prefix-GRPO's cut-state starts (one restore per group member), replay validation's walk, the
expert's scratch checks, a group's samples while they take the same first steps.

Only :meth:`ContextSensitiveGrammar.derive`, a public method, is wrapped, and only for the
duration of an engine call; ``tests/envs/test_alfworld_restore.py`` checks every observation,
admissible list, reward and win, after restores and on replayed play, against the engine with
every text derived afresh (:meth:`DerivationMemo.disabled`).
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from agentenvs.alfworld.engine import ENGINE_LOCK

__all__ = ["MEMO", "DerivationMemo", "MemoStats"]

_MAX_STATES = 1024  # remembered (game, path) states per grammar (LRU; ~7 KB each)


@dataclass
class MemoStats:
    """Derivations answered from the memo (``hits``) and derived and remembered (``misses``)."""

    hits: int = 0
    misses: int = 0


class DerivationMemo:
    """Remembered grammar derivations per game state, used while a restore replays commands."""

    def __init__(self, max_states: int = _MAX_STATES) -> None:
        self.max_states = max_states
        self.stats = MemoStats()
        self._tables: weakref.WeakKeyDictionary[Any, OrderedDict[tuple, dict]] = (
            weakref.WeakKeyDictionary()
        )
        self._path: tuple[str, ...] | None = None  # the commands since reset, while replaying
        self.enabled = True

    def clear(self) -> None:
        self._tables.clear()
        self.stats = MemoStats()

    @contextlib.contextmanager
    def replaying(self) -> Iterator[None]:
        """Serve derivations from the memo until the block ends (set the path with :meth:`at`)."""
        from textworld.envs.pddl.textgen import ContextSensitiveGrammar

        original = ContextSensitiveGrammar.derive
        ContextSensitiveGrammar.derive = self._wrap(original)  # type: ignore[method-assign]
        try:
            yield
        finally:
            ContextSensitiveGrammar.derive = original  # type: ignore[method-assign]
            self._path = None

    def at(self, path: Sequence[str]) -> None:
        """The valid commands since reset of the state the next engine call derives text for."""
        self._path = tuple(path)

    @contextlib.contextmanager
    def disabled(self) -> Iterator[None]:
        """Every derivation computed afresh inside the block (the reference of the tests)."""
        before, self.enabled = self.enabled, False
        try:
            yield
        finally:
            self.enabled = before

    def reset(self, engine: Any) -> str:
        """``engine.reset()``, its texts served from and added to the memo."""
        if not self.enabled:
            return engine.reset()
        with ENGINE_LOCK, self.replaying():
            self.at(())
            return engine.reset()

    def step(self, engine: Any, done: Sequence[str], command: str) -> tuple[str, bool]:
        """``engine.step(command)`` after the valid commands ``done`` since reset, its texts
        served from and added to the memo (an invalid command leaves the state, so the path)."""
        if not self.enabled:
            return engine.step(command)
        valid = command.strip() in engine.admissible_commands
        with ENGINE_LOCK, self.replaying():
            self.at((*done, command.strip()) if valid else done)
            return engine.step(command)

    def _wrap(self, original: Callable[..., str]) -> Callable[..., str]:
        memo = self

        def derive(grammar: Any, start: str, context: Any = None) -> str:
            if context is None:
                return original(grammar, start)
            table = memo._table(grammar, context)
            if table is None:
                return original(grammar, start, context)
            try:
                key = (start, _mapping_key(context["mapping"]))
            except (AttributeError, TypeError):  # not a mapping of an action: derive it
                return original(grammar, start, context)
            text = table.get(key)
            if text is None:
                text = original(grammar, start, context)
                table[key] = text
                memo.stats.misses += 1
            else:
                memo.stats.hits += 1
            return text

        return derive

    def _table(self, grammar: Any, context: Any) -> dict | None:
        """The derivations of the current state, or None when the call is not memoisable."""
        if self._path is None or not isinstance(context, dict):
            return None
        problem = getattr(context.get("state"), "pddl_problem", None)
        if not isinstance(problem, str) or not isinstance(context.get("mapping"), dict):
            return None
        states = self._tables.get(grammar)
        if states is None:
            states = self._tables[grammar] = OrderedDict()
        key = (problem, self._path)
        table = states.get(key)
        if table is None:
            table = states[key] = {}
            while len(states) > self.max_states:
                states.popitem(last=False)
        else:
            states.move_to_end(key)
        return table


def _mapping_key(mapping: dict) -> tuple[str, ...]:
    """A compact, faithful key of an action's mapping: its placeholder and object names, interned
    (the placeholders' types are the action's, fixed by the symbol; an object's name is unique in
    its game). Keeping the mapping's own objects would hold ~40 KB per remembered state."""
    return tuple(sys.intern(f"{ph.name}={var.name}") for ph, var in mapping.items())


MEMO = DerivationMemo()  # one per process, shared by its environments (engines are per process)
