"""TextCraft-v0: conformance with ADaPT/AgentGym, the bug fixes, the expert, the contract."""

from __future__ import annotations

import collections
import json
import os
import pickle
import random
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import agentenvs
from agentenvs.checker import (
    check_contract,
    check_info,
    check_replay,
    check_snapshot_roundtrip,
    fuzz_actions,
    rollout_in_subprocess,
)
from agentenvs.core import EpisodeOverError, MatchStatus, ResetNeededError, UnknownTaskError
from agentenvs.textcraft import TextCraftEnv, default_tree
from agentenvs.textcraft.crafting import CraftingTree, _packaged_recipes, item_id_to_str
from agentenvs.textcraft.env import adapt_tasks, agentgym_commands, parse_fields
from agentenvs.textcraft.expert import TextCraftExpert


def _original(relative: str) -> Path | None:
    """A published file of the original benchmark under ``$AGENTENVS_ORIGINALS`` (a folder that
    some machines have; never part of the repository), or None."""
    root = os.environ.get("AGENTENVS_ORIGINALS")
    path = Path(root) / relative if root else None
    return path if path is not None and path.exists() else None


SHARED_ADAPT = _original("textcraft/adapt_eval_200.json")  # ADaPT's published test tasks


@pytest.fixture()
def env() -> TextCraftEnv:
    return TextCraftEnv()


def play(env: TextCraftEnv, task_id: str, actions: list[str]) -> list[str]:
    env.reset(options={"task_id": task_id})
    return [env.step(a)[0] for a in actions]


def expert_actions(task_id: str) -> list[str]:
    env, expert = TextCraftEnv(), TextCraftExpert()
    env.reset(options={"task_id": task_id})
    actions = []
    while not env.done:
        action = expert.act(env).action
        actions.append(action)
        env.step(action)
    return actions


# ----- conformance: reset text ------------------------------------------------------------------


def test_adapt_reset_text_equals_adapt_for_all_200(env):
    tasks = adapt_tasks()
    if SHARED_ADAPT is not None:  # the published file, where this machine has it
        assert list(tasks) == json.loads(SHARED_ADAPT.read_text())["tasks"]
    assert len(tasks) == 200
    for task in tasks:
        obs, info = env.reset(options={"task_id": f"adapt/{task['seed']}"})
        expected = (
            "Crafting commands:\n"
            + "\n".join(task["commands"])
            + f"\n\nGoal: craft {task['goal']}."
        )
        assert obs == expected
        assert info["goal"] == task["goal"]


def test_recipe_graph_reproduces_every_adapt_task():
    """The goal's recipe tree under our graph is exactly the non-distractor part of each task."""
    tree = default_tree()
    uses = tree.item_uses()
    for task in adapt_tasks():
        goal = "minecraft:" + task["goal"].replace(" ", "_")
        tree_recipes = tree.tree_recipes(goal)
        tree_strs = {r.recipe_str for r in tree_recipes}
        shown = set(task["commands"])
        assert tree_strs <= shown, task["seed"]
        distractors = shown - tree_strs
        assert len(distractors) <= 10
        inputs = {i.item_tag.name for r in tree_recipes for i in r.input_items}
        candidate = {u.recipe_str for name in inputs for u in uses.get(name, [])}
        assert distractors <= candidate, task["seed"]
        assert tree.min_depth(goal) >= 2


def test_adapt_goals_follow_adapts_depth_ordering():
    """ADaPT takes goals of depth >= 2, deepest first: depths never increase with the seed."""
    tree = default_tree()
    depths = [tree.min_depth("minecraft:" + t["goal"].replace(" ", "_")) for t in adapt_tasks()]
    assert depths == sorted(depths, reverse=True)
    assert depths[0] == 4


def test_splits_and_families(env):
    test = env.task_ids("test")
    assert len(test) == 100 and len(set(test)) == 100
    assert test[:3] == ["agentgym/0", "agentgym/1", "agentgym/2"] and test[-1] == "agentgym/535"
    train = env.task_ids("train")
    assert not set(train) & set(test)
    assert len(train) + len(test) == 544
    assert len(env.task_ids("adapt")) == 200
    families = collections.Counter(env.family(t) for t in test)
    assert set(families) == {"depth-1", "depth-2", "depth-3", "depth-4"}
    assert families["depth-4"] == 3  # ids 533-535
    assert all(env.family(f"agentgym/{i}") == "depth-1" for i in range(31))


def test_reset_seed_draws_train_task(env):
    _, info_a = env.reset(seed=3)
    _, info_b = env.reset(seed=3)
    assert info_a["task_id"] == info_b["task_id"] in env.task_ids("train")


def test_unknown_task_and_split(env):
    for bad in ["adapt/200", "agentgym/-1", "agentgym/x", "foo/1", "adapt", "adapt/01", ""]:
        with pytest.raises(UnknownTaskError, match="valid forms"):
            env.reset(options={"task_id": bad})
    with pytest.raises(ValueError, match="valid splits"):
        env.task_ids("validation")


def test_order_is_enforced(env):
    with pytest.raises(ResetNeededError):
        env.step("inventory")
    env.reset(options={"task_id": "agentgym/0"})
    for _ in range(30):
        env.step("inventory")
    with pytest.raises(EpisodeOverError):
        env.step("inventory")


# ----- conformance: hand-written sequences with exact observations ---------------------------

STICK_SEQUENCE = [
    ("inventory", "Inventory: You are not carrying anything.", True),
    ("get 2 oak logs", "Got 2 oak logs", True),
    ("get 1 planks", "Could not find planks", False),
    ("get 3 stick", "Could not find stick", False),
    ("get 1 unobtainium", "Could not find unobtainium", False),
    ("craft 4 oak planks using 1 oak logs", "Crafted 4 minecraft:oak_planks", True),
    ("inventory", "Inventory: [oak logs] (1) [oak planks] (4) ", True),
    ("craft 4 stick using 2 planks", "Could not find enough items to craft minecraft:stick", False),
    (
        "craft 4 stick using 3 oak planks",
        "Could not find a valid recipe for "
        "ItemTagWithCount(item_tag=ItemTag(tag=None, item_id='minecraft:stick'), count=4)",
        False,
    ),
    (
        "craft 4 stick using 2 oak planks, 1 oak logs",
        "Could not find a valid recipe for "
        "ItemTagWithCount(item_tag=ItemTag(tag=None, item_id='minecraft:stick'), count=4)",
        False,
    ),
    ("craft 4 stick using two oak planks", "Wrong item format: two oak planks", False),
    ("craft 99 stick using 2 oak planks", "Crafted 4 minecraft:stick", True),
    ("inventory", "Inventory: [oak logs] (1) [oak planks] (2) [stick] (4) ", True),
    (
        "craft 1 planks using 1 oak logs",
        "Could not find a valid recipe for "
        "ItemTagWithCount(item_tag=ItemTag(tag='minecraft:planks', item_id=None), count=1)",
        False,
    ),
    ("craft stick using 2 oak planks", "Crafted 4 minecraft:stick", True),
    ("Inventory", "Could not execute Inventory", False),
    (" inventory", "Could not execute  inventory", False),
    ("look around", "Could not execute look around", False),
    ("get  oak logs", "Could not execute get  oak logs", False),
    ("get 0 oak logs", "Got 0 oak logs", True),
    ("inventory", "Inventory: [oak logs] (1) [stick] (8) ", True),
]


def test_hand_written_sequence_exact_observations(env):
    env.reset(options={"task_id": "agentgym/0"})  # any task: the rules are global
    for action, expected, valid in STICK_SEQUENCE:
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs == expected, action
        assert info["valid"] is valid, action
        assert reward == 0.0 and not terminated


def test_goal_is_won_only_by_crafting(env):
    obs, _ = env.reset(options={"task_id": "agentgym/0"})
    assert obs.endswith("Goal: craft yellow dye.")
    assert env.step("get 1 yellow dye")[0] == "Could not find yellow dye"
    assert env.step("get 1 dandelion")[0] == "Got 1 dandelion"
    obs, reward, terminated, truncated, info = env.step("craft 1 yellow dye using 1 dandelion")
    assert (obs, reward, terminated, truncated) == (
        "Crafted 1 minecraft:yellow_dye",
        1.0,
        True,
        False,
    )
    assert info["won"] and info["turn"] == 3


def test_truncation_at_budget():
    env = TextCraftEnv(max_turns=3)
    env.reset(options={"task_id": "agentgym/5"})
    results = [env.step("inventory") for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True]
    assert not any(r[2] for r in results)


def test_fields_and_match(env):
    assert parse_fields("Inventory: [oak planks] (2) [stick] (4) ") == {
        "inventory": {"oak planks": 2, "stick": 4}
    }
    assert parse_fields("Inventory: You are not carrying anything.") == {"inventory": {}}
    assert parse_fields("Got 3 iron ingot") == {"got": {"count": 3, "item": "iron ingot"}}
    assert parse_fields("Crafted 4 minecraft:stick") == {
        "crafted": {"count": 4, "item": "minecraft:stick"}
    }
    assert parse_fields("Could not find enough items to craft minecraft:x") == {
        "failure": "not_enough_items"
    }
    assert parse_fields("Got 1 dandelion\nInventory: [dandelion] (1) ") == {
        "got": {"count": 1, "item": "dandelion"},
        "inventory": {"dandelion": 1},
    }
    reset_obs, info = env.reset(options={"task_id": "adapt/3"})
    assert info["fields"]["goal"] == "lodestone" and len(info["fields"]["commands"]) > 3
    assert env.match("Got 1 x", "Got 1 x").status is MatchStatus.MATCH
    mismatch = env.match("Inventory: [x] (1) ", "Inventory: [x] (2) ")
    assert mismatch.status is MatchStatus.MISMATCH and "inventory" in mismatch.differing
    assert env.match("Got 1 x", "Inventory: [x] (1) ").status is MatchStatus.UNVERIFIABLE
    # the paper's validation fields only: reset and error texts are unverifiable
    assert env.match(reset_obs, reset_obs).status is MatchStatus.UNVERIFIABLE
    assert env.match("Could not find x", "Could not find x").status is MatchStatus.UNVERIFIABLE


# ----- the three bug fixes -------------------------------------------------------------------


def test_fix_recipe_graph_independent_of_file_order():
    """Any order of the recipe files gives one graph: ADaPT's (ingots and honey blocks are base
    items, nuggets and bottles are crafted from them)."""
    files = _packaged_recipes()
    shuffled = list(files.items())
    random.Random(7).shuffle(shuffled)
    a, b = CraftingTree(files), CraftingTree(dict(shuffled))
    strs = lambda t: sorted(r.recipe_str for rs in t.itemid_recipes.values() for r in rs)  # noqa: E731
    assert strs(a) == strs(b)
    for base, crafted in [
        ("iron_ingot", "iron_nugget"),
        ("gold_ingot", "gold_nugget"),
        ("honey_block", "honey_bottle"),
    ]:
        assert not a.is_craftable(f"minecraft:{base}")
        assert a.is_craftable(f"minecraft:{crafted}")
    assert [r.recipe_str for r in a.recipes_for("minecraft:gold_nugget")] == [
        "craft 9 gold nugget using 1 gold ingot"
    ]


def test_fix_no_recipe_mutation_across_resets(env):
    """The original's traversal extended stored recipe lists: after one reset an item's recipes
    included its ingredients' ones. Recipes must be the same after any number of resets."""
    tree = env.tree
    before = {k: [r.recipe_str for r in v] for k, v in tree.itemid_recipes.items()}
    for task_id in env.task_ids("adapt")[:20] + env.task_ids("test")[:20]:
        env.reset(options={"task_id": task_id})
        tree.tree_recipes(env.goal)
    after = {k: [r.recipe_str for r in v] for k, v in tree.itemid_recipes.items()}
    assert before == after
    # with the bug, "oak sign" would also be craftable with the oak planks recipe
    env.reset(options={"task_id": "adapt/0"})
    env.step("get 1 oak logs")
    obs = env.step("craft 1 oak sign using 1 oak logs")[0]
    assert obs.startswith("Could not find a valid recipe for")


def test_fix_distractors_independent_of_hash_seed():
    task_ids = ["agentgym/140", "agentgym/420", "agentgym/533"]
    texts = {
        seed: [rollout_in_subprocess("TextCraft-v0", t, [], hash_seed=seed)[0][0] for t in task_ids]
        for seed in ("1", "12345")
    }
    assert texts["1"] == texts["12345"]
    tree = default_tree()
    # and a task's commands do not depend on what was generated before it
    goal = dict(tree.items_with_min_depth(1))
    cmds = agentgym_commands(tree, "minecraft:lectern", 999)
    assert cmds == agentgym_commands(tree, "minecraft:lectern", 999)
    assert "minecraft:lectern" in goal


# ----- expert --------------------------------------------------------------------------------


@pytest.mark.parametrize("split,limit", [("test", None), ("adapt", None), ("train", 200)])
def test_expert_solves_split(split, limit):
    env, expert = TextCraftEnv(), TextCraftExpert()
    task_ids = env.task_ids(split)[:limit]
    failures = []
    for task_id in task_ids:
        env.reset(options={"task_id": task_id})
        while not env.done:
            decision = expert.act(env)
            assert decision.thought
            *_, info = env.step(decision.action)
            assert info["valid"], (task_id, decision.action)
        if not env.won:
            failures.append(task_id)
    assert failures == []


def test_expert_recovers_after_detour_and_restore(env):
    expert = TextCraftExpert()
    env.reset(options={"task_id": "agentgym/430"})
    snap = env.snapshot()
    for action in ["get 5 oak logs", "craft 4 oak planks using 1 oak logs", "inventory", "get 2 x"]:
        env.step(action)
    while not env.done:
        env.step(expert.act(env).action)
    assert env.won
    fresh = TextCraftEnv()
    fresh.restore(snap)
    while not fresh.done:
        fresh.step(expert.act(fresh).action)
    assert fresh.won


# ----- snapshot, replay, determinism, fuzz, checker ---------------------------------------------


def test_snapshot_round_trip_random_states():
    rng = random.Random(0)
    env = TextCraftEnv()
    for task_id in rng.sample(env.task_ids("test") + env.task_ids("adapt"), 12):
        actions = expert_actions(task_id)
        noise = ["inventory", "get 3 oak logs", "craft 4 oak planks using 1 oak logs", "bad"]
        mixed = [rng.choice(noise) if rng.random() < 0.3 else a for a in actions]
        cut = rng.randrange(len(mixed))
        check_snapshot_roundtrip(TextCraftEnv, task_id, mixed[:cut], mixed[cut:] + ["inventory"])


def test_snapshot_restores_in_another_process(tmp_path):
    task_id = "adapt/7"
    actions = expert_actions(task_id)
    env = TextCraftEnv()
    env.reset(options={"task_id": task_id})
    for a in actions[:4]:
        env.step(a)
    snap_file = tmp_path / "snap.pkl"
    snap_file.write_bytes(pickle.dumps(env.snapshot()))
    expected = [list(env.step(a)[:4]) for a in actions[4:]]
    script = (
        "import pickle, sys, json, agentenvs\n"
        "env = agentenvs.make('TextCraft-v0')\n"
        "env.restore(pickle.loads(open(sys.argv[1], 'rb').read()))\n"
        "print(json.dumps([list(env.step(a)[:4]) for a in json.loads(sys.argv[2])]))\n"
    )
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", script, str(snap_file), json.dumps(actions[4:])],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout) == expected


def test_replay_equals_stepping_by_hand(env):
    for task_id in ["adapt/0", "agentgym/420"]:
        check_replay(env, task_id, expert_actions(task_id))
    with pytest.raises(EpisodeOverError):
        actions = expert_actions("agentgym/0")
        env.replay("agentgym/0", actions + ["inventory"])


def test_contract(env):
    check_contract(env, "agentgym/140", expert_actions("agentgym/140"), split="test")


def test_determinism_across_hash_seeds():
    task_id = "agentgym/421"
    actions = expert_actions(task_id) + ["inventory"]
    actions.insert(2, "craft 1 nonsense using 2 things")
    a = rollout_in_subprocess("TextCraft-v0", task_id, actions, hash_seed="0")
    b = rollout_in_subprocess("TextCraft-v0", task_id, actions, hash_seed="4242")
    assert a == b
    assert a[-1][4]["won"] is True


def test_fuzz_actions_never_raise(env):
    env.reset(options={"task_id": "adapt/11"})
    counts = collections.Counter()
    for action in fuzz_actions(seed=1, n=3000, extra_pieces=["oak logs", "planks", "stick"]):
        if env.done:
            env.reset(options={"task_id": "adapt/11"})
        obs, reward, terminated, truncated, info = env.step(action)
        check_info(info)
        if not info["valid"]:
            kind = info["fields"].get("failure")
            assert kind is not None, (action, obs)
            counts[kind] += 1
        else:  # only real actions are valid
            assert obs.startswith(("Got ", "Crafted ", "Inventory: ")), (action, obs)
    assert counts["could_not_execute"] > 1000
    env.reset(options={"task_id": "adapt/11"})
    for action in [
        "craft  using ",
        "get 1 ",
        "craft 1 x using 1 y,,",
        "get 99999999999999999999 x",
    ]:
        obs, _, _, _, info = env.step(action)
        assert not info["valid"] and obs.startswith(("Could not", "Wrong item format"))


def test_gymnasium_make_and_check_env():
    env = gym.make("TextCraft-v0")
    assert isinstance(env, TextCraftEnv)  # unwrapped: the contract methods are reachable
    check_env(env, skip_render_check=True)
    env2 = gym.make("agentenvs:TextCraft-v0", max_turns=5)
    assert env2.max_turns == 5
    assert agentenvs.make("TextCraft-v0").env_id == "TextCraft-v0"
    assert env.variant == {}  # no outcome-changing setting
    with pytest.raises(gym.error.UnregisteredEnv, match="agentenvs registers"):
        agentenvs.make("TextCraft-v9")


def test_render_ansi():
    env = TextCraftEnv(render_mode="ansi")
    obs, _ = env.reset(options={"task_id": "agentgym/1"})
    assert env.render() == obs
    assert item_id_to_str("minecraft:oak_planks") == "oak planks"


def test_step_fields_equal_parsing_the_observation():
    """The fields each step builds where it makes the text (no parsing) are exactly what
    parse_fields reads from the observation, for expert, fuzzed and hostile actions."""
    from agentenvs.checker import hostile_actions
    from agentenvs.textcraft.env import parse_fields
    from agentenvs.textcraft.expert import TextCraftExpert

    env = TextCraftEnv(max_turns=10**6)
    expert = TextCraftExpert()
    for task_id in ["adapt/0", "agentgym/3", "agentgym/533"]:
        obs, info = env.reset(options={"task_id": task_id})
        expert.reset()
        while not env.done:
            obs, _, _, _, info = env.step(expert.act(env).action)
            assert info["fields"] == parse_fields(obs), obs
            if not env.done:
                obs, _, _, _, info = env.step("inventory")
                assert info["fields"] == parse_fields(obs), obs
    env.reset(options={"task_id": "adapt/11"})
    pieces = ["oak logs", "planks", "stick", "enough items to craft", "\n", "Got 1 x"]
    actions = list(fuzz_actions(seed=3, n=2000, extra_pieces=pieces))
    actions += list(hostile_actions(3, 2000, ["get {} oak logs", "craft 1 x using {}"]))
    actions += [
        "get 1 enough items to craft x",
        "get 1 oak logs\nGot 2 x",
        "craft 1 a\nb using 1 c",
    ]
    for action in actions:
        if env.done:
            env.reset(options={"task_id": "adapt/11"})
        obs, _, _, _, info = env.step(action)
        assert info["fields"] == parse_fields(obs), (action[:100], obs[:100])
