"""The engine's pure, repeated work done once per process: the same text, several times faster.

A step of textworld's ``PddlEnv`` derives, through its context-sensitive grammar, the feedback and
the text of every admissible command (about 25 derivations). Profiled, nearly all of that time
was not the rules but three pure steps, each repeated on every derivation:

* ``textgen._parse_and_convert``: tatsu parses the same template strings (``open {r}``,
  ``#GotoLocation.feedback#``) into symbol trees again and again;
* ``Rule.parse_conjunctive_query``: tatsu parses the same rule conditions and queries
  (``openable(r:receptacle) & opened(r:receptacle)``) again and again;
* ``textgen.copy_context``: deep-copies each symbol's context (the action's mapping of
  placeholders to variables, the variables' entity records) although nothing in a derivation
  writes to those objects; only the two dictionaries are ever updated, and only on a copy.

Loading a game repeats more: textworld's ``GameLogic`` tatsu-parses the game's grammar file (the
same for every game but for its one task sentence), and ``fast_downward.pddl2sas`` translates the
game's PDDL twice on load and the same twice again on every reset.

Inside :func:`installed` (every engine call, and only there) these are replaced by equivalents:

* the two parses are remembered (:class:`_Lru`); a remembered symbol tree is handed out as a
  fresh copy, because a derivation sets the ``context`` of the symbols it is given;
* ``copy_context`` copies the two dictionaries and shares their values, which derivations only
  read (the grammar's ``{...}`` expressions read ``name``, ``indefinite`` and the like);
* ``GameLogic`` is parsed once per grammar *form*: the grammar with its task sentence replaced by
  a placeholder; a game's logic is that one with its own ``task`` rule;
* ``pddl2sas`` is remembered per (domain, problem) for the last few games (its SAS text
  compressed, :class:`_SasHandle`), and the planner's
  translation (``optimize=True``, half of a new game's load) is made only when a plan is asked
  for (:func:`ready_to_plan`; the environment's own steps never plan).

The planner applies every command, the facts are updated, every query of the game state is asked
of the real state: the rules run as they are. ``tests/envs/test_alfworld_differential.py`` plays
every test game and a sample of training games, with random and expert commands, here and on the
unmodified engine in a process of its own, and compares every observation, admissible list,
reward and win.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from agentenvs.alfworld import planner

__all__ = ["clear", "installed", "ready_to_plan"]

_GAMES = 8  # games whose logic and translations stay cached (about 4 MB each)
_FORMS = 4  # grammar forms parsed (one per game version in practice)
_SYMBOL_PARSES = 4096  # template strings: a few hundred shared, plus one task sentence per game
_QUERY_PARSES = 1024  # rule conditions and queries (about 60 in ALFWorld's grammar)

# The task sentence's rule in a game's grammar, ``"rhs": "Your task is to: ..."`` (a JSON string).
_TASK_RHS = re.compile(r'"rhs": ("Your task is to: (?:[^"\\\n]|\\.)*")')
_TASK_PLACEHOLDER = '"Your task is to: agentenvs task placeholder"'


class _Lru:
    """A small least-recently-used table."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._table: OrderedDict[Any, Any] = OrderedDict()

    def get(self, key: Any, make: Callable[[], Any]) -> Any:
        table = self._table
        if key in table:
            table.move_to_end(key)
            return table[key]
        value = make()
        table[key] = value
        while len(table) > self.maxsize:
            table.popitem(last=False)
        return value

    def clear(self) -> None:
        self._table.clear()

    def __len__(self) -> int:
        return len(self._table)


_SYMBOLS = _Lru(_SYMBOL_PARSES)
_QUERIES = _Lru(_QUERY_PARSES)
_FORM_LOGIC = _Lru(_FORMS)
_GAME_LOGIC = _Lru(_GAMES)
_SAS = _Lru(2 * _GAMES)


def clear() -> None:
    """Forget every remembered parse, logic and translation (the next load of a game is cold)."""
    for table in (_SYMBOLS, _QUERIES, _FORM_LOGIC, _GAME_LOGIC, _SAS):
        table.clear()


# --------------------------------------------------------------------------------------------
# Text generation


def _fresh(symbol: Any, symbol_cls: type) -> Any:
    """A copy of a parsed symbol tree: new symbol objects, the same strings and (empty) contexts."""
    copy = object.__new__(type(symbol))
    state = dict(symbol.__dict__)
    for name, value in state.items():
        if isinstance(value, symbol_cls):
            state[name] = _fresh(value, symbol_cls)
        elif isinstance(value, list):
            state[name] = [_fresh(v, symbol_cls) if isinstance(v, symbol_cls) else v for v in value]
    copy.__dict__.update(state)
    return copy


def _symbol_parser(textgen: Any) -> Callable[..., Any]:
    original = textgen._parse_and_convert
    symbol_cls = textgen.Symbol

    def parse_and_convert(text: Any, rule_name: str | None = None, **kwargs: Any) -> Any:
        if kwargs.get("trace") or set(kwargs) - {"trace"} or not isinstance(text, str):
            return original(text, rule_name=rule_name, **kwargs)
        tree = _SYMBOLS.get((text, rule_name), lambda: original(text, rule_name=rule_name))
        if isinstance(tree, list):
            return [_fresh(s, symbol_cls) if isinstance(s, symbol_cls) else s for s in tree]
        return _fresh(tree, symbol_cls) if isinstance(tree, symbol_cls) else tree

    return parse_and_convert


def _query_parser(rule_cls: Any) -> Any:
    original = rule_cls.__dict__["parse_conjunctive_query"].__func__

    def parse_conjunctive_query(cls: Any, expr: str) -> Any:
        # A Rule is only read by the state's queries (all_assignments); one object serves all.
        return _QUERIES.get(expr, lambda: original(cls, expr))

    return classmethod(parse_conjunctive_query)


def _copy_context(context: dict[str, Any]) -> dict[str, Any]:
    """textgen's ``copy_context`` with its two dictionaries copied and their values shared."""
    return {
        "state": context["state"],
        "facts": context["facts"],
        "variables": dict(context["variables"]),
        "mapping": dict(context["mapping"]),
        "entity_infos": context["entity_infos"],
    }


# --------------------------------------------------------------------------------------------
# Game loading


def _game_logic_factory(pddl_logic: Any, textgen: Any) -> Callable[..., Any]:
    original = pddl_logic.GameLogic

    def game_logic(domain: str, grammar: str) -> Any:
        return _GAME_LOGIC.get(
            (domain, grammar), lambda: _logic_of(original, textgen, domain, grammar)
        )

    return game_logic


def _logic_of(original: Any, textgen: Any, domain: str, grammar: str) -> Any:
    """``GameLogic(domain, grammar)``, built from the parsed logic of the grammar's form."""
    matches = list(_TASK_RHS.finditer(grammar))
    if len(matches) != 1:
        return original(domain=domain, grammar=grammar)
    m = matches[0]
    form_text = grammar[: m.start(1)] + _TASK_PLACEHOLDER + grammar[m.end(1) :]
    form = _FORM_LOGIC.get((domain, form_text), lambda: original(domain=domain, grammar=form_text))
    rules = form.grammar._rules.get("task", [])
    if len(rules) != 1 or str(rules[0].rhs) != str(_parse_rhs(textgen, _TASK_PLACEHOLDER)):
        return original(domain=domain, grammar=grammar)
    task = textgen.ProductionRule(
        lhs="task",
        rhs=_parse_rhs(textgen, m.group(1)),
        weight=rules[0].weight,
        condition=rules[0].condition,
    )
    logic = object.__new__(original)
    logic.domain = domain
    logic.actions = dict(form.actions)  # Action records, only read
    logic.types = form.types  # the domain's types: the same for every game of this domain
    logic.grammar = textgen.ContextSensitiveGrammar()
    logic.grammar._rules = defaultdict(list, {k: list(v) for k, v in form.grammar._rules.items()})
    logic.grammar._rules["task"] = [task]
    return logic


def _parse_rhs(textgen: Any, literal: str) -> Any:
    """The symbols of a rule's ``rhs``, given as the JSON string literal of the grammar file."""
    return textgen._parse_and_convert(json.loads(literal), rule_name="symbols")


class _DeferredPlannerTask(str):
    """Stands in for the planner's translation until a plan is asked for (:func:`ready_to_plan`)."""


_DEFERRED = _DeferredPlannerTask("")
_TRANSLATE: list[Callable[..., Any]] = []  # fast_downward's own pddl2sas, once installed


def _translated(domain: str, problem: str, optimize: bool, verbose: bool = False) -> Any:
    """fast_downward's ``pddl2sas`` result, remembered (the task and SAS text are only read)."""
    return _SAS.get(
        (domain, problem, optimize),
        lambda: _TRANSLATE[0](domain, problem, verbose=verbose, optimize=optimize),
    )


class _SasHandle(str):
    """Stands in for a game's SAS text (about 1 MB) in ``PddlState.sas``: the library copies of
    :mod:`agentenvs.alfworld.planner` hold the task, and ``PddlState`` only passes the text's
    ``encode()`` to ``load_sas``; this one encodes to a :class:`~agentenvs.alfworld.planner.TaskRef`
    that names the task and gives its text if a library copy has to load it."""

    ref: planner.TaskRef

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:  # type: ignore[override]
        return self.ref


def _sas_handle(domain: str, problem: str, verbose: bool) -> tuple[Any, _SasHandle]:
    """The game's translation (``pddl2sas`` without optimization), its text kept compressed."""
    task, sas = _TRANSLATE[0](domain, problem, verbose=verbose, optimize=False)
    handle = _SasHandle("")
    handle.ref = planner.TaskRef.of(sas.encode("utf-8"))
    return task, handle


def _pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
    if optimize:  # the planner's task: its text is only read by replan (ready_to_plan)
        return None, _DEFERRED
    return _SAS.get((domain, problem, False), lambda: _sas_handle(domain, problem, verbose))


def ready_to_plan(pddl_state: Any) -> None:
    """Give the planner of ``pddl_state`` (textworld's ``PddlState``) its optimized translation
    if it was deferred. fast-downward's library only stores that text on ``load_sas_replan`` and
    reads it on ``replan``, so handing it over now plans exactly as handing it over on load."""
    if isinstance(pddl_state.sas_replan, _DeferredPlannerTask):
        _, sas = _translated(pddl_state._logic.domain, pddl_state.pddl_problem, True)
        pddl_state.sas_replan = sas
        pddl_state.downward_lib.load_sas_replan(sas.encode("utf-8"))


# --------------------------------------------------------------------------------------------
# Installation


_REPLACEMENTS: list[tuple[Any, str, Any]] = []  # (owner, attribute, equivalent), built once


def _replacements(fast_downward: Any, pddl_logic: Any, textgen: Any, rule_cls: Any) -> list:
    if not _REPLACEMENTS:
        _TRANSLATE.append(fast_downward.pddl2sas)
        _REPLACEMENTS.extend(
            [
                (textgen, "_parse_and_convert", _symbol_parser(textgen)),
                (textgen, "copy_context", _copy_context),
                (rule_cls, "parse_conjunctive_query", _query_parser(rule_cls)),
                (pddl_logic, "GameLogic", _game_logic_factory(pddl_logic, textgen)),
                (fast_downward, "pddl2sas", _pddl2sas),
                (fast_downward, "load_lib", planner.session_library(fast_downward.load_lib)),
            ]
        )
    return _REPLACEMENTS


@contextlib.contextmanager
def installed(fast_downward: Any, pddl_logic: Any, textgen: Any, rule_cls: Any) -> Iterator[None]:
    """The equivalents above in place of the engine's own, for the duration of the block.

    The engine's modules look these functions up by name at call time (``pddl_logic.GameLogic``,
    ``fast_downward.pddl2sas``, ``fast_downward.load_lib``, ``textgen._parse_and_convert``,
    ``textgen.copy_context``, ``Rule.parse_conjunctive_query``); each is put back when the block
    ends.
    """
    replacements = _replacements(fast_downward, pddl_logic, textgen, rule_cls)
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in replacements]
    try:
        for owner, name, value in replacements:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)
