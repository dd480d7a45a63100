"""TextCraft with its item names permuted: the same crafting world under other labels.

Task ``<task id>/names-<k>`` (e.g. ``agentgym/17/names-3``) is task ``<task id>`` in a world
whose item ids are relabelled by permutation ``k``: every item id of the recipe database gets
another item's id, every tag another tag's (both drawn from ``random.Random(k)``), and the
recipes, the tags' members, the crafting commands shown and the goal are relabelled alike. The
structure (which recipes exist, their counts, depths, the distractors and their order) is the
original task's, so an episode of the renamed task is an episode of the original with every
name translated; only a policy that remembers what a *name* is made of is at a loss. What it is
for: training tasks whose answers cannot have been memorised (an RL arm rewarded only for
reading the recipes), not a benchmark of its own; the original task ids are unchanged.

Tags are permuted among tags: a tag input such as ``planks`` stays a tag, but the names no
longer hint at which items fill it (``oak planks`` for ``planks``); the shown recipes that make
the tag's items are the only clue, as for every other item.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from agentenvs.textcraft.crafting import (
    CraftingTree,
    default_tree,
    item_id_to_str,
    str_to_item_id,
)

__all__ = ["NAMES_MARK", "ItemRenaming", "item_renaming", "original_task_id", "renamed_task_id"]

NAMES_MARK = "/names-"  # <task id>/names-<k>: the task under item-name permutation k

_COMMAND_RE = re.compile(r"craft (\d+) (.+?) using (.+)")
_STACK_RE = re.compile(r"(\d+) (.+)")


def renamed_task_id(task_id: str, k: int) -> str:
    """``task_id`` under item-name permutation ``k``: ``<task id>/names-<k>``."""
    return f"{task_id}{NAMES_MARK}{k}"


def original_task_id(task_id: str) -> str:
    """The task behind a renamed one (``<task id>/names-<k>`` -> ``<task id>``); others as they
    are."""
    return task_id.partition(NAMES_MARK)[0]


@dataclass(frozen=True)
class ItemRenaming:
    """Permutation ``seed`` of TextCraft's item ids (items among items, tags among tags)."""

    seed: int
    ids: Mapping[str, str]  # original id -> shown id
    tree: CraftingTree  # the relabelled recipe tree the renamed tasks are played in

    def item(self, item_id: str) -> str:
        """The shown id of original item (or tag) id ``item_id``."""
        return self.ids.get(item_id, item_id)

    def name(self, text: str) -> str:
        """The shown text form of an original item's text form (``oak planks`` -> ...)."""
        return item_id_to_str(self.item(str_to_item_id(text)))

    def command(self, line: str) -> str:
        """A crafting command as shown at reset, relabelled (``craft 4 stick using 2 planks``)."""
        m = _COMMAND_RE.fullmatch(line)
        if m is None:
            raise ValueError(f"not a crafting command: {line!r}")
        inputs = []
        for part in m.group(3).split(", "):
            s = _STACK_RE.fullmatch(part)
            if s is None:
                raise ValueError(f"not an input stack in {line!r}: {part!r}")
            inputs.append(f"{s.group(1)} {self.name(s.group(2))}")
        return f"craft {m.group(1)} {self.name(m.group(2))} using {', '.join(inputs)}"


@lru_cache(maxsize=64)
def item_renaming(seed: int) -> ItemRenaming:
    """Permutation ``seed`` (a non-negative int) of the packaged tree's names, and its tree."""
    tree = default_tree()
    rng = random.Random(seed)
    ids: dict[str, str] = {}
    for group in (sorted(tree.itemid_set - tree.tag_set), sorted(tree.tag_set)):
        shown = list(group)
        rng.shuffle(shown)
        ids.update(zip(group, shown, strict=True))
    return ItemRenaming(seed, ids, tree.relabeled(ids))
