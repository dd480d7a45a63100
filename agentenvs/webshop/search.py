"""WebShop's product search: Lucene 9 BM25 over Anserini's English analyzer, in Python.

WebShop searches with Pyserini's ``LuceneSearcher`` (BM25, ``k1=0.9``, ``b=0.4``) over an index of
one document per product, whose ``contents`` are ``Title``, ``Description``, the first bullet
point and the option text, lowercased (``search_engine/convert_product_file_format.py``). This
module reproduces that ranking bit for bit where it can:

* terms from :func:`~agentenvs.webshop.analysis.analyze` (Anserini's ``DefaultEnglishAnalyzer``);
* Lucene 9's ``BM25Similarity`` in 32-bit floats: ``idf = log(1 + (N - df + 0.5) / (df + 0.5))``,
  ``score = w - w / (1 + tf / (k1 * (1 - b + b * dl / avgdl)))`` with ``w = boost * idf`` (no
  ``(k1 + 1)`` factor since Lucene 8);
* document length ``dl`` as Lucene stores it: one byte per document
  (``SmallFloat.intToByte4``), so lengths of 24 and more are rounded down to 4 significant bits,
  while ``avgdl`` uses the exact total;
* a query is a bag of words: one SHOULD clause per query term, repeated terms merged into one
  clause boosted by their count (Lucene's ``BooleanQuery`` rewrite); clause scores are summed in
  double precision and rounded to a float, as Lucene's disjunction scorers do;
* ties broken by the document id (the ASIN) in ascending order, as Anserini sorts hits.

Against Lucene's own top-50 lists for 1,076 queries over the 1k-product index
(``benchmarks/speed/webshop_search_parity.py``) this reproduces the exact top-10 for all but a
handful of queries; see that script for the current figures.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agentenvs.webshop.analysis import analyze

__all__ = ["BM25Index", "SearchHit", "byte4_to_int", "int_to_byte4"]

K1 = np.float32(0.9)
B = np.float32(0.4)


# ----- Lucene's SmallFloat: a document length in one byte -------------------------------------


def _long_to_int4(i: int) -> int:
    num_bits = i.bit_length()
    if num_bits < 4:
        return i  # subnormal
    shift = num_bits - 4
    encoded = (i >> shift) & 0x07  # keep 4 significant bits, the top one implicit
    return encoded | ((shift + 1) << 3)


def _int4_to_long(i: int) -> int:
    bits = i & 0x07
    shift = (i >> 3) - 1
    return bits if shift == -1 else (bits | 0x08) << shift


_NUM_FREE_VALUES = 255 - _long_to_int4(2**31 - 1)  # 24: lengths below this are exact


def int_to_byte4(i: int) -> int:
    """``SmallFloat.intToByte4``: the one-byte norm Lucene stores for a field of ``i`` terms."""
    if i < 0:
        raise ValueError(f"a length is not negative, got {i}")
    if i < _NUM_FREE_VALUES:
        return i
    return _NUM_FREE_VALUES + _long_to_int4(i - _NUM_FREE_VALUES)


def byte4_to_int(b: int) -> int:
    """``SmallFloat.byte4ToInt``: the length Lucene's BM25 reads back from a norm byte."""
    if b < _NUM_FREE_VALUES:
        return b
    return _NUM_FREE_VALUES + _int4_to_long(b - _NUM_FREE_VALUES)


_LENGTH_TABLE = np.array([byte4_to_int(i) for i in range(256)], dtype=np.float32)


# ----- the index ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchHit:
    """One ranked document: its id and Lucene's (float32) score."""

    doc_id: str
    score: float


class BM25Index:
    """An in-memory Lucene-compatible BM25 index over ``(doc_id, text)`` pairs."""

    def __init__(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        if len(doc_ids) != len(texts):
            raise ValueError(f"{len(doc_ids)} ids for {len(texts)} texts")
        if len(set(doc_ids)) != len(doc_ids):
            raise ValueError("document ids must be unique")
        self.doc_ids = list(doc_ids)
        postings: dict[str, dict[int, int]] = {}
        lengths = np.zeros(len(texts), dtype=np.int64)
        for doc, text in enumerate(texts):
            terms = analyze(text)
            lengths[doc] = len(terms)
            for term, tf in Counter(terms).items():
                postings.setdefault(term, {})[doc] = tf
        self.doc_count = int(np.count_nonzero(lengths))
        total = int(lengths.sum())
        avgdl = np.float32(total / self.doc_count) if self.doc_count else np.float32(1.0)
        # Lucene caches 1 / (k1 * ((1 - b) + b * dl / avgdl)) for each of the 256 norm bytes
        norm_cache = np.float32(1.0) / (K1 * ((np.float32(1.0) - B) + B * _LENGTH_TABLE / avgdl))
        norms = np.array([int_to_byte4(int(n)) for n in lengths], dtype=np.int64)
        self._norm_inverse = norm_cache[norms].astype(np.float32)
        self._postings = {
            term: (
                np.fromiter(docs.keys(), dtype=np.int64, count=len(docs)),
                np.fromiter(docs.values(), dtype=np.float32, count=len(docs)),
            )
            for term, docs in postings.items()
        }
        # rank order of ids, for sorting ties by id with one integer key
        order = sorted(range(len(self.doc_ids)), key=self.doc_ids.__getitem__)
        self._id_rank = np.empty(len(order), dtype=np.int64)
        self._id_rank[order] = np.arange(len(order))

    def idf(self, term: str) -> np.float32:
        """Lucene's BM25 idf of an indexed term (0 documents: not defined, raises KeyError)."""
        df = len(self._postings[term][0])
        n = self.doc_count
        return np.float32(math.log(1 + (n - df + 0.5) / (df + 0.5)))

    def scores(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """``(docs, scores)``: every matching document and its float32 score, unsorted."""
        total = np.zeros(len(self.doc_ids), dtype=np.float64)
        matched = np.zeros(len(self.doc_ids), dtype=bool)
        for term, count in Counter(analyze(query)).items():
            if term not in self._postings:
                continue
            docs, tf = self._postings[term]
            weight = np.float32(count) * self.idf(term)
            part = weight - weight / (np.float32(1.0) + tf * self._norm_inverse[docs])
            total[docs] += part.astype(np.float64)
            matched[docs] = True
        docs = np.flatnonzero(matched)
        return docs, total[docs].astype(np.float32)

    def search(self, query: str, k: int = 50) -> list[SearchHit]:
        """The top ``k`` documents for ``query``: score descending, then id ascending."""
        docs, scores = self.scores(query)
        if len(docs) == 0:
            return []
        order = np.lexsort((self._id_rank[docs], -scores.astype(np.float64)))[:k]
        return [SearchHit(self.doc_ids[docs[i]], float(scores[i])) for i in order]
