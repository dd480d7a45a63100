"""The TextCraft teacher: plans the goal's crafting tree from the commands shown and the inventory.

At every step it replans from the environment's current state (inventory, shown commands), so it
recovers after a restored snapshot or someone else's actions. The plan: fetch every base item the
remaining tree needs (one ``get`` per item, counts summed), then craft bottom-up, one recipe batch
per ``craft``. Among alternative recipes (and the concrete items that can fill a tag input, such
as ``oak planks`` for ``planks``) it picks the one with the fewest actions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agentenvs.expert import Expert, ExpertDecision, ExpertFailure

if TYPE_CHECKING:
    from agentenvs.textcraft.crafting import CraftingTree, Recipe
    from agentenvs.textcraft.env import TextCraftEnv

__all__ = ["TextCraftExpert", "TextCraftPlan", "plan_actions"]

_UNREACHABLE = math.inf


@dataclass
class TextCraftPlan:
    """Base items to fetch (item id -> count, in first-need order) and crafts in order."""

    gets: dict[str, int] = field(default_factory=dict)
    crafts: list[str] = field(default_factory=list)
    craft_outputs: list[str] = field(default_factory=list)

    def actions(self) -> list[str]:
        from agentenvs.textcraft.crafting import item_id_to_str

        gets = [f"get {n} {item_id_to_str(item)}" for item, n in self.gets.items()]
        return gets + self.crafts


class _Planner:
    """Cheapest-plan search over the recipes the task shows."""

    def __init__(self, tree: CraftingTree, shown: set[str], inventory: dict[str, int]) -> None:
        self.tree = tree
        self.shown = shown
        self.inventory = inventory
        self._cost: dict[tuple[str, int], float] = {}

    def gettable(self, item: str) -> bool:
        t = self.tree
        return not t.is_craftable(item) and t.is_valid_item(item) and not t.is_tag(item)

    def recipes(self, item: str) -> list[Recipe]:
        return [r for r in self.tree.itemid_recipes.get(item, ()) if r.recipe_str in self.shown]

    def cost(self, name: str, n: int, visiting: frozenset[str] = frozenset()) -> float:
        """Actions to make ``n`` of ``name`` (an item or a tag) from scratch (an estimate that
        counts one ``get`` per base item and one ``craft`` per recipe batch)."""
        key = (name, n)
        if key in self._cost:
            return self._cost[key]
        if name in visiting:
            return _UNREACHABLE
        inner = visiting | {name}
        if self.tree.is_tag(name):
            best = min((self.cost(m, n, inner) for m in self.members(name)), default=_UNREACHABLE)
        elif self.gettable(name):
            best = 1.0
        else:
            best = _UNREACHABLE
            for r in self.recipes(name):
                batches = math.ceil(n / r.output_item.count)
                total = batches + sum(
                    self.cost(i.item_tag.name, batches * i.count, inner) for i in r.input_items
                )
                best = min(best, total)
        if not visiting:  # only memoise results not cut short by a cycle guard
            self._cost[key] = best
        return best

    def members(self, tag: str) -> list[str]:
        return list(self.tree.items_with_tag(tag))

    def concrete(self, name: str, count: int, inv: dict[str, int]) -> str:
        """The item to use for a recipe input: the item itself, or the best member of a tag."""
        if not self.tree.is_tag(name):
            return name
        members = self.members(name)
        held = [m for m in members if inv.get(m, 0) >= count]
        if held:
            return held[0]
        ranked = sorted(members, key=lambda m: (self.cost(m, count - inv.get(m, 0)), m))
        if not ranked or self.cost(ranked[0], count) == _UNREACHABLE:
            raise ExpertFailure(f"no way to obtain any item of {name}")
        return ranked[0]

    def produce(
        self,
        item: str,
        n: int,
        inv: dict[str, int],
        plan: TextCraftPlan,
        stack: tuple[str, ...] = (),
    ) -> None:
        """Extend ``plan`` so that the simulated inventory ``inv`` holds ``n`` of ``item``."""
        from agentenvs.textcraft.crafting import item_id_to_str

        missing = n - inv.get(item, 0)
        if missing <= 0:
            return
        if self.gettable(item):
            plan.gets[item] = plan.gets.get(item, 0) + missing
            inv[item] = inv.get(item, 0) + missing
            return
        options = [
            r
            for r in self.recipes(item)
            if not any(i.item_tag.name in stack for i in r.input_items)
        ]
        if not options:
            raise ExpertFailure(f"no shown recipe makes {item_id_to_str(item)}")

        def recipe_cost(r: Recipe) -> float:
            batches = math.ceil(missing / r.output_item.count)
            return batches + sum(
                self.cost(i.item_tag.name, batches * i.count) for i in r.input_items
            )

        recipe = min(options, key=recipe_cost)
        out = recipe.output_item.count
        for _ in range(math.ceil(missing / out)):
            parts = []
            for need in recipe.input_items:
                chosen = self.concrete(need.item_tag.name, need.count, inv)
                self.produce(chosen, need.count, inv, plan, stack + (item,))
                parts.append((chosen, need.count))
            for chosen, count in parts:
                inv[chosen] -= count
            inv[item] = inv.get(item, 0) + out
            used = ", ".join(f"{c} {item_id_to_str(x)}" for x, c in parts)
            plan.crafts.append(f"craft {out} {item_id_to_str(item)} using {used}")
            plan.craft_outputs.append(item)


def plan_actions(env: TextCraftEnv) -> TextCraftPlan:
    """The expert's full plan from ``env``'s current state."""
    planner = _Planner(env.tree, set(env.commands), dict(env.inventory))
    plan = TextCraftPlan()
    planner.produce(env.goal, env.inventory.get(env.goal, 0) + 1, dict(env.inventory), plan)
    # every get comes first, so the simulated "fetch on demand" holds at craft time
    return plan


class TextCraftExpert(Expert):
    """Scripted TextCraft teacher (see the module docstring)."""

    env_id = "TextCraft-v0"

    def act(self, env: TextCraftEnv) -> ExpertDecision:  # type: ignore[override]
        from agentenvs.textcraft.crafting import item_id_to_str

        plan = plan_actions(env)
        goal = item_id_to_str(env.goal)
        if plan.gets:
            item, n = next(iter(plan.gets.items()))
            name = item_id_to_str(item)
            thought = (
                f"To craft {goal} I need {n} {name} in total, a base item that I can get directly."
            )
            return ExpertDecision(f"get {n} {name}", thought)
        if plan.crafts:
            output = item_id_to_str(plan.craft_outputs[0])
            if plan.craft_outputs[0] == env.goal:
                thought = f"I have every ingredient, so I craft the goal, {goal}."
            else:
                thought = f"I have the ingredients for {output}, which I need on the way to {goal}."
            return ExpertDecision(plan.crafts[0], thought)
        raise ExpertFailure(f"nothing left to do for {goal}, yet the episode is not over")
