"""ALFWorld-v0's two game versions: ``alfworld-0.4`` (default) and ``agentgym`` (alfworld 0.3.3).

The reference for ``agentgym`` is built independently of :func:`versions.to_agentgym`: the raw
engine (textworld's PDDL env with alfworld's ``AlfredDemangler``/``AlfredInfos``) loaded with
alfworld 0.3.3's packaged ``alfred.twl2`` (the game's task sentence filled in) and ``alfred.pddl``
over the game's own problem, its step feedback after AgentGym's ``process_ob`` rule ("drop a
leading ``You arrive at loc N.``"). Whole splits are marked slow.
"""

from __future__ import annotations

import json
import pickle
import random
import re
from collections import Counter
from dataclasses import replace

import gymnasium as gym
import pytest

pytest.importorskip("alfworld", reason="ALFWorld-v0 needs the alfworld extra (make install)")
pytest.importorskip("textworld")

import agentenvs  # noqa: E402, F401  (registers the ids)
from agentenvs.alfworld import ALFWorldEnv, data, versions  # noqa: E402
from agentenvs.alfworld.expert import ALFWorldExpert, thought_for  # noqa: E402
from agentenvs.alfworld.observation import parse_fields  # noqa: E402
from agentenvs.core import SnapshotError  # noqa: E402

# A task whose walkthrough the two versions take differently (valid_unseen): heat a potato, put
# it in the garbage can.
HEAT_TASK = (
    "alfworld/valid_unseen/pick_heat_then_place_in_recep-Potato-None-GarbageCan-10/"
    "trial_T20190907_161745_664033"
)
HEAT_WALK_PUT = [
    "go to coffeemachine 1",
    "take potato 1 from countertop 1",
    "go to microwave 1",
    "heat potato 1 with microwave 1",
    "go to garbagecan 1",
    "put potato 1 in/on garbagecan 1",
]
LOOK_TASK = (
    "alfworld/valid_unseen/look_at_obj_in_light-AlarmClock-None-DeskLamp-308/"
    "trial_T20190908_222917_366542"
)
CLEAN_TASK = (
    "alfworld/valid_seen/pick_clean_then_place_in_recep-SoapBar-None-Toilet-428/"
    "trial_T20190907_041436_588106"
)
TWO_TASK = "agentgym/2421"


@pytest.fixture(scope="module")
def agentgym():
    e = ALFWorldEnv(game_version="agentgym")
    yield e
    e.close()


@pytest.fixture(scope="module")
def alf04():
    e = ALFWorldEnv(game_version="alfworld-0.4")
    yield e
    e.close()


def game_file(env: ALFWorldEnv, task_id: str) -> str:
    return str(data.resolve_game_file(env.game(task_id)))


def agentgym_rule(feedback: str) -> str:
    """AgentGym's process_ob, restated: a leading 'You arrive at loc N. ' is dropped."""
    return re.sub(r"^You arrive at loc \d+\. ", "", feedback)


class Reference033:
    """The raw engine with alfworld 0.3.3's packaged grammar and domain over a game's problem."""

    def __init__(self) -> None:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
        from textworld.envs.pddl import PddlEnv

        infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
        self.env = AlfredInfos(AlfredDemangler(PddlEnv(infos), shuffle=False))
        self.grammar, self.domain = versions.alfworld_033_logic()

    def reset(self, path: str) -> tuple[str, list[str]]:
        with open(path) as f:
            game = json.load(f)
        task = versions.task_of(game["grammar"])
        self.env.load(
            {
                "grammar": versions.with_task(self.grammar, task),
                "pddl_domain": self.domain,
                "pddl_problem": game["pddl_problem"],
            }
        )
        state = self.env.reset()
        return "\n".join(state.feedback.split("\n\n")[1:]), state["admissible_commands"]

    def step(self, action: str) -> tuple[str, float, list[str]]:
        state, _, _ = self.env.step(action)
        return agentgym_rule(state.feedback), float(state["won"]), state["admissible_commands"]


@pytest.fixture(scope="module")
def reference():
    return Reference033()


def play_expert(env: ALFWorldEnv, task_id: str) -> list[tuple[str, str]]:
    expert = ALFWorldExpert()
    env.reset(options={"task_id": task_id})
    decisions = []
    while not env.done:
        decision = expert.act(env)
        decisions.append((decision.action, decision.thought))
        env.step(decision.action)
    return decisions


# --------------------------------------------------------------------------------------------
# Construction, variant, errors


def test_default_is_alfworld_04_and_variant_names_the_version():
    default = gym.make("ALFWorld-v0").unwrapped
    assert default.game_version == "alfworld-0.4" == versions.DEFAULT_GAME_VERSION
    assert default.variant == {"game_version": "alfworld-0.4"}
    other = gym.make("ALFWorld-v0", game_version="agentgym").unwrapped
    assert other.variant == {"game_version": "agentgym"}
    assert versions.GAME_VERSIONS == ("alfworld-0.4", "agentgym")


@pytest.mark.parametrize("bad", ["0.3.3", "AgentGym", "", None, 4])
def test_unknown_game_version_lists_the_valid_names(bad):
    with pytest.raises(versions.UnknownGameVersionError, match="alfworld-0.4.*agentgym") as err:
        gym.make("ALFWorld-v0", game_version=bad)
    assert isinstance(err.value, ValueError)


# --------------------------------------------------------------------------------------------
# The game files: what the AgentGym version is made of


def _shipped_games() -> list[str]:
    env = ALFWorldEnv()
    splits = ("valid_seen", "valid_unseen", "test")
    files = sorted({game_file(env, t) for s in splits for t in env.task_ids(s)})
    assert len(files) == 474
    return files


def test_reverted_games_are_alfworld_033s():
    """Every shipped evaluation game, patch undone: 0.3.3's grammar exactly; the domain is the
    game file's own without ``help``, which differs from 0.3.3's packaged copy in one line."""
    grammar_033, domain_033 = versions.alfworld_033_logic()
    domains = Counter()
    for path in _shipped_games():
        with open(path) as f:
            game = json.load(f)
        old = versions.to_agentgym(game)
        task = versions.task_of(game["grammar"])
        assert old["grammar"] == versions.with_task(grammar_033, task), path
        assert "help" not in old["grammar"] and "(:action help" not in old["pddl_domain"]
        assert old["pddl_problem"] == game["pddl_problem"]
        assert versions.to_agentgym(old) == old  # a game already in the 0.2.2 form stays as is
        assert [c.split()[0] for c in old["walkthrough"]] == [
            "put" if c.startswith("move ") else c.split()[0] for c in game["walkthrough"]
        ]
        domains[old["pddl_domain"]] += 1
        assert not re.search(r"receptacleType \S+ SinkType\)", game["pddl_problem"])
    assert len(domains) == 1
    (domain,) = domains
    sink = "                (receptacleType ?r SinkType)\n"
    assert sink in domain
    assert domain.replace(sink, sink.replace("(", ";(", 1)) == domain_033


def test_to_agentgym_rejects_other_files():
    with pytest.raises(ValueError, match="not an ALFWorld game file"):
        versions.to_agentgym({"grammar": "action look {}", "pddl_domain": "(define)"})
    with open(game_file(ALFWorldEnv(), HEAT_TASK)) as f:
        game = json.load(f)
    game["pddl_domain"] = game["pddl_domain"].replace("(:action help", "(:action helper")
    with pytest.raises(ValueError, match="patch_tw-pddl"):
        versions.to_agentgym(game)


def test_agentgym_process_ob():
    ob = "You arrive at loc 12. On the coffeemachine 1, you see nothing."
    assert versions.agentgym_process_ob(ob) == "On the coffeemachine 1, you see nothing."
    kept = "You arrive at desk 2. On the desk 2, you see nothing."
    assert versions.agentgym_process_ob(kept) == kept
    assert versions.agentgym_process_ob("Nothing happens.") == "Nothing happens."


# --------------------------------------------------------------------------------------------
# Playing: the heat-a-potato task, the differential check, the expert


def test_the_issues_example(agentgym, alf04):
    """The walkthrough phrased with ``put`` wins under agentgym and loses under 0.4."""
    result = agentgym.replay(HEAT_TASK, HEAT_WALK_PUT)
    assert agentgym.won and result.steps[-1].reward == 1.0 and result.steps[-1].terminated
    assert result.steps[-1].observation == "You put the potato 1 in/on the garbagecan 1."
    assert result.steps[0].observation == "On the coffeemachine 1, you see nothing."
    result = alf04.replay(HEAT_TASK, HEAT_WALK_PUT)
    assert not alf04.won and result.steps[-1].observation == "Nothing happens."
    assert not result.steps[-1].info["valid"]
    moved = [c.replace("put potato 1 in/on", "move potato 1 to") for c in HEAT_WALK_PUT]
    assert alf04.replay(HEAT_TASK, moved).steps[-1].reward == 1.0
    assert agentgym.replay(HEAT_TASK, moved).steps[-1].observation == "Nothing happens."


def test_commands_only_one_version_has(agentgym, alf04):
    for env, help_valid in ((agentgym, False), (alf04, True)):
        env.reset(options={"task_id": LOOK_TASK})
        assert ("help" in env.admissible_actions()) is help_valid
        assert env.step("help")[4]["valid"] is help_valid
        env.step("go to desk 1")
        obs, _, _, _, info = env.step("toggle desklamp 1")  # neither grammar has toggle
        assert (obs, info["valid"]) == ("Nothing happens.", False)
        assert info["fields"] == {}


def _seeded_walk(env: ALFWorldEnv, task_id: str, seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    env.reset(options={"task_id": task_id})
    actions = []
    for i in range(n):
        a = rng.choice(["jump", "put it down", "help", ""]) if i % 5 == 4 else None
        a = a if a is not None else rng.choice(env.admissible_actions())
        actions.append(a)
        env.step(a)
        if env.done:
            break
    return actions


@pytest.mark.parametrize("task_id", [HEAT_TASK, CLEAN_TASK])
def test_agentgym_equals_the_raw_engine_with_033_logic(agentgym, reference, task_id):
    walk = _seeded_walk(agentgym, task_id, seed=11, n=14)
    for actions in (walk, agentgym.walkthrough):
        obs, info = agentgym.reset(options={"task_id": task_id})
        assert (obs, info["admissible_actions"]) == reference.reset(game_file(agentgym, task_id))
        for action in actions:
            obs, reward, term, _, info = agentgym.step(action)
            assert (obs, reward, info["admissible_actions"]) == reference.step(action), action
            if term:
                break
    assert info["won"] and term


@pytest.mark.parametrize("task_id", [HEAT_TASK, LOOK_TASK, TWO_TASK])
def test_expert_solves_both_versions_in_their_own_verbs(agentgym, alf04, task_id):
    for env, put, other in ((agentgym, "put ", "move "), (alf04, "move ", "put ")):
        decisions = play_expert(env, task_id)
        assert env.won, (env.game_version, task_id)
        assert len(decisions) == len(env.walkthrough)
        actions = " | ".join(a for a, _ in decisions)
        thoughts = " | ".join(t for _, t in decisions)
        assert other not in actions and f"I {other}" not in thoughts
        if task_id != LOOK_TASK:
            assert put in actions and f"I {put}" in thoughts
        else:
            assert "| use desklamp " in actions and "I use the desklamp " in thoughts


def test_thoughts_name_the_commands_verb():
    assert thought_for("move mug 1 to shelf 1") == "I move the mug 1 to the shelf 1."
    assert thought_for("put mug 1 in/on shelf 1") == "I put the mug 1 in/on the shelf 1."
    assert thought_for("use desklamp 1") == "I use the desklamp 1 to turn it on."


def test_expert_repairs_a_detour_with_the_versions_put(agentgym):
    """Holding the right object elsewhere: the repaired walkthrough puts it back with ``put``."""
    agentgym.reset(options={"task_id": LOOK_TASK})
    for action in [
        "go to drawer 1",
        "open drawer 1",
        "go to desk 2",
        "take alarmclock 1 from desk 2",
    ]:
        assert agentgym.step(action)[4]["valid"]
    snap = agentgym.snapshot()
    fresh = ALFWorldEnv(game_version="agentgym")
    fresh.restore(snap)
    expert = ALFWorldExpert()
    while not fresh.done:
        fresh.step(expert.act(fresh).action)
    assert fresh.won and expert.replans == 0
    fresh.close()


def test_fields_of_agentgym_observations():
    assert parse_fields("You put the mug 2 in/on the shelf 1.") == {"inventory": []}
    assert parse_fields("On the desk 2, you see a mug 1.") == {"seen": ["mug 1"]}
    assert parse_fields("The fridge 1 is closed.") == {"states": {"fridge 1": ["closed"]}}


# --------------------------------------------------------------------------------------------
# Snapshots


def test_snapshot_restores_only_into_the_same_version(agentgym, alf04):
    agentgym.replay(HEAT_TASK, HEAT_WALK_PUT[:3])
    snap = agentgym.snapshot()
    with pytest.raises(SnapshotError, match="game_version='agentgym'"):
        alf04.restore(snap)
    fresh = ALFWorldEnv(game_version="agentgym")
    obs, info = fresh.restore(snap)
    assert obs == "The microwave 1 is closed." and info["turn"] == 3
    assert fresh.step(HEAT_WALK_PUT[3])[0] == agentgym.step(HEAT_WALK_PUT[3])[0]
    fresh.close()
    alf04.replay(HEAT_TASK, ["go to coffeemachine 1"])
    with pytest.raises(SnapshotError, match="game_version='alfworld-0.4'"):
        agentgym.restore(alf04.snapshot())


def test_a_snapshot_from_before_game_versions_is_an_alfworld_04_one(alf04, agentgym):
    alf04.replay(HEAT_TASK, HEAT_WALK_PUT[:2])
    snap = alf04.snapshot()
    episode, (version, actions) = pickle.loads(snap.state)
    assert version == "alfworld-0.4"
    legacy = replace(snap, state=pickle.dumps((episode, actions)))  # the old form: commands only
    fresh = ALFWorldEnv()
    assert fresh.restore(legacy)[0] == alf04.observation
    fresh.close()
    with pytest.raises(SnapshotError, match="game_version='alfworld-0.4'"):
        agentgym.restore(legacy)


# --------------------------------------------------------------------------------------------
# Whole splits (slow)


@pytest.mark.slow
@pytest.mark.timeout(7200)
@pytest.mark.parametrize("split", ["valid_unseen", "valid_seen", "test"])
@pytest.mark.parametrize("version", versions.GAME_VERSIONS)
def test_expert_wins_every_game_of_the_split(split, version):
    env = ALFWorldEnv(game_version=version)
    lost = []
    for task_id in env.task_ids(split):
        play_expert(env, task_id)
        if not env.won:
            lost.append(task_id)
    env.close()
    assert lost == [], f"{len(lost)} of {len(env.task_ids(split))} lost: {lost[:5]}"


@pytest.mark.slow
@pytest.mark.timeout(7200)
@pytest.mark.parametrize("split", ["valid_unseen", "test"])
def test_agentgym_equals_the_raw_033_engine_whole_split(split):
    """Every game: first observation, admissible commands and every walkthrough step's text."""
    env, ref = ALFWorldEnv(game_version="agentgym"), Reference033()
    for task_id in env.task_ids(split):
        obs, info = env.reset(options={"task_id": task_id})
        assert (obs, info["admissible_actions"]) == ref.reset(game_file(env, task_id)), task_id
        for action in env.walkthrough:
            obs, reward, _, _, info = env.step(action)
            assert (obs, reward, info["admissible_actions"]) == ref.step(action), task_id
        assert info["won"], task_id
    env.close()
