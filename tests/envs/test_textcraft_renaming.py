"""TextCraft's ``<task id>/names-<k>`` tasks: the same world under permuted item names."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from agentenvs.core import UnknownTaskError
from agentenvs.textcraft import TextCraftEnv, default_tree
from agentenvs.textcraft.crafting import item_id_to_str
from agentenvs.textcraft.expert import TextCraftExpert
from agentenvs.textcraft.renaming import item_renaming

TASKS = ["agentgym/40", "agentgym/200", "agentgym/301", "agentgym/533", "adapt/7", "adapt/150"]


def expert_episode(task_id: str) -> tuple[list[str], list[tuple[str, float, bool, bool]]]:
    env, expert = TextCraftEnv(), TextCraftExpert()
    env.reset(options={"task_id": task_id})
    actions, steps = [], []
    while not env.done:
        actions.append(expert.act(env).action)
        obs, reward, terminated, truncated, info = env.step(actions[-1])
        steps.append((obs, reward, terminated, info["valid"]))
    return actions, steps


def translate(text: str, seed: int) -> str:
    """An action or observation of the original task as the renamed task writes it: item names
    after a count (``get 2 oak log``, ``using 1 stick, 2 planks``), in brackets
    (``[oak log] (2)``) and ``minecraft:`` ids (a test-side reading of the formats)."""
    renaming = item_renaming(seed)
    text = re.sub(r"minecraft:[a-z_]+", lambda m: renaming.item(m.group(0)), text)
    text = re.sub(r"\[(.+?)\]", lambda m: f"[{renaming.name(m.group(1))}]", text)

    def stack(m: re.Match[str]) -> str:
        return f"{m.group(1)}{m.group(2)} {renaming.name(m.group(3))}"

    text = re.sub(
        r"^Goal: craft (.+)\.$",
        lambda m: f"Goal: craft {renaming.name(m.group(1))}.",
        text,
        flags=re.M,
    )
    pattern = r"(^|using |, |Got |get |craft )(\d+) ([a-z][a-z ]*?)(?=$|, | using)"
    return re.sub(pattern, stack, text, flags=re.M)


def test_permutation_maps_items_to_items_and_tags_to_tags():
    tree, renaming = default_tree(), item_renaming(3)
    items = tree.itemid_set - tree.tag_set
    assert {renaming.item(i) for i in items} == items
    assert {renaming.item(t) for t in tree.tag_set} == tree.tag_set
    assert sum(renaming.item(i) != i for i in items) > 0.9 * len(items)
    assert item_renaming(3).ids == renaming.ids and item_renaming(4).ids != renaming.ids


def test_permutation_is_the_same_in_another_process():
    code = (
        "from agentenvs.textcraft.renaming import item_renaming as r;"
        "print(r(5).name('oak planks'), r(5).name('stick'), r(5).item('minecraft:planks'))"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env=dict(os.environ, PYTHONHASHSEED=str(h)),
        ).stdout
        for h in (1, 2)
    }
    assert len(runs) == 1


@pytest.mark.parametrize("task_id", TASKS)
def test_renamed_task_is_the_original_with_names_translated(task_id):
    env = TextCraftEnv()
    base_obs, base_info = env.reset(options={"task_id": task_id})
    obs, info = env.reset(options={"task_id": f"{task_id}/names-7"})
    assert obs == translate(base_obs, 7) != base_obs
    assert info["family"] == base_info["family"] and info["goal"] == item_renaming(7).name(
        base_info["goal"]
    )
    base_actions, base_steps = expert_episode(task_id)
    env.reset(options={"task_id": f"{task_id}/names-7"})
    steps = []
    for action in base_actions:
        obs, reward, terminated, _, info = env.step(translate(action, 7))
        steps.append((obs, reward, terminated, info["valid"]))
    assert [s[1:] for s in steps] == [s[1:] for s in base_steps] and steps[-1][1] == 1.0
    assert [s[0] for s in steps] == [translate(s[0], 7) for s in base_steps]
    # the expert plans in the renamed world (ties among a tag's items may break otherwise)
    actions, expert_steps = expert_episode(f"{task_id}/names-7")
    assert len(actions) == len(base_actions) and expert_steps[-1][1] == 1.0
    # the original names mean other items there: the original's answer fails in the renamed task
    env.reset(options={"task_id": f"{task_id}/names-7"})
    assert not any(env.step(a)[1] for a in base_actions if not env.done)


def test_errors_and_inventory_read_the_renamed_world():
    env, renaming = TextCraftEnv(), item_renaming(2)
    env.reset(options={"task_id": "agentgym/200/names-2"})
    log = renaming.name("oak logs")
    assert env.step(f"get 1 {log}")[0] == f"Got 1 {log}"
    assert env.step("inventory")[0] == f"Inventory: [{log}] (1) "
    planks = renaming.name("oak planks")
    crafted = env.step(f"craft 4 {planks} using 1 {log}")[0]
    assert crafted == f"Crafted 4 {renaming.item('minecraft:oak_planks')}"
    craftable = renaming.name("stick")
    assert env.step(f"get 1 {craftable}")[0] == f"Could not find {craftable}"


def test_switching_between_renamed_and_original_tasks_in_one_env():
    env, fresh = TextCraftEnv(), TextCraftEnv()
    actions, _ = expert_episode("agentgym/301")
    renamed = [translate(a, 1) for a in actions]
    env.reset(options={"task_id": "agentgym/301/names-1"})
    env.step(renamed[0])
    snap = env.snapshot()
    assert [env.step(a)[0] for a in renamed[1:]] != []
    assert play_steps(env, "agentgym/301", actions) == play_steps(fresh, "agentgym/301", actions)
    env.restore(snap)  # back into the renamed world from the original one
    assert env.step(renamed[1])[2:4] == fresh_renamed_step(renamed)


def play_steps(env: TextCraftEnv, task_id: str, actions: list[str]) -> list[tuple]:
    env.reset(options={"task_id": task_id})
    return [env.step(a)[:4] for a in actions]


def fresh_renamed_step(renamed: list[str]) -> tuple:
    env = TextCraftEnv()
    env.reset(options={"task_id": "agentgym/301/names-1"})
    env.step(renamed[0])
    return env.step(renamed[1])[2:4]


@pytest.mark.parametrize(
    "task_id",
    [
        "agentgym/1/names-x",
        "agentgym/1/names-",
        "agentgym/1/names-1/names-2",
        "foo/names-1",
        "agentgym/1/names-01",
        "agentgym/x/names-1",
    ],
)
def test_malformed_renamed_ids_are_unknown_tasks(task_id):
    with pytest.raises(UnknownTaskError, match="names-<non-negative int>"):
        TextCraftEnv().reset(options={"task_id": task_id})


def test_renamed_names_are_item_names():
    names = {item_id_to_str(i) for i in default_tree().itemid_set | default_tree().tag_set}
    env = TextCraftEnv()
    obs, _ = env.reset(options={"task_id": "agentgym/77/names-9"})
    for line in obs.splitlines()[1:-2]:
        out, inputs = re.fullmatch(r"craft \d+ (.+?) using (.+)", line).groups()
        assert out in names and all(p.split(" ", 1)[1] in names for p in inputs.split(", "))


def test_every_task_has_a_renamed_form():
    env = TextCraftEnv()
    ids = env.all_task_ids()
    for task_id in ids:
        base, renamed = env.task(task_id), env.task(f"{task_id}/names-11")
        assert len(renamed.commands) == len(base.commands) and renamed.depth == base.depth
    assert len(ids) == 744
