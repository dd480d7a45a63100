"""TextCraft's crafting rules: Minecraft 1.16.5 crafting recipes as a tree of items and tags.

The rules are ADaPT's (``TextCraft/crafting_tree.py``, copied by AgentGym), rewritten with its
three bugs fixed:

* **Load order.** The original reads recipe files in ``os.listdir`` order, and cycle removal
  (iron ingot ↔ nugget, gold ingot ↔ nugget, honey block ↔ bottle) keeps whichever recipe came
  first, so the recipe graph depended on the file system. We read files in reverse-alphabetical
  order of their names: the order that reproduces all 200 of ADaPT's published tasks.
* **Mutation across resets.** ADaPT's tree traversal extended the stored recipe lists in
  place, so after one reset an item's "recipes" included its ingredients' recipes (and ``craft``
  could turn one item into another). :meth:`CraftingTree.tree_recipes` returns a fresh list and
  never touches the stored recipes: it equals AgentGym's 2025 traversal, not ADaPT's.
* **Hash-seed-dependent distractors** are fixed in the environment (it draws from ordered lists).

Item ids are ``minecraft:<name>``; a *tag* (``minecraft:planks``) names a family of items. The
text form of an id drops ``minecraft:`` and turns ``_`` into spaces.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = [
    "CraftingTree",
    "ItemCount",
    "ItemTag",
    "Recipe",
    "default_tree",
    "item_id_to_str",
    "load_recipe_files",
    "pack_recipes",
]

RECIPES_RESOURCE = "data/recipes.json.gz"
CRAFTING_TYPES = ("minecraft:crafting_shaped", "minecraft:crafting_shapeless")


def item_id_to_str(item_id: str) -> str:
    """``minecraft:oak_planks`` -> ``oak planks`` (the text form the observations use)."""
    return item_id.replace("minecraft:", "").replace("_", " ")


def str_to_item_id(text: str) -> str:
    """``oak planks`` -> ``minecraft:oak_planks`` (how an action's item text is read)."""
    return "minecraft:" + text.replace(" ", "_")


@dataclass(frozen=True)
class ItemTag:
    """An item id, a tag, or (for a recipe's output) both: the item and the group it belongs to."""

    tag: str | None = None
    item_id: str | None = None

    @property
    def name(self) -> str:
        return self.item_id or self.tag or ""


@dataclass(frozen=True)
class ItemCount:
    item_tag: ItemTag
    count: int


@dataclass(frozen=True)
class Recipe:
    """A crafting recipe: exact input counts and one output stack."""

    input_items: tuple[ItemCount, ...]
    output_item: ItemCount

    @property
    def recipe_str(self) -> str:
        """The crafting command as shown at reset: ``craft 4 stick using 2 planks``."""
        inputs = ", ".join(f"{i.count} {item_id_to_str(i.item_tag.name)}" for i in self.input_items)
        out = self.output_item
        return f"craft {out.count} {item_id_to_str(out.item_tag.name)} using {inputs}"


def _original_repr(stack: ItemCount) -> str:
    """The original's ``str(ItemTagWithCount)``, which one of its error messages prints."""
    tag = stack.item_tag
    return (
        f"ItemTagWithCount(item_tag=ItemTag(tag={tag.tag!r}, item_id={tag.item_id!r}), "
        f"count={stack.count})"
    )


# --------------------------------------------------------------------------------------------
# Recipe data


def load_recipe_files(recipes_dir: str | Path) -> dict[str, dict[str, Any]]:
    """Read a Minecraft ``recipes/`` folder: file stem -> recipe JSON, crafting recipes only."""
    out = {}
    for path in sorted(Path(recipes_dir).glob("*.json")):
        recipe = json.loads(path.read_text())
        if recipe.get("type") in CRAFTING_TYPES:
            out[path.stem] = recipe
    return out


def pack_recipes(recipes_dir: str | Path, out_path: str | Path) -> int:
    """Write the crafting recipes of ``recipes_dir`` as the compact gzipped JSON we ship."""
    recipes = load_recipe_files(recipes_dir)
    payload = json.dumps(recipes, separators=(",", ":")).encode()
    Path(out_path).write_bytes(gzip.compress(payload, mtime=0))
    return len(recipes)


def _packaged_recipes() -> dict[str, dict[str, Any]]:
    data = resources.files("agentenvs.textcraft").joinpath(RECIPES_RESOURCE).read_bytes()
    return json.loads(gzip.decompress(data))


# --------------------------------------------------------------------------------------------
# The tree


class CraftingTree:
    """All crafting recipes, indexed by output item and by tag, with ADaPT's rules.

    Build it with :func:`default_tree` (the packaged recipes, cached per process) or from a
    mapping of file stem -> recipe JSON. Files are read in reverse-alphabetical order of their
    stems (see the module docstring).
    """

    def __init__(self, recipe_files: Mapping[str, Mapping[str, Any]]) -> None:
        self.itemid_recipes: dict[str, list[Recipe]] = {}
        self.tag_recipes: dict[str, list[Recipe]] = {}
        self.tag_set: set[str] = set()
        self.itemid_set: set[str] = set()
        self.item_id_to_tag: dict[str, str] = {}
        self._transitive: dict[str, set[str]] = {}
        self._min_depth: dict[str, int] = {}
        for stem in sorted(recipe_files, reverse=True):
            self._add_recipe(recipe_files[stem])
        self._untag_uncraftable_inputs()

    # ----- loading (the original's _load_recipes and clean_up_recipes) -----------------------

    def _read_inputs(self, recipe: Mapping[str, Any]) -> list[ItemCount]:
        def item_tag(entry: Any) -> ItemTag:
            if isinstance(entry, list):
                entry = entry[0]
            if "item" in entry:
                self.itemid_set.add(entry["item"])
                return ItemTag(item_id=entry["item"])
            if "tag" in entry:
                self.tag_set.add(entry["tag"])
                return ItemTag(tag=entry["tag"])
            raise ValueError(f"unknown ingredient {entry!r}")

        if recipe["type"] == "minecraft:crafting_shaped":
            inputs = []
            for key, entry in recipe["key"].items():
                count = sum(line.count(key) for line in recipe["pattern"])
                inputs.append(ItemCount(item_tag(entry), count))
            return inputs
        counts: dict[str, int] = {}
        tags: dict[str, ItemTag] = {}
        for entry in recipe["ingredients"]:
            tag = item_tag(entry)
            counts[tag.name] = counts.get(tag.name, 0) + 1
            tags.setdefault(tag.name, tag)
        return [ItemCount(tags[name], n) for name, n in counts.items()]

    def _add_recipe(self, recipe: Mapping[str, Any]) -> None:
        if recipe.get("type") not in CRAFTING_TYPES:
            return
        inputs = self._read_inputs(recipe)
        result = recipe["result"]
        if isinstance(result, str):
            output_id, output_count = result, 1
        else:
            output_id, output_count = result["item"], result.get("count") or 1
        self.itemid_set.add(output_id)
        # block -> ingots/nuggets recipes are left out, as in the original
        if len(inputs) == 1 and inputs[0].item_tag.name.endswith("_block"):
            return
        output_tag = None
        if "group" in recipe:
            output_tag = "minecraft:" + recipe["group"]
            if output_tag != output_id:
                self.tag_set.add(output_tag)
                self.item_id_to_tag[output_id] = output_tag
        output = ItemCount(ItemTag(tag=output_tag, item_id=output_id), output_count)
        deps = self._transitive.setdefault(output_id, set())
        if any(output_id in self._transitive.get(i.item_tag.name, ()) for i in inputs):
            return  # would close a cycle: the recipe loaded first wins
        self._store(Recipe(tuple(inputs), output))
        for i in inputs:
            deps.add(i.item_tag.name)
            deps.update(self._transitive.get(i.item_tag.name, ()))

    def _store(self, recipe: Recipe) -> None:
        out = recipe.output_item.item_tag
        self.itemid_recipes.setdefault(out.item_id or "", []).append(recipe)
        if out.tag is not None:
            self.tag_recipes.setdefault(out.tag, []).append(recipe)

    def _untag_uncraftable_inputs(self) -> None:
        """A tag input none of whose items has a recipe becomes a plain (fetchable) item."""
        untagged = {
            i.item_tag.tag
            for recipes in self.itemid_recipes.values()
            for r in recipes
            for i in r.input_items
            if i.item_tag.item_id is None
            and not any(item in self.itemid_recipes for item in self.items_with_tag(i.item_tag.tag))
        }
        if not untagged:
            return

        def fix(r: Recipe) -> Recipe:
            inputs = tuple(
                ItemCount(ItemTag(item_id=i.item_tag.tag), i.count)
                if i.item_tag.item_id is None and i.item_tag.tag in untagged
                else i
                for i in r.input_items
            )
            return Recipe(inputs, r.output_item)

        fixed: dict[int, Recipe] = {}  # one new Recipe per old one, shared by both indexes
        for index in (self.itemid_recipes, self.tag_recipes):
            for key, recipes in index.items():
                index[key] = [fixed.setdefault(id(r), fix(r)) for r in recipes]
        for tag in untagged:
            self.itemid_set.add(tag)
            self.tag_set.discard(tag)

    def relabeled(self, ids: Mapping[str, str]) -> CraftingTree:
        """A copy with every item and tag id ``x`` replaced by ``ids.get(x, x)``.

        Relabelled after loading (not rebuilt from renamed recipe files), so the loading rules
        that read names (load order, ``*_block`` recipes left out) keep this tree's structure;
        every index keeps its order."""

        def name(x: str | None) -> str | None:
            return None if x is None else ids.get(x, x)

        def stack(s: ItemCount) -> ItemCount:
            tag = s.item_tag
            return ItemCount(ItemTag(tag=name(tag.tag), item_id=name(tag.item_id)), s.count)

        done: dict[int, Recipe] = {}  # one new Recipe per old one, shared by both indexes

        def recipe(r: Recipe) -> Recipe:
            new = done.get(id(r))
            if new is None:
                new = done[id(r)] = Recipe(tuple(map(stack, r.input_items)), stack(r.output_item))
            return new

        out = CraftingTree.__new__(CraftingTree)
        out.itemid_recipes = {name(k): [*map(recipe, v)] for k, v in self.itemid_recipes.items()}
        out.tag_recipes = {name(k): [*map(recipe, v)] for k, v in self.tag_recipes.items()}
        out.tag_set = {name(x) for x in self.tag_set}
        out.itemid_set = {name(x) for x in self.itemid_set}
        out.item_id_to_tag = {name(k): name(v) for k, v in self.item_id_to_tag.items()}
        out._transitive = {name(k): {name(x) for x in v} for k, v in self._transitive.items()}
        out._min_depth = {}
        return out

    # ----- queries ---------------------------------------------------------------------------

    def is_craftable(self, name: str) -> bool:
        return name in self.itemid_recipes or name in self.tag_recipes

    def is_valid_item(self, item_id: str) -> bool:
        return item_id in self.itemid_set

    def is_tag(self, name: str | None) -> bool:
        return name in self.tag_set

    def items_with_tag(self, tag: str | None) -> Iterator[str]:
        """Item ids that belong to ``tag`` (through their recipe group), in load order."""
        return (item for item, t in self.item_id_to_tag.items() if t == tag)

    def recipes_for(self, name: str) -> list[Recipe]:
        """The recipes that make item or tag ``name`` (a new list; empty for base items)."""
        return list(self.itemid_recipes.get(name) or self.tag_recipes.get(name) or [])

    def min_depth(self, name: str) -> int:
        """Minimum recipe depth: 0 for base items, else 1 + the deepest input of the best recipe."""
        if name not in self._min_depth:
            recipes = self.recipes_for(name)
            self._min_depth[name] = (
                min(
                    max(self.min_depth(i.item_tag.name) + 1 for i in r.input_items) for r in recipes
                )
                if recipes
                else 0
            )
        return self._min_depth[name]

    def items_with_min_depth(self, at_least: int) -> list[tuple[str, int]]:
        """(item id, depth) of every craftable item with depth >= ``at_least``, in load order."""
        depths = ((item, self.min_depth(item)) for item in self.itemid_recipes)
        return [(item, d) for item, d in depths if d >= at_least]

    def tree_recipes(self, name: str) -> list[Recipe]:
        """Every recipe reachable from ``name`` through recipe inputs, in traversal order.

        Equal to AgentGym's 2025 ``traverse_recipe_tree`` (agentenv-textcraft, commit 640f8bc):
        depth-first, an item's recipes followed by the trees of their inputs, cycles cut at an
        ancestor, the stored lists untouched. It is not ADaPT's traversal (also AgentGym's
        2024 one), which extended the stored recipe list while iterating over it, so it also
        walked the recipes it had just appended and changed the tree for later resets.
        Duplicates are kept (they weight the distractor draw as in the original).
        """
        out: list[Recipe] = []

        def visit(item: str, ancestors: frozenset[str]) -> None:
            if item in ancestors:
                return
            recipes = self.recipes_for(item)
            out.extend(recipes)
            inner = ancestors | {item}
            for r in recipes:
                for i in r.input_items:
                    visit(i.item_tag.name, inner)

        visit(name, frozenset())
        return out

    def item_uses(self) -> dict[str, list[Recipe]]:
        """Input name -> the recipes that use it (tagged recipes appear twice, as in the
        original)."""
        uses: dict[str, list[Recipe]] = {}
        for index in (self.itemid_recipes, self.tag_recipes):
            for recipes in index.values():
                for r in recipes:
                    for i in r.input_items:
                        uses.setdefault(i.item_tag.name, []).append(r)
        return uses

    def craft(self, inputs: Iterable[ItemCount], output_id: str | None) -> ItemCount | None:
        """The stack a crafting attempt yields, or None if no recipe of ``output_id`` matches.

        A recipe matches when every one of its inputs is given with exactly its count (a tag
        input by any one item of the tag) and nothing else is given.
        """
        given = list(inputs)
        for recipe in self.itemid_recipes.get(output_id or "", ()):
            remaining = list(given)
            for need in recipe.input_items:
                found = self._find_matching(need.item_tag, remaining)
                if found is None or found.count != need.count:
                    break
                remaining.remove(found)
            else:
                if not remaining:
                    return recipe.output_item
        return None

    def _find_matching(self, need: ItemTag, given: list[ItemCount]) -> ItemCount | None:
        for stack in given:
            if need.item_id is not None:
                if stack.item_tag.item_id == need.item_id:
                    return stack
            elif need.tag is not None and (
                stack.item_tag.tag == need.tag
                or self.item_id_to_tag.get(stack.item_tag.item_id or "") == need.tag
            ):
                return stack
        return None


@lru_cache(maxsize=1)
def default_tree() -> CraftingTree:
    """The crafting tree of the packaged Minecraft 1.16.5 recipes (built once per process)."""
    return CraftingTree(_packaged_recipes())
