"""ALFWorld-v0 on a hand-written game (a tiny PDDL problem and its walkthrough standing in for a
training game): exact text, the expert and planner, Gymnasium's env checker on that split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("alfworld", reason="ALFWorld-v0 needs the alfworld extra (make install)")
pytest.importorskip("textworld")

from gymnasium.utils.env_checker import check_env  # noqa: E402

from agentenvs.alfworld import ALFWorldEnv, data  # noqa: E402
from agentenvs.alfworld.expert import ALFWorldExpert  # noqa: E402

_INDEX = data.games_index()


TINY_KEY = data.games_index()["train"][0]  # a hand-made game stands in for this training game
TINY_PROBLEM = """
(define (problem tiny_kitchen)
(:domain alfred)
(:objects
agent1 - agent
AppleType - otype
KnifeType - otype
ButterKnifeType - otype
CounterTopType - rtype
DiningTableType - rtype
FridgeType - rtype
MicrowaveType - rtype
SinkBasinType - rtype
SinkType - rtype
Apple_bar__plus_00_dot_10 - object
CounterTop_bar__plus_01_dot_00 - receptacle
DiningTable_bar__plus_02_dot_00 - receptacle
Fridge_bar__plus_03_dot_00 - receptacle
loc_bar_0 - location
loc_bar_1 - location
loc_bar_2 - location
loc_bar_3 - location
)
(:init
(atLocation agent1 loc_bar_0)
(receptacleAtLocation CounterTop_bar__plus_01_dot_00 loc_bar_1)
(receptacleAtLocation DiningTable_bar__plus_02_dot_00 loc_bar_2)
(receptacleAtLocation Fridge_bar__plus_03_dot_00 loc_bar_3)
(receptacleType CounterTop_bar__plus_01_dot_00 CounterTopType)
(receptacleType DiningTable_bar__plus_02_dot_00 DiningTableType)
(receptacleType Fridge_bar__plus_03_dot_00 FridgeType)
(openable Fridge_bar__plus_03_dot_00)
(objectType Apple_bar__plus_00_dot_10 AppleType)
(pickupable Apple_bar__plus_00_dot_10)
(coolable Apple_bar__plus_00_dot_10)
(inReceptacle Apple_bar__plus_00_dot_10 CounterTop_bar__plus_01_dot_00)
(objectAtLocation Apple_bar__plus_00_dot_10 loc_bar_1)
(canContain CounterTopType AppleType)
(canContain DiningTableType AppleType)
(canContain FridgeType AppleType)
)
(:goal (and (exists (?r - receptacle) (exists (?o - object) (and
    (objectType ?o AppleType) (receptacleType ?r DiningTableType) (isCool ?o) (inReceptacle ?o ?r)
)))))
)
"""
TINY_WALKTHROUGH = [
    "go to countertop 1",
    "take apple 1 from countertop 1",
    "go to fridge 1",
    "cool apple 1 with fridge 1",
    "go to diningtable 1",
    "move apple 1 to diningtable 1",
]


@pytest.fixture(scope="module")
def tiny_data_dir(tmp_path_factory):
    """An $ALFWORLD_DATA holding one hand-written game, built from alfworld's packaged files."""
    import alfworld.info

    grammar = Path(alfworld.info.ALFRED_TWL2_PATH).read_text()
    game = {
        "pddl_domain": Path(alfworld.info.ALFRED_PDDL_PATH).read_text(),
        "grammar": grammar.replace("UNKNOWN GOAL", "cool some apple and put it in diningtable"),
        "pddl_problem": TINY_PROBLEM,
        "solvable": True,
        "walkthrough": TINY_WALKTHROUGH,
    }
    root = tmp_path_factory.mktemp("alfworld_data")
    path = root / data.GameRef("train", TINY_KEY).relative_path()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(game))
    return root


def test_tiny_game_text(tiny_data_dir):
    env = ALFWorldEnv(data_dir=tiny_data_dir)
    obs, info = env.reset(options={"task_id": f"alfworld/train/{TINY_KEY}"})
    assert obs == (
        "You are in the middle of a room. Looking quickly around you, you see a countertop 1, a "
        "diningtable 1, and a fridge 1.\n"
        "Your task is to: cool some apple and put it in diningtable."
    )
    assert info["admissible_actions"] == [
        "go to countertop 1",
        "go to diningtable 1",
        "go to fridge 1",
        "help",
        "inventory",
        "look",
    ]
    assert info["fields"]["seen"] == ["countertop 1", "diningtable 1", "fridge 1"]
    script = [
        ("go to fridge 1", "You arrive at fridge 1. The fridge 1 is closed.", True),
        ("take apple 1 from fridge 1", "Nothing happens.", False),
        (
            "open fridge 1",
            "You open the fridge 1. The fridge 1 is open. In it, you see nothing.",
            True,
        ),
        ("look", "You are facing the fridge 1. Next to it, you see nothing.", True),
        (
            "go to countertop 1",
            "You arrive at countertop 1. On the countertop 1, you see a apple 1.",
            True,
        ),
        ("take apple 1 from countertop 1", "You pick up the apple 1 from the countertop 1.", True),
        ("inventory", "You are carrying: a apple 1.", True),
        ("examine apple 1", "There's nothing special about apple 1.", True),
        (
            "go to fridge 1",
            "You arrive at fridge 1. The fridge 1 is open. In it, you see nothing.",
            True,
        ),
        ("cool apple 1 with fridge 1", "You cool the apple 1 using the fridge 1.", True),
        ("examine apple 1", "This is a cold apple 1.", True),
        ("close fridge 1", "You close the fridge 1.", True),
        (
            "go to diningtable 1",
            "You arrive at diningtable 1. On the diningtable 1, you see nothing.",
            True,
        ),
        ("move apple 1 to diningtable 1", "You move the apple 1 to the diningtable 1.", True),
    ]
    for action, text, valid in script:
        obs, reward, term, _, info = env.step(action)
        assert (obs, info["valid"]) == (text, valid), action
    assert term and reward == 1.0 and info["won"] and info["turn"] == len(script)
    env.close()


def test_tiny_game_expert_and_planner(tiny_data_dir):
    env = ALFWorldEnv(data_dir=tiny_data_dir, reward_scale=10.0)
    expert = ALFWorldExpert()
    env.reset(options={"task_id": f"alfworld/train/{TINY_KEY}"})
    assert env.walkthrough == TINY_WALKTHROUGH and env.plan() == TINY_WALKTHROUGH
    env.step("go to diningtable 1")  # off the walkthrough: the expert must replan
    env.step("look")
    rewards = []
    while not env.done:
        rewards.append(env.step(expert.act(env).action)[1])
    assert env.won and rewards[-1] == 10.0 and (expert.repairs, expert.replans) == (1, 0)
    env.close()


def test_check_env_on_the_tiny_training_split(tiny_data_dir, monkeypatch):
    monkeypatch.setattr(data, "games_index", lambda: {**_INDEX, "train": (TINY_KEY,)})
    env = ALFWorldEnv(data_dir=tiny_data_dir)
    check_env(env, skip_render_check=True)
    env.close()


_INDEX = data.games_index()
