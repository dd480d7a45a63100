"""TextCraft-v0: craft a Minecraft item from text crafting commands (ADaPT / AgentGym).

Faithful to ADaPT's ``TextCraft/env.py`` and AgentGym's copy of it: the same reset text, action
grammar, observation strings and rules, with the originals' three bugs fixed (see
:mod:`agentenvs.textcraft.crafting` and :func:`agentgym_commands`).
"""

from __future__ import annotations

import gzip
import json
import random
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, ClassVar

from agentenvs.core import MatchResult, Outcome, TextEnv, match_fields
from agentenvs.textcraft.crafting import (
    CraftingTree,
    ItemCount,
    ItemTag,
    _original_repr,
    default_tree,
    item_id_to_str,
    str_to_item_id,
)
from agentenvs.textcraft.renaming import NAMES_MARK, item_renaming

__all__ = [
    "ADAPT_TASKS_RESOURCE",
    "FAILURE_KINDS",
    "TEST_IDS",
    "TextCraftEnv",
    "TextCraftTask",
    "adapt_tasks",
    "agentgym_commands",
    "agentgym_goals",
    "parse_fields",
    "reset_observation",
]

ADAPT_TASKS_RESOURCE = "data/adapt_eval_200.json.gz"
MAX_DISTRACTORS = 10
USES_PER_INPUT = 10

# Prefix-GRPO's TextCraft evaluation: 100 AgentGym ids in four depth bands.
TEST_IDS: tuple[int, ...] = (*range(0, 31), *range(140, 181), *range(420, 445), *range(533, 536))

# The original's action regexes, tried with re.match in this order.
CRAFT_RE = re.compile(r"craft (.*) using (.*)")
GET_RE = re.compile(r"get ([0-9]+) (.*)")
INVENTORY_RE = re.compile(r"inventory")
# The three as one alternation: re.match takes the first branch that matches at the start, so
# this dispatches exactly as trying them in order (groups: craft 1-2, get 3-4, inventory 5).
_ACTION_RE = re.compile(r"craft (.*) using (.*)|get ([0-9]+) (.*)|(inventory)")
_ITEM_CACHE_SIZE = 4096
COUNT_RE = re.compile(r"([0-9]+) (.*)")

# Observation parsing for fields().
_INVENTORY_ITEM_RE = re.compile(r"\[(.+?)\] \((\d+)\)")
_GOT_RE = re.compile(r"Got (\d+) (.*)")
_CRAFTED_RE = re.compile(r"Crafted (\d+) (\S*)")
_GOAL_RE = re.compile(r"Goal: craft (.*)\.$")
MATCH_FIELDS = ("inventory", "got", "crafted")
FAILURE_KINDS: tuple[tuple[str, str], ...] = (
    ("Could not find enough items to craft ", "not_enough_items"),
    ("Could not find a valid recipe for ", "no_valid_recipe"),
    ("Could not find ", "unknown_item"),
    ("Could not execute ", "could_not_execute"),
    ("Wrong item format: ", "wrong_item_format"),
)


@dataclass(frozen=True)
class TextCraftTask:
    """A task: the goal item id and the crafting commands shown at reset, in order; ``names``:
    the item-name permutation it is played under (None: the game's own names)."""

    task_id: str
    goal: str
    commands: tuple[str, ...]
    depth: int
    names: int | None = None

    @property
    def family(self) -> str:
        return f"depth-{self.depth}"


def reset_observation(goal: str, commands: tuple[str, ...] | list[str]) -> str:
    """The reset text: ``Crafting commands:\\n...\\n\\nGoal: craft {goal}.``."""
    return "Crafting commands:\n{}\n\nGoal: craft {}.".format(
        "\n".join(commands), item_id_to_str(goal)
    )


# --------------------------------------------------------------------------------------------
# Tasks


@lru_cache(maxsize=1)
def adapt_tasks() -> tuple[dict[str, Any], ...]:
    """ADaPT's 200 evaluation tasks: ``{"seed", "goal", "commands"}`` as its reset shows them."""
    raw = resources.files("agentenvs.textcraft").joinpath(ADAPT_TASKS_RESOURCE).read_bytes()
    return tuple(json.loads(gzip.decompress(raw))["tasks"])


@lru_cache(maxsize=1)
def agentgym_goals() -> tuple[tuple[str, int], ...]:
    """AgentGym's goal list: (item id, depth) of every item of depth >= 1, shallowest first.

    A stable sort by depth over the tree's load order, as AgentGym's ``reset`` does; task
    ``agentgym/<idx>`` has goal ``agentgym_goals()[idx % len(...)]``.
    """
    return tuple(sorted(default_tree().items_with_min_depth(1), key=lambda x: x[1]))


def agentgym_commands(tree: CraftingTree, goal: str, idx: int) -> tuple[str, ...]:
    """The crafting commands of AgentGym task ``idx``: the goal's recipe tree plus distractors.

    As AgentGym's ``reset``: for each input in the goal's tree, up to 10 recipes that use it;
    of those not already in the tree, at most 10 are added; the list is shuffled. Unlike the
    original (a ``set`` iterated under the hash seed, and ``random.seed(42)`` for every task),
    all draws come from ``random.Random(idx)`` over lists in a fixed order, so a task id always
    gives the same text.
    """
    rng = random.Random(idx)
    tree_recipes = tree.tree_recipes(goal)
    shown = list(dict.fromkeys(r.recipe_str for r in tree_recipes))
    uses = tree.item_uses()
    candidates: dict[str, None] = {}
    for recipe in tree_recipes:
        for item in recipe.input_items:
            item_uses = uses.get(item.item_tag.name, [])
            for use in rng.sample(item_uses, min(len(item_uses), USES_PER_INPUT)):
                if use.recipe_str not in shown:
                    candidates.setdefault(use.recipe_str)
    pool = list(candidates)
    commands = shown + rng.sample(pool, min(len(pool), MAX_DISTRACTORS))
    rng.shuffle(commands)
    return tuple(commands)


def _index(key: str) -> int | None:
    # ASCII digits only (str.isdigit also takes "²"), and no more than int() may convert
    if not (key.isascii() and key.isdigit()) or len(key) > 18 or key != str(int(key)):
        return None
    return int(key)


@lru_cache(maxsize=4096)
def _load_task(task_id: str) -> TextCraftTask | None:
    base_id, renamed, names = task_id.partition(NAMES_MARK)
    if renamed:
        seed = _index(names)
        base = _load_task(base_id)
        if seed is None or base is None:
            return None
        renaming = item_renaming(seed)
        commands = tuple(map(renaming.command, base.commands))
        return TextCraftTask(task_id, renaming.item(base.goal), commands, base.depth, seed)
    source, _, key = task_id.partition("/")
    idx = _index(key)
    if idx is None:
        return None
    tree = default_tree()
    if source == "adapt":
        tasks = adapt_tasks()
        if idx >= len(tasks):
            return None
        task = tasks[idx]
        goal = str_to_item_id(task["goal"])
        return TextCraftTask(task_id, goal, tuple(task["commands"]), tree.min_depth(goal))
    if source == "agentgym":
        goals = agentgym_goals()
        goal, depth = goals[idx % len(goals)]
        return TextCraftTask(task_id, goal, agentgym_commands(tree, goal, idx), depth)
    return None


# --------------------------------------------------------------------------------------------
# Fields


def parse_fields(observation: str) -> dict[str, Any]:
    """Structured fields of a TextCraft observation.

    ``inventory`` (item -> count, insertion order), ``got`` / ``crafted`` (``{"count", "item"}``),
    ``failure`` (one of :data:`FAILURE_KINDS`' kinds), and for a reset text ``goal`` and
    ``commands``. Each comes from the first line that carries it.
    """
    fields: dict[str, Any] = {}
    lines = observation.split("\n")
    if lines and lines[0] == "Crafting commands:":
        goal = _GOAL_RE.match(lines[-1])
        if goal:
            fields["goal"] = goal.group(1)
            fields["commands"] = [line for line in lines[1:-2] if line]
    for line in lines:
        if "inventory" not in fields and line.startswith("Inventory:"):
            fields["inventory"] = {name: int(n) for name, n in _INVENTORY_ITEM_RE.findall(line)}
        elif "got" not in fields and line.startswith("Got "):
            m = _GOT_RE.match(line)
            if m:
                fields["got"] = {"count": int(m.group(1)), "item": m.group(2)}
        elif "crafted" not in fields and line.startswith("Crafted "):
            m = _CRAFTED_RE.match(line)
            if m:
                fields["crafted"] = {"count": int(m.group(1)), "item": m.group(2)}
        elif "failure" not in fields:
            for prefix, kind in FAILURE_KINDS:
                if line.startswith(prefix):
                    fields["failure"] = kind
                    break
    return fields


class _ActionFailed(Exception):
    """An action the rules reject; its message is the observation (the original's ActionFailed)."""


class _CountTooLong(Exception):
    """A count with more digits than Python converts between ``int`` and ``str`` (4,300 by
    default): the original raises ``ValueError`` there; we answer ``Could not execute``."""


_ITEM_TEXTS: dict[str, str] = {}  # item id -> its text form, for the inventory listing


def _item_text(item_id: str) -> str:
    text = item_id_to_str(item_id)
    if len(_ITEM_TEXTS) < 4096:  # (only valid item ids reach the inventory)
        _ITEM_TEXTS[item_id] = text
    return text


def _failure_kind(message: str) -> str | None:
    for prefix, kind in FAILURE_KINDS:
        if message.startswith(prefix):
            return kind
    return None


def _count(digits: str) -> int:
    # 300 digits below the interpreter's limit, so sums of counts still print
    limit = (sys.get_int_max_str_digits() or 4300) - 300
    if len(digits) > limit:
        raise _CountTooLong
    return int(digits)


# --------------------------------------------------------------------------------------------
# The environment


class TextCraftEnv(TextEnv):
    """TextCraft: craft a goal item from the crafting commands shown at reset.

    ## Description
    ADaPT's TextCraft (Prasad et al., 2023) as AgentGym serves it: a Minecraft crafting world in
    text. The reset observation lists crafting commands (the goal's recipe tree plus up to ten
    distractors) and the goal; the agent fetches base items and crafts intermediate items until
    it crafts the goal.

    ## Action Space
    A string, matched with ``re.match`` as in the original: ``craft <n> <item> using <n> <item>,
    ...`` (input counts must equal the recipe's exactly; a tag input such as ``planks`` must be
    given as one concrete item, e.g. ``2 oak planks``; the output count typed is ignored),
    ``get <n> <item>`` (base, non-craftable items only), ``inventory``. Anything else gets
    ``Could not execute <action>``. There is no list of admissible actions
    (``info["admissible_actions"]`` is None).

    ## Observation Space
    A string. Reset: ``Crafting commands:\\n<one per line>\\n\\nGoal: craft <goal>.``. Steps:
    ``Got <n> <item as typed>``, ``Crafted <n> minecraft:<item_id>``,
    ``Inventory: [<item>] (<n>) ...`` (trailing space) or
    ``Inventory: You are not carrying anything.``, or an error:
    ``Could not find <item>``, ``Could not find enough items to craft minecraft:<id>``,
    ``Could not find a valid recipe for <stack>``, ``Could not execute <action>``,
    ``Wrong item format: <text>``.

    ## Starting State
    An empty inventory. Task ids: ``adapt/<0-199>`` (ADaPT's 200 evaluation tasks, reset text
    exactly as ADaPT shows it) and ``agentgym/<idx>`` (AgentGym's indexing: goal
    ``idx % 544`` of the depth-sorted goal list, distractors drawn from ``random.Random(idx)``).
    Splits: ``test`` (Prefix-GRPO's 100 ids), ``train`` (the other 444 AgentGym ids), ``adapt``.
    ``<task id>/names-<k>`` (in no split) is that task with the game's item names permuted by
    permutation ``k`` (:mod:`agentenvs.textcraft.renaming`): same structure, other labels.

    ## Rewards
    1 when the goal is crafted, else 0.

    ## Episode End
    Terminated when the goal is crafted; truncated after ``max_turns`` actions (30, the paper's).

    ## Information
    ``task_id`` (str), ``family`` (str, ``depth-<d>``: the goal's minimum recipe depth), ``won``
    (bool), ``valid`` (bool: False for every error observation), ``turn`` (int),
    ``admissible_actions`` (None), ``fields`` (dict: see :func:`parse_fields`), ``goal`` (str,
    the goal's text form).

    ## Arguments
    ``max_turns`` (int, default 30), ``render_mode`` (None or ``"ansi"``).

    ## Version History
    * v0: ADaPT's rules; recipe graph fixed to ADaPT's (reverse-alphabetical load order), no
      recipe mutation across resets, hash-seed-independent distractors.
    """

    env_id: ClassVar[str] = "TextCraft-v0"
    splits: ClassVar[tuple[str, ...]] = ("train", "test", "adapt")
    default_max_turns: ClassVar[int] = 30
    task_id_forms: ClassVar[tuple[str, ...]] = (
        "adapt/<0-199>",
        "agentgym/<non-negative int>",
        "<either>/names-<non-negative int>",
    )

    def __init__(self, max_turns: int | None = None, render_mode: str | None = None) -> None:
        super().__init__(max_turns=max_turns, render_mode=render_mode)
        self.tree = default_tree()
        self._task: TextCraftTask | None = None
        self.inventory: dict[str, int] = {}
        # per task: (task id, family, goal text), read by every step's info
        self._task_info: tuple[str, str, str] = ("", "", "")
        # the latest step observation and its fields, built where the text is made: the text,
        # its one field's key ("": no field, None: parse the text) and value
        self._known: tuple[str, str | None, Any] = ("", None, None)
        self._items: dict[str, ItemTag] = {}  # action text -> item (a pure function of it)

    # ----- tasks -------------------------------------------------------------------------------

    def task_ids(self, split: str) -> list[str]:
        if split == "test":
            return [f"agentgym/{i}" for i in TEST_IDS]
        if split == "train":
            test = set(TEST_IDS)
            return [f"agentgym/{i}" for i in range(len(agentgym_goals())) if i not in test]
        if split == "adapt":
            return [f"adapt/{i}" for i in range(len(adapt_tasks()))]
        raise self._unknown_split(split)

    def family(self, task_id: str) -> str:
        if task_id == self._task_info[0]:
            return self._task_info[1]
        return self.task(task_id).family

    def task(self, task_id: str) -> TextCraftTask:
        """The task behind ``task_id`` (goal, commands, depth)."""
        task = _load_task(task_id) if isinstance(task_id, str) else None
        if task is None:
            raise self._unknown_task(task_id)
        return task

    @property
    def goal(self) -> str:
        """The current goal's item id (``minecraft:...``)."""
        assert self._task is not None, "call reset() first"
        return self._task.goal

    @property
    def commands(self) -> tuple[str, ...]:
        """The crafting commands shown at reset."""
        assert self._task is not None, "call reset() first"
        return self._task.commands

    # ----- episode -----------------------------------------------------------------------------

    def _start_task(self, task_id: str) -> str:
        self._use_task(self.task(task_id))
        self.inventory = {}
        return reset_observation(self._task.goal, self._task.commands)

    def _use_task(self, task: TextCraftTask) -> None:
        tree = default_tree() if task.names is None else item_renaming(task.names).tree
        if tree is not self.tree:
            self.tree = tree
            self._items = {}  # (its entries read the tree's tags)
        self._task = task
        self._task_info = (task.task_id, task.family, item_id_to_str(task.goal))
        self._known = ("", None, None)

    def _get_state(self) -> Any:
        return tuple(self.inventory.items())

    def _set_state(self, task_id: str, state: Any) -> None:
        self._use_task(self.task(task_id))
        self.inventory = dict(state)

    def _extra_info(self) -> dict[str, Any]:
        return {"goal": self._task_info[2]}

    def fields(self, observation: str) -> dict[str, Any]:
        text, key, value = self._known
        if key is None or observation is not text:
            return parse_fields(observation)
        if not key:
            return {}
        return {key: dict(value) if type(value) is dict else value}

    def match(self, expected: str, actual: str) -> MatchResult:
        """Compare on the shared fields among ``inventory``, ``got`` and ``crafted``.

        These are Prefix-GRPO's validation fields (the first line starting with ``Inventory:``,
        ``Got `` or ``Crafted ``); an error or reset observation has none of them, so comparing
        it is ``unverifiable``, as in the paper's replay validation.
        """
        fe, fa = parse_fields(expected), parse_fields(actual)
        return match_fields(
            {k: fe[k] for k in MATCH_FIELDS if k in fe}, {k: fa[k] for k in MATCH_FIELDS if k in fa}
        )

    def _apply(self, action: str) -> Outcome:
        m = _ACTION_RE.match(action)
        if m is None:
            message = f"Could not execute {self._echo(action)}"
            kind: str | None = "could_not_execute"
        else:
            try:
                if m.group(5) is None and m.group(3) is None:
                    return self._craft(m.group(1), m.group(2))
                if m.group(3) is not None:
                    return self._get(_count(m.group(3)), m.group(4))
                return Outcome(self._inventory_text())
            except _ActionFailed as failure:
                message = str(failure)
            except _CountTooLong:
                message = f"Could not execute {self._echo(action)}"
            kind = _failure_kind(message)
        # one line: its failure kind is all parse_fields would find in it
        self._known = (message, ("failure" if kind else "") if "\n" not in message else None, kind)
        return Outcome(message, valid=False)

    # ----- the rules (the original's step, branch by branch) ------------------------------------

    def _item(self, text: str) -> ItemTag:
        item = self._items.get(text)
        if item is None:
            item_id = str_to_item_id(text)
            item = ItemTag(tag=item_id) if self.tree.is_tag(item_id) else ItemTag(item_id=item_id)
            if len(self._items) >= _ITEM_CACHE_SIZE:
                self._items.clear()
            self._items[text] = item
        return item

    def _craft(self, output_text: str, inputs_text: str) -> Outcome:
        m = COUNT_RE.match(output_text)
        output = self._item(m.group(2) if m else output_text)
        wanted = []
        for part in inputs_text.split(","):
            part = part.strip()
            item = COUNT_RE.match(part)
            if not item:
                raise _ActionFailed(f"Wrong item format: {self._echo(part)}")
            wanted.append((self._item(item.group(2)), _count(item.group(1))))
        inventory = self.inventory
        for tag, count in wanted:
            if inventory.get(tag.item_id or "", -1) < count:
                raise _ActionFailed(
                    f"Could not find enough items to craft {self._echo(str(output.item_id))}"
                )
        inputs = [ItemCount(tag, count) for tag, count in wanted]
        crafted = self.tree.craft(inputs, output.item_id)
        if crafted is None:
            typed = ItemCount(output, _count(m.group(1)) if m else 1)
            raise _ActionFailed(
                f"Could not find a valid recipe for {self._echo(_original_repr(typed))}"
            )
        for i in inputs:  # (.get: an item named twice in one craft must not raise)
            key = i.item_tag.item_id or ""
            self.inventory[key] = self.inventory.get(key, 0) - i.count
            if self.inventory[key] == 0:
                del self.inventory[key]
        item_id = crafted.item_tag.item_id or ""
        self.inventory[item_id] = self.inventory.get(item_id, 0) + crafted.count
        won = item_id == self._task.goal  # type: ignore[union-attr]
        text = f"Crafted {crafted.count} {item_id}"
        self._known = (text, "crafted", {"count": crafted.count, "item": item_id})
        return Outcome(
            text,
            reward=1.0 if won else 0.0,
            won=won,
            terminated=won,
        )

    def _get(self, count: int, text: str) -> Outcome:
        item = self._item(text)
        if (
            self.tree.is_craftable(item.name)
            or item.item_id is None
            or self.tree.is_tag(item.item_id)
            or not self.tree.is_valid_item(item.item_id)
        ):
            raise _ActionFailed(f"Could not find {self._echo(text)}")
        self.inventory[item.item_id] = self.inventory.get(item.item_id, 0) + count
        observation = f"Got {count} {text}"
        self._known = (observation, "got", {"count": count, "item": text})
        return Outcome(observation)

    def _inventory_text(self) -> str:
        if not self.inventory:
            text = "Inventory: You are not carrying anything."
            self._known = (text, "inventory", {})
            return text
        texts = _ITEM_TEXTS
        fields = {}
        parts = ["Inventory: "]
        for item, n in self.inventory.items():
            name = texts.get(item) or _item_text(item)
            fields[name] = n
            parts.append(f"[{name}] ({n}) ")
        text = "".join(parts)
        self._known = (text, "inventory", fields)
        return text
