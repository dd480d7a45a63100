"""Fuzz-proof steps: 10,000 hostile ``str`` actions per environment.

No action string raises; every observation stays inside ``observation_space``; info keeps the
contract. ALFWorld's engine step costs ~65 ms, so its fuzz is a slow test.
"""

from __future__ import annotations

import importlib.util
import time

import pytest

from agentenvs.checker import check_fuzz, hostile_actions
from agentenvs.core import UnknownTaskError
from agentenvs.registration import make

N_ACTIONS = 10_000

# per environment: task ids to cycle through, templates filled with digit runs or garbage
CASES: dict[str, tuple[list[str], list[str]]] = {
    "TextCraft-v0": (
        ["adapt/0", "agentgym/3"],
        [
            "get {} quartz",
            "get {} oak logs",
            "craft {} stick using 2 oak planks",
            "craft 4 oak planks using {} oak logs",
            "craft 1 lever using 1 cobblestone, {} stick",
            "inventory{}",
        ],
    ),
    "BabyAI-Text-v0": (
        ["agentgym/1805", "agentgym/21"],
        [
            "pickup yellow ball {}",
            "go to red box {}",
            "toggle and go through blue closed door {}",
            "go through {} open door 1",
            "turn left{}",
            "check {}",
        ],
    ),
    "WebShop-v0": (
        ["synthetic/0", "synthetic/7"],
        ["search[{}]", "click[{}]", "click[b0{}]", "click[< prev]{}", "search[shoes {}]"],
    ),
    "Sokoban-v0": (["seed/65536", "seed/3"], ["{}", "up{}", "<answer>{}</answer>", "Left {}"]),
}

REQUIRES = {"BabyAI-Text-v0": "minigrid", "WebShop-v0": "jinja2"}


def _fuzz(env_id: str, task_ids: list[str], templates: list[str], seed: int) -> float:
    env = make(env_id)
    start = time.perf_counter()
    check_fuzz(env, task_ids, hostile_actions(seed, N_ACTIONS, templates))
    return time.perf_counter() - start


@pytest.mark.parametrize("env_id", sorted(CASES))
def test_ten_thousand_hostile_actions(env_id: str) -> None:
    module = REQUIRES.get(env_id)
    if module and importlib.util.find_spec(module) is None:
        pytest.skip(f"{env_id} needs {module}")
    task_ids, templates = CASES[env_id]
    seconds = _fuzz(env_id, task_ids, templates, seed=19)
    print(f"{env_id}: {N_ACTIONS} fuzzed actions in {seconds:.1f} s")


def test_generator_covers_the_issue_cases() -> None:
    actions = list(hostile_actions(19, N_ACTIONS, ["get {} quartz"]))
    assert len(actions) == N_ACTIONS
    assert any(a == "get " + "9" * 4301 + " quartz" for a in actions)
    assert sum(len(a) >= 100_000 for a in actions) == N_ACTIONS // 500
    assert any("\x00" in a for a in actions)
    assert any(any(0xD800 <= ord(c) <= 0xDFFF for c in a) for a in actions)  # lone surrogates
    assert any(len(a) > 100 and set(a) <= set("[]{}()<>\"'`") for a in actions)
    assert actions == list(hostile_actions(19, N_ACTIONS, ["get {} quartz"]))  # seeded


def test_textcraft_issue_cases() -> None:
    env = make("TextCraft-v0")
    env.reset(options={"task_id": "adapt/0"})
    obs, _, _, _, info = env.step("get " + "9" * 4301 + " quartz")  # past int()'s digit limit
    assert obs.startswith("Could not execute get 999") and not info["valid"]
    obs, _, _, _, info = env.step("get 12 quartz")  # normal actions keep the original's text
    assert obs == "Got 12 quartz" and info["valid"]
    long = "x" * 100_000
    obs, _, _, _, info = env.step(long)
    assert env.observation_space.contains(obs) and not info["valid"]
    assert obs.startswith("Could not execute xxx") and obs.endswith("[90000 more characters]")
    # a tag as the output (the original prints None for its item id)
    assert (
        env.step("craft 1 planks using 1 oak logs")[0]
        == "Could not find enough items to craft None"
    )
    action = "y" * env.max_action_length  # the longest action inside action_space: verbatim
    assert env.step(action)[0] == f"Could not execute {action}"


@pytest.mark.slow
def test_alfworld_ten_thousand_hostile_actions() -> None:
    if importlib.util.find_spec("alfworld") is None:
        pytest.skip("ALFWorld-v0 needs alfworld")
    env = make("ALFWorld-v0")
    task_ids = env.task_ids("valid_unseen")[:3]
    templates = ["go to cabinet {}", "take apple {} from countertop 1", "put {} in/on fridge 1"]
    check_fuzz(env, task_ids, hostile_actions(19, N_ACTIONS, templates, ["look", "inventory"]))


@pytest.mark.parametrize("env_id", sorted(CASES))
def test_hostile_task_ids_are_unknown_task_errors(env_id: str) -> None:
    module = REQUIRES.get(env_id)
    if module and importlib.util.find_spec(module) is None:
        pytest.skip(f"{env_id} needs {module}")
    env = make(env_id)
    prefix = CASES[env_id][0][0].split("/")[0]
    for key in ["9" * 5000, "²", "٣", "-1", " 1", "1\x00", "\ud800", ""]:
        with pytest.raises(UnknownTaskError, match="valid forms"):
            env.reset(options={"task_id": f"{prefix}/{key}"})
