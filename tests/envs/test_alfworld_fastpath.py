"""The ALFWorld fast path's parts (:mod:`agentenvs.alfworld.fastpath`) against the engine's own.

The whole-split proof is ``test_alfworld_differential.py`` (slow); these check each replacement
directly and quickly, in this process, against the unpatched textworld functions.
"""

from __future__ import annotations

import json
import sys

import pytest

pytest.importorskip("alfworld", reason="ALFWorld-v0 needs the alfworld extra (make install)")
pytest.importorskip("textworld")

import fast_downward  # noqa: E402
from textworld.envs.pddl import logic as pddl_logic  # noqa: E402
from textworld.envs.pddl import textgen  # noqa: E402
from textworld.logic import Rule  # noqa: E402

from agentenvs.alfworld import ALFWorldEnv, data, fastpath, versions  # noqa: E402

TASK = "agentgym/2420"  # pick_cool_then_place_in_recep-Mug-None-CoffeeMachine-23
OTHER = "agentgym/2500"


def _game(task_id: str, version: str = "alfworld-0.4") -> dict:
    env = ALFWorldEnv()
    with open(data.resolve_game_file(env.game(task_id)), encoding="utf-8") as f:
        game = json.load(f)
    env.close()
    return versions.to_agentgym(game) if version == "agentgym" else game


def _installed():
    return fastpath.installed(fast_downward, pddl_logic, textgen, Rule)


def _grammar_view(grammar) -> dict:
    return {
        lhs: [(repr(r.rhs), r.weight, r.condition) for r in rules]
        for lhs, rules in grammar._rules.items()
    }


def _logic_view(logic) -> tuple:
    actions = {
        name: (a.name, a.template, a.feedback_rule, a.pddl, a.grammar)
        for name, a in logic.actions.items()
    }
    return logic.domain, actions, _grammar_view(logic.grammar)


@pytest.mark.parametrize("version", ["alfworld-0.4", "agentgym"])
def test_game_logic_from_the_grammar_form_is_the_engines(version):
    fastpath.clear()
    for task_id in (TASK, OTHER):  # the second game reuses the first one's parsed form
        game = _game(task_id, version)
        original = pddl_logic.GameLogic(domain=game["pddl_domain"], grammar=game["grammar"])
        with _installed():
            fast = pddl_logic.GameLogic(domain=game["pddl_domain"], grammar=game["grammar"])
        assert _logic_view(fast) == _logic_view(original)
        task = "Your task is to: " + versions.task_of(game["grammar"])
        assert fast.grammar._rules["task"][0].rhs[0].symbol == task


def test_a_grammar_without_one_task_sentence_is_parsed_as_it_is():
    game = _game(TASK)
    grammar = game["grammar"].replace('"rhs": "Your task is to: ', '"rhs": "Do this: ')
    with _installed():
        fast = pddl_logic.GameLogic(domain=game["pddl_domain"], grammar=grammar)
    original = pddl_logic.GameLogic(domain=game["pddl_domain"], grammar=grammar)
    assert _logic_view(fast) == _logic_view(original)


def test_remembered_parses_are_fresh_copies():
    template = "You are carrying: [{o.indefinite + ' ' + o.name | holds(a:agent, o:object)}]."
    with _installed():
        first = textgen._parse_and_convert(template, rule_name="symbols")
        second = textgen._parse_and_convert(template, rule_name="symbols")
        query = Rule.parse_conjunctive_query("openable(r:receptacle) & opened(r:receptacle)")
    original = textgen._parse_and_convert(template, rule_name="symbols")
    assert repr(first) == repr(second) == repr(original)
    assert first[1] is not second[1] and first[1].symbol is not second[1].symbol
    assert str(query) == str(
        Rule.parse_conjunctive_query("openable(r:receptacle) & opened(r:receptacle)")
    )


def test_every_replacement_is_undone_after_each_engine_call(tmp_path, monkeypatch):
    """Outside an engine call the engine's modules are untouched; inside one, fast-downward's
    rewrites of ``sys.argv`` and ``sys.stdout`` are undone and nothing lands in the cwd."""
    originals = (
        pddl_logic.GameLogic,
        fast_downward.pddl2sas,
        textgen._parse_and_convert,
        textgen.copy_context,
        Rule.__dict__["parse_conjunctive_query"],
    )
    monkeypatch.chdir(tmp_path)
    argv, stdout = sys.argv, sys.stdout
    env = ALFWorldEnv()
    env.reset(options={"task_id": TASK})
    env.step("go to countertop 1")
    env.step("jump")
    assert env.plan()
    env.restore(env.snapshot())
    env.close()
    assert (sys.argv, sys.stdout) == (argv, stdout) and sys.argv is argv
    assert list(tmp_path.iterdir()) == []
    assert originals == (
        pddl_logic.GameLogic,
        fast_downward.pddl2sas,
        textgen._parse_and_convert,
        textgen.copy_context,
        Rule.__dict__["parse_conjunctive_query"],
    )


def test_same_text_as_the_engine_without_the_fast_path():
    """A short mixed walk, in this process: the engine as installed against the fast path."""
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    from textworld.envs.pddl import PddlEnv

    from agentenvs.alfworld.engine import Engine

    path = str(data.resolve_game_file(ALFWorldEnv().game(TASK)))
    fast = Engine()
    fast.load(path)
    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    raw = AlfredInfos(AlfredDemangler(PddlEnv(infos), shuffle=False))
    raw.load(path)
    state = raw.reset()
    assert fast.reset() == state.feedback
    commands = [*fast.walkthrough[:3], "jump", "inventory", "examine countertop 1", "look"]
    for command in [*commands, *fast.walkthrough[3:]]:
        feedback, _ = fast.step(command)
        state, score, _ = raw.step(command)
        assert (feedback, fast.admissible_commands, fast.won) == (
            state.feedback,
            state["admissible_commands"],
            state["won"],
        ), command
    assert fast.won
    fast.close()


def test_engines_in_threads_say_what_they_say_alone():
    """Engine calls take turns (the translator's options, the fast path's replacements and the
    derivation memo's path are process-wide): two environments stepped from two threads at once
    see exactly what each sees alone."""
    import random
    import threading

    from agentenvs.alfworld.restore import MEMO

    def walk(task_id: str, seed: int, out: list) -> None:
        env = ALFWorldEnv(max_turns=10**6)
        rng = random.Random(seed)
        obs, info = env.reset(options={"task_id": task_id})
        out.append((obs, info["admissible_actions"]))
        for _ in range(8):
            obs, _, _, _, info = env.step(rng.choice(info["admissible_actions"]))
            out.append((obs, info["admissible_actions"]))
        env.close()

    alone: list[list] = [[], []]
    for k, task_id in enumerate((TASK, OTHER)):
        walk(task_id, k, alone[k])
    MEMO.clear()
    fastpath.clear()
    together: list[list] = [[], []]
    threads = [
        threading.Thread(target=walk, args=(task_id, k, together[k]))
        for k, task_id in enumerate((TASK, OTHER))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert together == alone


def test_the_planners_translation_is_made_when_a_plan_is_asked_for():
    """A new game's load translates its PDDL once; the planner's (optimized) translation waits
    for the first plan, which is then the engine's own plan from the same state."""
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    from textworld.envs.pddl import PddlEnv

    fastpath.clear()
    env = ALFWorldEnv()
    env.reset(options={"task_id": TASK})
    assert len(fastpath._SAS) == 1
    commands = ["go to countertop 1", "go to fridge 1", "open fridge 1"]
    for command in commands:
        env.step(command)
    plan = env.plan()
    assert len(fastpath._SAS) == 2

    argv = sys.argv
    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    pddl = PddlEnv(infos)
    raw = AlfredInfos(AlfredDemangler(pddl, shuffle=False))
    raw.load(str(data.resolve_game_file(env.game(TASK))))
    raw.reset()
    for command in commands:
        raw.step(command)
    assert plan == pddl._pddl_state.replan(pddl._entity_infos)
    sys.argv = argv  # the unwrapped engine's translator rewrote it
    env.close()
