"""WebShop-v0: WebShop's shopping environment (1k products, synthetic goals), fully offline.

:class:`WebShopEnv` is the environment; :mod:`~agentenvs.webshop.search` reproduces WebShop's
Lucene ranking in Python, :mod:`~agentenvs.webshop.reward` its purchase reward and
:mod:`~agentenvs.webshop.catalog` its products, prices and goals.

Its other parts (docs/architecture.md): the scripted expert in ``expert.py`` here; the prompts
in :mod:`agentenvs.agents.prompts.webshop`; the benchmark protocol entries in
:mod:`agentenvs.agents.protocols`; the speed benchmark in
:mod:`agentenvs.benchmarks.speed.webshop`.
"""

from __future__ import annotations

from agentenvs.registration import check_dependencies

# regex and jinja2 (the ``webshop`` extra) before the modules that import them: a missing one is
# one MissingDependencyError naming the extra, at gym.make
check_dependencies("WebShop-v0")

from agentenvs.webshop.catalog import Catalog, Goal, default_catalog  # noqa: E402
from agentenvs.webshop.env import WebShopEnv, parse_action, parse_fields  # noqa: E402

__all__ = ["Catalog", "Goal", "WebShopEnv", "default_catalog", "parse_action", "parse_fields"]
