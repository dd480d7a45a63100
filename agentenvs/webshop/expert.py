"""The WebShop-v0 expert: search the instruction, find the target, pick its options, buy.

It acts from the environment's state (the goal's product and options, the session's page and
results), so it recovers from any reachable state: a results page without the target leads to the
next pages, then to a search for the product's title; a wrong product or a detail page leads back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentenvs.expert import Expert, ExpertDecision, ExpertFailure

if TYPE_CHECKING:
    from agentenvs.core import TextEnv

__all__ = ["WebShopExpert"]

_BUTTONS = frozenset(
    {
        "back to search",
        "< prev",
        "next >",
        "description",
        "features",
        "reviews",
        "attributes",
        "buy now",
        "search",
    }
)


class WebShopExpert(Expert):
    """Scripted teacher for ``WebShop-v0`` (see the module docstring)."""

    env_id = "WebShop-v0"

    def act(self, env: TextEnv) -> ExpertDecision:
        from agentenvs.webshop import WebShopEnv

        ws = env.unwrapped
        if not isinstance(ws, WebShopEnv):
            raise ExpertFailure(f"WebShopExpert needs WebShop-v0, got {type(ws).__name__}")
        if ws.done:
            raise ExpertFailure("the episode is over")
        goal = ws.goal()
        target = goal.asin
        title_query = ws.catalog.by_asin[target]["Title"].lower()
        s = ws.session_view()
        if s.page == "search" or s.query is None:
            return ExpertDecision(f"search[{goal.instruction_text}]", "I search the instruction.")
        if s.page == "results":
            if target in s.page_asins:
                return ExpertDecision(f"click[{target.lower()}]", f"{target} is the one I need.")
            if target in s.results:
                before = s.results.index(target) < (s.page_number or 1) * 10
                if before and "< prev" in s.clickables:
                    return ExpertDecision("click[< prev]", "The product was on an earlier page.")
                return ExpertDecision("click[next >]", "It is not on this page; next page.")
            if s.query != title_query:
                return ExpertDecision(f"search[{title_query}]", "Not found; I search its title.")
            raise ExpertFailure(f"{target} is not found even by its title")
        if s.page == "detail":
            return ExpertDecision("click[< prev]", "Back to the product page.")
        if s.page == "item":
            if s.asin != target:
                return ExpertDecision("click[< prev]", "This is not the product I need; back.")
            for name, value in goal.goal_options.items():
                settable = s.clickables.get(value) == name and value not in _BUTTONS
                if s.options.get(name) != value and settable:
                    return ExpertDecision(f"click[{value}]", f"I choose {name}: {value}.")
            return ExpertDecision("click[buy now]", "Everything matches; I buy it.")
        raise ExpertFailure(f"no plan for page {s.page!r}")
