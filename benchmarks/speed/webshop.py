"""WebShop-v0 speed: search latency, index build, reset, step, snapshot and restore.

Targets: a search (BM25 top 50 over the 1k products) well under WebShop's own Lucene
round trip, measured against the plain Python way of scoring every document in the same run;
reset and step in the sub-millisecond range; restore >= 10x faster than replaying from reset.
"""

from __future__ import annotations

import math
import time
from collections import Counter

from agentenvs.benchmarks.speed.timing import SpeedRow, per_call, snapshot_times, step_time_along
from agentenvs.webshop import WebShopEnv, default_catalog
from agentenvs.webshop.analysis import analyze
from agentenvs.webshop.catalog import product_document
from agentenvs.webshop.expert import WebShopExpert
from agentenvs.webshop.search import BM25Index, byte4_to_int, int_to_byte4

__all__ = ["bench"]

ENV_ID = "WebShop-v0"


class _NaiveBM25:
    """The obvious Python BM25 (Lucene's formula in doubles): loop over every document."""

    def __init__(self, ids: list[str], texts: list[str]) -> None:
        self.ids = ids
        self.tfs = [Counter(analyze(t)) for t in texts]
        lengths = [sum(c.values()) for c in self.tfs]
        self.avgdl = sum(lengths) / len(lengths)
        self.dls = [byte4_to_int(int_to_byte4(n)) for n in lengths]
        self.df = Counter(term for c in self.tfs for term in c)

    def search(self, query: str, k: int = 50) -> list[str]:
        n = len(self.ids)
        terms = Counter(analyze(query))
        scored = []
        for doc, tf in enumerate(self.tfs):
            score = 0.0
            for term, boost in terms.items():
                if term in tf:
                    idf = math.log(1 + (n - self.df[term] + 0.5) / (self.df[term] + 0.5))
                    norm = 0.9 * (0.6 + 0.4 * self.dls[doc] / self.avgdl)
                    score += boost * idf * tf[term] / (tf[term] + norm)
            if score > 0:
                scored.append((-score, self.ids[doc]))
        return [asin for _, asin in sorted(scored)[:k]]


def _browsing_actions(env: WebShopEnv, task_id: str) -> list[str]:
    """The expert's episode without Buy Now, plus a look at page 2 and at the features."""
    expert = WebShopExpert()
    env.reset(options={"task_id": task_id})
    actions: list[str] = []

    def do(action: str) -> None:
        actions.append(action)
        env.step(action)

    do(expert.act(env).action)  # the search
    do("click[next >]")
    do("click[< prev]")
    while True:
        action = expert.act(env).action
        if action == "click[buy now]":
            return actions
        do(action)
        if env.session_view().page == "item" and "click[features]" not in actions:
            do("click[features]")
            do("click[< prev]")


def bench(quick: bool = False) -> list[SpeedRow]:
    budget = 0.1 if quick else 0.5
    catalog = default_catalog()
    ids = [p["asin"] for p in catalog.products]
    texts = [product_document(p) for p in catalog.products]
    start = time.perf_counter()
    BM25Index(ids, texts)
    build = time.perf_counter() - start
    queries = [catalog.by_asin[g.asin]["instruction"].lower() for g in catalog.goals[:200]]
    cursor = iter(range(10**12))
    search = per_call(
        lambda: catalog.index.search(queries[next(cursor) % len(queries)]), budget_s=budget
    )
    naive = _NaiveBM25(ids, texts)
    naive_time = per_call(
        lambda: naive.search(queries[next(cursor) % len(queries)]), budget_s=budget, repeats=3
    )

    env = WebShopEnv(max_turns=10**6)
    test_ids = env.task_ids("test")
    reset = per_call(
        lambda: env.reset(options={"task_id": test_ids[next(cursor) % 500]}), budget_s=budget
    )
    task_id = "synthetic/1"
    actions = _browsing_actions(env, task_id)
    step_time = step_time_along(env, task_id, actions, budget_s=budget)
    snapshot, restore, replay = snapshot_times(env, task_id, actions, budget_s=budget)
    return [
        SpeedRow(
            ENV_ID,
            "search (BM25 top 50, one query)",
            search,
            "plain Python BM25 over all docs",
            naive_time,
            "<= 2 ms",
            search <= 2e-3,
        ),
        SpeedRow(
            ENV_ID,
            "index build (1k products, once per process)",
            build,
            target="<= 2 s",
            met=build <= 2.0,
        ),
        SpeedRow(ENV_ID, "reset (test split)", reset, target="<= 1 ms", met=reset <= 1e-3),
        SpeedRow(
            ENV_ID,
            f"step (a browsing episode: {len(actions)} actions, 3 searches)",
            step_time,
            target="<= 1 ms",
            met=step_time <= 1e-3,
        ),
        SpeedRow(ENV_ID, "snapshot", snapshot),
        SpeedRow(
            ENV_ID,
            f"restore vs replay of {len(actions)} steps",
            restore,
            f"replay {len(actions)} steps",
            replay,
            ">= 10x faster",
            replay / restore >= 10,
        ),
    ]
