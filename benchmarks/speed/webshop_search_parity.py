"""WebShop search parity: our Python BM25 against Lucene's real rankings.

    python -m agentenvs.benchmarks.speed.webshop_search_parity [--gold PATH] [--show 5]

The gold file (``$AGENTENVS_ORIGINALS/webshop/lucene_gold_1k.json`` unless ``--gold``; not part of
the repository) holds, for 1,076 queries, the top 50 ASINs and scores that Lucene 9 BM25 (k1 0.9,
b 0.4) with Anserini's default English analyzer returns over WebShop's 1k-product index. Prints the
share of queries whose top 10 and top 50 are exactly Lucene's, and of hits whose score agrees to
Lucene's four printed decimals.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from agentenvs.webshop import default_catalog

__all__ = ["ParityReport", "main", "measure"]

GOLD_FILE = "webshop/lucene_gold_1k.json"  # under $AGENTENVS_ORIGINALS


@dataclass(frozen=True)
class ParityReport:
    queries: int
    exact_top10: int
    exact_top50: int
    hits: int
    scores_equal: int
    seconds_per_query: float
    mismatches: tuple[str, ...]

    def lines(self) -> list[str]:
        pct = lambda n, d: f"{n}/{d} ({100 * n / d:.2f}%)"  # noqa: E731
        return [
            f"queries: {self.queries}",
            f"exact top-10: {pct(self.exact_top10, self.queries)}",
            f"exact top-50: {pct(self.exact_top50, self.queries)}",
            f"scores equal to 4 decimals: {pct(self.scores_equal, self.hits)}",
            f"search time: {self.seconds_per_query * 1e3:.3f} ms/query",
        ]


def measure(gold_path: Path) -> ParityReport:
    """Run every gold query through our index and compare with Lucene's lists."""
    queries = json.loads(gold_path.read_text())["queries"]
    index = default_catalog().index
    top10 = top50 = hits = equal = 0
    mismatches = []
    start = time.perf_counter()
    results = [index.search(q["query"], 50) for q in queries]
    elapsed = time.perf_counter() - start
    for q, got in zip(queries, results, strict=True):
        ids = [h.doc_id for h in got]
        top10 += ids[:10] == q["top50"][:10]
        top50 += ids == q["top50"]
        if ids != q["top50"]:
            mismatches.append(q["query"])
        for hit, score in zip(got, q.get("scores", []), strict=False):
            hits += 1
            equal += round(hit.score, 4) == score
    return ParityReport(
        len(queries), top10, top50, hits, equal, elapsed / len(queries), tuple(mismatches)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    originals = os.environ.get("AGENTENVS_ORIGINALS")
    default = Path(originals) / GOLD_FILE if originals else None
    parser.add_argument("--gold", type=Path, default=default, help="Lucene's rankings")
    parser.add_argument("--show", type=int, default=5, help="list this many mismatching queries")
    args = parser.parse_args(argv)
    if args.gold is None or not args.gold.exists():
        parser.error(f"no gold file at {args.gold}; pass --gold PATH")
    report = measure(args.gold)
    print("\n".join(report.lines()))
    for query in report.mismatches[: args.show]:
        print(f"  differs: {query!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
