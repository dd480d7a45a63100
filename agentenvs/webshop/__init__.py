"""WebShop-v0: WebShop's shopping environment (1k products, synthetic goals), fully offline.

:class:`WebShopEnv` is the environment; :mod:`~agentenvs.webshop.search` reproduces WebShop's
Lucene ranking in Python, :mod:`~agentenvs.webshop.reward` its purchase reward and
:mod:`~agentenvs.webshop.catalog` its products, prices and goals.

Its plugin (``plugin.py`` here, declared in ``pyproject.toml``'s ``agentenvs.envs`` entry
points) names its parts: the class, the scripted expert in ``expert.py`` here, the prompts in
:mod:`agentenvs.agents.prompts.webshop` and the benchmark protocol entries in
:mod:`agentenvs.agents.protocols`. Its speed benchmark is
:mod:`agentenvs.benchmarks.speed.webshop`.
"""

from __future__ import annotations

from agentenvs.plugins import lazy_exports


def _check_dependencies() -> None:
    # regex and jinja2 (the ``webshop`` extra) before the modules that import them: a missing
    # one is one MissingDependencyError naming the extra, at gym.make
    from agentenvs.registration import check_dependencies

    check_dependencies("WebShop-v0")


# name -> the module defining it, imported on first use (importing the package, e.g. for its
# plugin declaration, imports none of them)
_EXPORTS = {
    "Catalog": "catalog",
    "Goal": "catalog",
    "default_catalog": "catalog",
    "WebShopEnv": "env",
    "parse_action": "env",
    "parse_fields": "env",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _check_dependencies)
