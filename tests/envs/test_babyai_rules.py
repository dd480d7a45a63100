"""BabyAI-Text-v0's tasks, splits and levels, its rules (AgentGym's by default, fixed on request)
and outcomes, and the structured fields and matching of its observations."""

from __future__ import annotations

import collections

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

pytest.importorskip("minigrid")

import agentenvs  # noqa: E402
from agentenvs.babyai import LEVELS, BabyAITextEnv, parse_fields  # noqa: E402
from agentenvs.babyai.env import NOT_RECOGNIZED  # noqa: E402
from agentenvs.core import (  # noqa: E402
    MatchStatus,
    UnknownSplitError,
    UnknownTaskError,
)

ENV_ID = "BabyAI-Text-v0"


@pytest.fixture(scope="module")
def env() -> BabyAITextEnv:
    return BabyAITextEnv(max_turns=100)


# ----- tasks, splits, levels -------------------------------------------------------------------


def test_splits_and_families(env: BabyAITextEnv) -> None:
    test_ids = env.task_ids("test")
    assert len(test_ids) == 90 and len(env.task_ids("train")) == 810
    assert len(env.task_ids("all")) == 2000
    assert not set(test_ids) & set(env.task_ids("train"))
    counts = collections.Counter(env.family(t) for t in test_ids)
    assert counts == {"GoTo": 55, "Pickup": 15, "AOD": 5, "Find Room": 10, "SLoc": 5}
    assert env.level("agentgym/1835") == "BabyAI-SynthLoc-v0"  # level 36, seed 45
    assert env.family("agentgym/3") == "GoTo" and env.level("agentgym/3") == "BabyAI-GoToObjS6-v0"
    with pytest.raises(UnknownSplitError, match="valid splits"):
        env.task_ids("valid")
    for bad in ("agentgym/-1", "agentgym/01", "babyai/3", "agentgym/x", ""):
        with pytest.raises(UnknownTaskError, match="agentgym/<n>"):
            env.reset(options={"task_id": bad})


def test_level_table_ids_exist_in_minigrid() -> None:
    import minigrid  # noqa: F401

    assert len(LEVELS) == 40 and [lv.number for lv in LEVELS] == list(range(1, 41))
    for level in LEVELS:
        assert level.minigrid_id in gym.registry, level
    renamed = [lv for lv in LEVELS if lv.name != lv.minigrid_id]
    # minigrid 2.x (AgentGym's) registered GoToObjS6-v0 with room_size 4: GoToObjS4-v0's level
    assert [(lv.name, lv.minigrid_id) for lv in renamed] == [
        ("BabyAI-GoToObjS6-v0", "BabyAI-GoToObjS4-v0")
    ]
    env = BabyAITextEnv()
    env.reset(options={"task_id": "agentgym/1803"})
    assert (env.minigrid.width, env.minigrid.height, env.minigrid.max_steps) == (4, 4, 16)


def test_registered_and_check_env() -> None:
    env = agentenvs.make(ENV_ID)
    assert isinstance(env, BabyAITextEnv) and env.max_turns == 20
    check_env(env, skip_render_check=True)
    assert BabyAITextEnv(max_turns=30).max_turns == 30


# ----- rules (agentgym by default, fixed on request) and outcomes -------------------------------


def test_rules_default_and_variant() -> None:
    assert BabyAITextEnv().rules == "agentgym" and agentenvs.make(ENV_ID).rules == "agentgym"
    assert BabyAITextEnv().variant == {"rules": "agentgym"}
    assert BabyAITextEnv(rules="fixed").variant == {"rules": "fixed"}
    with pytest.raises(ValueError, match="rules must be one of"):
        BabyAITextEnv(rules="agentboard")  # type: ignore[arg-type]


def test_verifier_success_with_zero_reward_is_won_under_fixed_rules() -> None:
    # agentgym/21 (PutNextLocalS6N4, max_steps 72): the drop completes the mission on
    # primitive 80, where minigrid's 1 - 0.9 * 80 / 72 is exactly 0.0; the
    # verifier says success, so it is won (the original, rules="agentgym", needs reward > 0.5)
    env = BabyAITextEnv(max_turns=300, rules="fixed")
    env.reset(options={"task_id": "agentgym/21"})
    actions = ["turn left"] * 75 + ["pickup yellow ball 1", "move forward", "drop"]
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        if terminated:
            break
    assert terminated and reward == 0.0
    assert info["won"] and obs.split("\nAvailable")[0].endswith("\n The task is completed.")
    assert env.minigrid.step_count == 80 and env.minigrid.max_steps == 72


def test_late_success_is_discarded_only_in_parity_mode() -> None:
    # GoToLocalS8N7 gives 64 primitive steps; after 36 turns a success earns 1 - 0.9 * 38/64
    # = 0.466, which the original does not count
    actions = ["turn left", "turn right"] * 18 + ["go to red box 1"]
    default = BabyAITextEnv(max_turns=100, rules="fixed").replay("agentgym/1804", actions)
    last = default.steps[-1]
    assert last.terminated and last.info["won"] and last.reward == pytest.approx(1 - 0.9 * 38 / 64)
    parity_env = BabyAITextEnv(max_turns=100)
    parity = parity_env.replay("agentgym/1804", actions)
    last = parity.steps[-1]
    assert not last.terminated and not last.info["won"]
    assert last.observation.split("\nAvailable")[0].endswith("\n The task is completed.")
    assert not parity_env.done  # the original lets the episode go on


def test_winning_toggle_ends_the_action_unless_parity() -> None:
    # agentgym/12: OpenRedDoor, seed 0, "open the red door"; the original walks on through the
    # door after the winning toggle, and minigrid's verifier then no longer reports success
    action = "toggle and go through red closed door 1"
    default = BabyAITextEnv(rules="fixed")
    default.reset(options={"task_id": "agentgym/12"})
    _, reward, terminated, _, info = default.step(action)
    assert terminated and info["won"] and reward > 0.5
    assert default.minigrid.grid.get(*default.minigrid.front_pos).type == "door"  # did not walk
    parity = BabyAITextEnv()
    parity.reset(options={"task_id": "agentgym/12"})
    _, reward, terminated, _, info = parity.step(action)
    assert not terminated and not info["won"] and reward == 0.0


# ----- fields and match ------------------------------------------------------------------------


def test_fields_and_match(env: BabyAITextEnv) -> None:
    obs, info = env.reset(options={"task_id": "agentgym/1804"})
    fields = info["fields"]
    assert fields["goal"] == "go to a red box"
    assert fields["objects"][:3] == [
        ["purple key", 1, 2, 0],
        ["red box", 1, 1, 1],
        ["red ball", 1, 0, -2],
    ]
    assert fields["facing"] == ["box", 4] and fields["carrying"] is None
    assert fields["message"] is None and not fields["completed"]
    assert fields["available_actions"] == info["admissible_actions"]
    assert env.match(obs, "  " + obs.replace(".  ", ". ")).status is MatchStatus.MATCH
    assert env.fields(obs) == parse_fields(obs) == parse_fields(obs + "\n")
    after, *_, step_info = env.step("pickup purple key 1")
    assert step_info["fields"]["carrying"] == "purple key" and step_info["fields"]["goal"] is None
    result = env.match(obs, after)
    assert result.status is MatchStatus.MISMATCH and {"goal", "carrying"} <= set(result.differing)
    error, *_ = env.step("fly")
    assert env.fields(error)["message"] == NOT_RECOGNIZED
    assert env.match(after, error).status is MatchStatus.MISMATCH
    assert env.match(obs, "hello").status is MatchStatus.UNVERIFIABLE  # not an observation


def test_fields_from_the_view_equal_parsed_fields() -> None:
    """The environment builds each observation's fields from its view; they must be what
    parsing the text gives, on every kind of observation."""
    import random

    env = BabyAITextEnv(max_turns=40)
    rng = random.Random(3)
    for task_id in ["agentgym/1805", "agentgym/194", "agentgym/1830", "agentgym/1992"]:
        obs, info = env.reset(options={"task_id": task_id})
        assert info["fields"] == parse_fields(obs)
        while not env.done:
            choices = info["admissible_actions"] + ["fly", "", "drop", "go through red door 9"]
            obs, _, _, _, info = env.step(rng.choice(choices))
            assert info["fields"] == parse_fields(obs), obs
