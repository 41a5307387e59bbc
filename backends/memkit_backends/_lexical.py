"""An incremental BM25 inverted index over row numbers, for the in-process backends."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import numpy.typing as npt

__all__ = ["Bm25Index"]

_K1 = 1.2
_B = 0.75


class Bm25Index:
    """Okapi BM25 over pre-tokenized documents; rows are added, replaced and removed in place."""

    def __init__(self) -> None:
        self._postings: dict[str, dict[int, int]] = {}
        self._doc_terms: dict[int, Counter[str]] = {}
        self._doc_len: dict[int, int] = {}
        self._total_len = 0

    def __len__(self) -> int:
        return len(self._doc_len)

    def add(self, row: int, tokens: list[str]) -> None:
        self.remove(row)
        if not tokens:
            return
        terms = Counter(tokens)
        for term, tf in terms.items():
            self._postings.setdefault(term, {})[row] = tf
        self._doc_terms[row] = terms
        self._doc_len[row] = len(tokens)
        self._total_len += len(tokens)

    def remove(self, row: int) -> None:
        terms = self._doc_terms.pop(row, None)
        if terms is None:
            return
        for term in terms:
            posting = self._postings[term]
            del posting[row]
            if not posting:
                del self._postings[term]
        self._total_len -= self._doc_len.pop(row)

    def score(self, tokens: list[str]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """(rows, raw BM25 scores) of every document sharing a term with the query."""
        n_docs = len(self._doc_len)
        if n_docs == 0 or not tokens:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        avg_len = self._total_len / n_docs
        totals: dict[int, float] = {}
        for term, query_tf in Counter(tokens).items():
            posting = self._postings.get(term)
            if not posting:
                continue
            idf = math.log(1.0 + (n_docs - len(posting) + 0.5) / (len(posting) + 0.5)) * query_tf
            for row, tf in posting.items():
                norm = _K1 * (1.0 - _B + _B * self._doc_len[row] / avg_len)
                totals[row] = totals.get(row, 0.0) + idf * tf * (_K1 + 1.0) / (tf + norm)
        rows = np.fromiter(totals.keys(), dtype=np.int64, count=len(totals))
        scores = np.fromiter(totals.values(), dtype=np.float32, count=len(totals))
        return rows, scores
