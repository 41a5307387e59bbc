"""An incremental BM25 inverted index over row numbers, scored by a numba kernel.

Postings are growable arrays per term of (row, term frequency, row version).
Replacing or removing a document bumps its row's version instead of searching
every posting list for it; stale entries are skipped by the kernel and swept
out of a term's list once they are half of it.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections import Counter
from collections.abc import Sequence

import msgspec
import numpy as np
import numpy.typing as npt
from numba import njit

__all__ = ["K1", "B", "Bm25Index"]

K1 = 1.2
B = 0.75


@njit(cache=True, nogil=True)
def _accumulate(  # noqa: PLR0917 - numba kernels take positional arguments
    rows: npt.NDArray[np.int64],
    tfs: npt.NDArray[np.float32],
    versions: npt.NDArray[np.int64],
    weight: float,
    doc_len: npt.NDArray[np.float32],
    doc_version: npt.NDArray[np.int64],
    avg_len: float,
    wanted: npt.NDArray[np.uint8],
    out: npt.NDArray[np.float32],
) -> int:
    """Adds one query term's BM25 contribution into ``out``; returns how many postings were live.
    ``wanted`` (empty: every row) skips rows outside the caller's candidates before any arithmetic."""
    live = 0
    has_wanted = wanted.shape[0] > 0
    for p in range(rows.shape[0]):
        row = rows[p]
        if has_wanted and not wanted[row]:
            continue
        if doc_version[row] != versions[p]:
            continue
        tf = tfs[p]
        norm = K1 * (1.0 - B + B * doc_len[row] / avg_len)
        out[row] += weight * tf * (K1 + 1.0) / (tf + norm)
        live += 1
    return live


_EVERY_ROW = np.zeros(0, np.uint8)


class _Postings(msgspec.Struct, gc=False):
    """One term's postings: rows (int64), term frequencies (float32) and row versions (int64), each column a
    ``bytearray`` of packed values. A batch appends a term's postings with one C call a column, with amortised
    growth (numpy arrays resized and slice-assigned from lists per term per batch were most of a SQLite
    import's BM25 work). Neither the columns nor this struct are tracked by the cycle collector: with
    ``array.array`` columns (which are) 100k rows of text held ~300k of them, and every full collection
    walked them all (a SQLite load of 100k memories spent ~40% of its time in the collector). Scoring reads
    the columns through zero-copy numpy views, which live only inside ``Bm25Index.score`` (a buffer that
    exports a view cannot grow). Columns, not interleaved triples: the kernel read strided triples at half
    the speed."""

    rows: bytearray
    tfs: bytearray
    versions: bytearray
    df: int = 0  # live documents containing the term

    @classmethod
    def empty(cls) -> _Postings:
        return cls(bytearray(), bytearray(), bytearray())

    @property
    def count(self) -> int:
        return len(self.rows) // 8

    def extend(self, triples: list[int]) -> None:
        """Appends (row, tf, version) triples, given flat."""
        self.rows += array("q", triples[0::3])
        self.tfs += array("f", triples[1::3])
        self.versions += array("q", triples[2::3])
        self.df += len(triples) // 3

    def views(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        return (np.frombuffer(self.rows, np.int64), np.frombuffer(self.tfs, np.float32),
                np.frombuffer(self.versions, np.int64))  # fmt: skip

    def sweep(self, doc_version: npt.NDArray[np.int64]) -> None:
        rows, tfs, versions = self.views()
        keep = doc_version[rows] == versions
        kept = rows[keep].tobytes(), tfs[keep].tobytes(), versions[keep].tobytes()
        del rows, tfs, versions  # the views go before the columns are replaced
        self.rows, self.tfs, self.versions = bytearray(kept[0]), bytearray(kept[1]), bytearray(kept[2])


class Bm25Index:
    """Okapi BM25 (k1=1.2, b=0.75) over pre-tokenized documents keyed by row number."""

    def __init__(self) -> None:
        self._postings: dict[str, _Postings] = {}
        self._doc_terms: dict[int, tuple[str, ...]] = {}
        self._doc_len = np.zeros(64, np.float32)
        self._doc_version = np.zeros(64, np.int64)
        self._total_len = 0

    def __len__(self) -> int:
        return len(self._doc_terms)

    def _ensure_row(self, row: int) -> None:
        if row >= self._doc_len.shape[0]:
            size = max(row + 1, self._doc_len.shape[0] * 2)
            self._doc_len = np.resize(self._doc_len, size)
            self._doc_version = np.concatenate(
                [self._doc_version, np.zeros(size - self._doc_version.shape[0], np.int64)]
            )

    def add(self, row: int, tokens: list[str]) -> None:
        """Index ``tokens`` as row ``row``, replacing what the row held."""
        self.add_many([(row, tokens)])

    def add_many(self, docs: Sequence[tuple[int, list[str]]]) -> None:
        """Index each (row, tokens), replacing what the rows held (rows distinct). Postings are gathered per
        term, as a flat list of triples, and appended once each: appending them one by one (three numpy
        scalar writes a posting) was most of loading 100k texts."""
        pending: dict[str, list[int]] = {}
        intern = sys.intern
        for row, tokens in docs:
            self.remove(row)
            if not tokens:
                continue
            self._ensure_row(row)
            version = int(self._doc_version[row])
            # Interned: a row keeps its terms (to unindex it), and 100k rows held ~900k copies of a few
            # thousand strings.
            words = list(map(intern, tokens))
            terms = dict.fromkeys(words, 1)
            if len(terms) < len(words):  # a word said twice: counted (most texts say each word once)
                terms = Counter(words)
            for term, tf in terms.items():
                triples = pending.get(term)
                if triples is None:
                    pending[term] = [row, tf, version]
                else:
                    triples += (row, tf, version)
            self._doc_terms[row] = tuple(terms)
            self._doc_len[row] = len(tokens)
            self._total_len += len(tokens)
        for term, triples in pending.items():
            postings = self._postings.get(term)
            if postings is None:
                postings = self._postings[term] = _Postings.empty()
            postings.extend(triples)

    def remove(self, row: int) -> None:
        terms = self._doc_terms.pop(row, None)
        if terms is None:
            return
        self._doc_version[row] += 1  # every posting of this row is now stale
        self._total_len -= int(self._doc_len[row])
        self._doc_len[row] = 0
        for term in terms:
            postings = self._postings[term]
            postings.df -= 1
            if postings.df == 0:
                del self._postings[term]
            elif postings.df * 2 < postings.count:
                postings.sweep(self._doc_version)

    def score(
        self, tokens: list[str], n_rows: int, rows: npt.NDArray[np.int64] | None = None
    ) -> tuple[npt.NDArray[np.float32], bool]:
        """(raw BM25 per row as a dense array of length ``n_rows``, whether anything matched). ``rows``: score
        only these (a scope's candidates); IDF stays the whole index's, so a score never depends on them.
        Each term's postings are read in place (concatenating them copied 2 MB per query at 100k rows)."""
        out = np.zeros(n_rows, np.float32)
        n_docs = len(self._doc_terms)
        matched = [(self._postings[t], qtf) for t, qtf in Counter(tokens).items() if t in self._postings]
        if n_docs == 0 or not matched:
            return out, False
        wanted = _EVERY_ROW
        if rows is not None:
            wanted = np.zeros(max(n_rows, self._doc_len.shape[0]), np.uint8)
            wanted[rows] = 1
        live, avg_len = 0, self._total_len / n_docs
        for p, qtf in matched:
            idf = math.log(1.0 + (n_docs - p.df + 0.5) / (p.df + 0.5)) * qtf
            live += _accumulate(*p.views(), idf, self._doc_len, self._doc_version, avg_len, wanted, out)
        return out, live > 0
