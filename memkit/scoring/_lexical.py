"""An incremental BM25 inverted index over row numbers, scored by a numba kernel.

Postings are growable arrays per term of (row, term frequency, row version).
Replacing or removing a document bumps its row's version instead of searching
every posting list for it; stale entries are skipped by the kernel and swept
out of a term's list once they are half of it.

Each row's own terms (ids) and frequencies are also kept, in flat arrays: a scope of 1,000 rows
among 100k is scored from its rows' terms, not by walking every posting of each query term
(a common word's list holds a posting for most of the collection).
"""

from __future__ import annotations

import math
import struct
import sys
from array import array
from collections import Counter
from collections.abc import Sequence
from itertools import chain
from typing import TypeVar

import msgspec
import numpy as np
import numpy.typing as npt
from numba import njit

__all__ = ["K1", "B", "Bm25Index"]

K1 = 1.2
B = 0.75
_Item = TypeVar("_Item", bound=np.generic)


@njit(cache=True, nogil=True)
def _accumulate(  # noqa: PLR0917 - numba kernels take positional arguments
    rows: npt.NDArray[np.int32],
    tfs: npt.NDArray[np.float32],
    versions: npt.NDArray[np.uint32],
    weight: float,
    doc_len: npt.NDArray[np.float32],
    doc_version: npt.NDArray[np.uint32],
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


@njit(cache=True, nogil=True)
def _score_rows(  # noqa: PLR0917 - numba kernels take positional arguments
    rows: npt.NDArray[np.int64],
    starts: npt.NDArray[np.int64],
    data: npt.NDArray[np.int32],
    query_terms: npt.NDArray[np.int32],
    weights: npt.NDArray[np.float64],
    avg_len: float,
    out: npt.NDArray[np.float32],
) -> int:
    """``_accumulate`` for every query term, over ``rows`` only, from each row's slice of ``data`` (see
    ``_RowTerms``): the same arithmetic in the same order (query term by query term, the lengths and
    frequencies as float32, a float32 sum), so the same scores."""
    live = 0
    n_query = query_terms.shape[0]
    mask = np.uint64(0)  # one bit per query term's id mod 64: most of a row's terms are ruled out by it
    for q in range(n_query):
        mask |= np.uint64(1) << np.uint64(query_terms[q] & 63)
    tf_at = np.zeros(n_query, np.int64)  # where the row holds each query term's frequency (0: not there)
    for r in range(rows.shape[0]):
        row = rows[r]
        if row >= starts.shape[0] or starts[row] < 0:  # a row without text
            continue
        start = starts[row]
        for j in range(start + 2, start + 2 + 2 * data[start], 2):
            term = data[j]
            if (mask >> np.uint64(term & 63)) & np.uint64(1):
                for q in range(n_query):
                    if term == query_terms[q]:
                        tf_at[q] = j + 1
        norm = K1 * (1.0 - B + B * np.float32(data[start + 1]) / avg_len)
        for q in range(n_query):
            if tf_at[q]:
                tf = np.float32(data[tf_at[q]])
                out[row] += weights[q] * tf * (K1 + 1.0) / (tf + norm)
                live += 1
                tf_at[q] = 0
    return live


_EVERY_ROW = np.zeros(0, np.uint8)
_PACK_ROW = struct.Struct("=i").pack
_PACK_TF = struct.Struct("=f").pack
_PACK_VERSION = struct.Struct("=I").pack
_FEW_ROWS = 16
_ROW_COST_IN_POSTINGS = 40
"""A row scored from its own terms costs about as much as this many postings (measured at 100k rows)."""


class _Postings(msgspec.Struct, gc=False):
    """The postings of a term held by more than one row: rows (int32), term frequencies (float32) and row
    versions (uint32; 64-bit rows and versions were ~8 MB more at 100k notes), each column a
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

    @classmethod
    def empty(cls) -> _Postings:
        return cls(bytearray(), bytearray(), bytearray())

    @property
    def count(self) -> int:
        return len(self.rows) // 4

    def extend(self, triples: list[int]) -> None:
        """Appends (row, tf, version) triples, given flat."""
        if len(triples) == 3:  # most terms of a batch (a name, a number, a rare word): packed directly, 5x faster
            self.rows += _PACK_ROW(triples[0])
            self.tfs += _PACK_TF(triples[1])
            self.versions += _PACK_VERSION(triples[2])
            return
        self.rows += array("i", triples[0::3])
        self.tfs += array("f", triples[1::3])
        self.versions += array("I", triples[2::3])

    def views(self) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.float32], npt.NDArray[np.uint32]]:
        return (np.frombuffer(self.rows, np.int32), np.frombuffer(self.tfs, np.float32),
                np.frombuffer(self.versions, np.uint32))  # fmt: skip

    def sweep(self, doc_version: npt.NDArray[np.uint32]) -> None:
        rows, tfs, versions = self.views()
        keep = doc_version[rows] == versions
        kept = rows[keep].tobytes(), tfs[keep].tobytes(), versions[keep].tobytes()
        del rows, tfs, versions  # the views go before the columns are replaced
        self.rows, self.tfs, self.versions = bytearray(kept[0]), bytearray(kept[1]), bytearray(kept[2])


def _grown(values: npt.NDArray[_Item], used: int, size: int) -> npt.NDArray[_Item]:
    """``values`` in a new array of ``size`` entries, its first ``used`` kept and the rest zero. Not
    ``np.resize``: it fills the new tail with copies, so all of a doubled array was resident (~8 MB of the
    term slices at 100k rows); zeros from ``np.zeros`` take memory only once written."""
    grown = np.zeros(size, values.dtype)
    grown[:used] = values[:used]
    return grown


class _RowTerms:
    """Each row's length in tokens and its distinct (term id, frequency) pairs, as one slice of a flat growing
    int32 array: ``[n_terms, length, term, tf, term, tf, ...]``, so that scoring a row reads one place (its
    start, then its slice; three columns read per row made a scope's 1,000 scattered rows wait on memory). A
    row written again gets a new slice; the old one is garbage until the array is packed (half of it)."""

    def __init__(self) -> None:
        self.starts = np.full(64, -1, np.int64)  # -1: no terms (never written, removed, or empty)
        self.data = np.zeros(1024, np.int32)
        self.used = 0  # entries of ``data`` written so far
        self.live = 0  # of which rows still point at

    def of(self, row: int) -> npt.NDArray[np.int32]:
        """The row's term ids (empty if it has none)."""
        start = int(self.starts[row]) if row < self.starts.shape[0] else -1
        if start < 0:
            return self.data[:0]
        return self.data[start + 2 : start + 2 + 2 * int(self.data[start]) : 2]

    def drop(self, row: int) -> None:
        if row < self.starts.shape[0] and self.starts[row] >= 0:
            self.live -= 2 + 2 * int(self.data[self.starts[row]])
            self.starts[row] = -1

    def append(self, rows: list[int], counts: list[int], slices: list[int]) -> None:
        """Rows (not held: dropped first), their numbers of terms, and their slices one after another."""
        if not rows:
            return
        self._fit(max(rows) + 1, len(slices))
        if len(rows) < _FEW_ROWS:  # a store(): numpy's per-call cost was a third of indexing one text
            at = self.used
            for row, count in zip(rows, counts, strict=True):
                self.starts[row] = at
                at += 2 + 2 * count
        else:
            sizes = 2 + 2 * np.asarray(counts, np.int64)
            self.starts[np.asarray(rows, np.int64)] = self.used + np.cumsum(sizes) - sizes
        self.data[self.used : self.used + len(slices)] = slices
        self.used += len(slices)
        self.live += len(slices)

    def _fit(self, n_rows: int, more: int) -> None:
        if n_rows > self.starts.shape[0]:
            size = max(n_rows, 2 * self.starts.shape[0])
            self.starts = np.concatenate([self.starts, np.full(size - self.starts.shape[0], -1, np.int64)])
        if self.used + more > self.data.shape[0] and self.live * 2 < self.used:
            self._pack()
        if self.used + more > self.data.shape[0]:
            self.data = _grown(self.data, self.used, max(self.used + more, 2 * self.data.shape[0]))

    def _pack(self) -> None:
        """Drop the garbage: live rows' slices moved to the front, in row order."""
        rows = np.flatnonzero(self.starts >= 0)
        old = self.starts[rows]
        sizes = 2 + 2 * self.data[old].astype(np.int64)
        new = np.cumsum(sizes) - sizes
        take = np.repeat(old - new, sizes) + np.arange(int(sizes.sum()))
        self.data[: take.shape[0]] = self.data[take]
        self.starts[rows] = new
        self.used = self.live = int(take.shape[0])


class Bm25Index:
    """Okapi BM25 (k1=1.2, b=0.75) over pre-tokenized documents keyed by row number."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}  # each indexed term's id (reused once its last row is gone)
        self._terms: list[str] = []  # each id's term
        self._free: list[int] = []
        self._df: list[int] = []  # each id's live documents (0: a free id)
        # A term's postings: its ``_Postings`` once two rows have held it; before, the one row's posting in
        # these columns, at the term's id. Most distinct terms of a collection (names, numbers, rare words)
        # are held by one row, and a struct of three buffers each was ~400 bytes a term: 60 MB at 100k notes.
        self._postings: list[_Postings | None] = []
        self._one = (array("i"), array("f"), array("I"))  # row, tf, version
        self._rows = _RowTerms()
        self._n_docs = 0
        self._doc_len = np.zeros(64, np.float32)
        # A row's version goes up by one each time it is removed, wrapping past 2**32: a stale posting is
        # mistaken for live only if its row was rewritten a multiple of 2**32 times before a sweep.
        self._doc_version = np.zeros(64, np.uint32)
        self._total_len = 0

    def __len__(self) -> int:
        return self._n_docs

    def _ensure_row(self, row: int) -> None:
        if row >= self._doc_len.shape[0]:
            size = max(row + 1, self._doc_len.shape[0] * 2)
            self._doc_len = _grown(self._doc_len, self._doc_len.shape[0], size)
            self._doc_version = np.concatenate(
                [self._doc_version, np.zeros(size - self._doc_version.shape[0], np.uint32)]
            )

    def add(self, row: int, tokens: list[str]) -> None:
        """Index ``tokens`` as row ``row``, replacing what the row held."""
        self.add_many([(row, tokens)])

    def add_many(self, docs: Sequence[tuple[int, list[str]]]) -> None:
        """Index each (row, tokens), replacing what the rows held (rows distinct). Postings are gathered per
        term, as a flat list of triples, and appended once each: appending them one by one (three numpy
        scalar writes a posting) was most of loading 100k texts."""
        pending: dict[str, list[int]] = {}
        rows: list[int] = []
        counts: list[int] = []
        slices: list[str | int] = []  # each row's slice, its terms still words
        intern = sys.intern
        for row, _ in docs:  # all first: a term whose last row goes frees its id, which a later row may take
            self.remove(row)
        for row, tokens in docs:
            if not tokens:
                continue
            self._ensure_row(row)
            version = int(self._doc_version[row])
            # Interned: postings are keyed by term, and 100k rows held ~900k copies of a few thousand strings.
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
            slices += (len(terms), len(tokens))
            slices += chain.from_iterable(terms.items())
            rows.append(row)
            counts.append(len(terms))
            self._n_docs += 1
            self._doc_len[row] = len(tokens)
            self._total_len += len(tokens)
        known = self._ids
        ids: dict[str | int, int] = {t: known[t] if t in known else self._id_of(t) for t in pending}  # once a term
        self._rows.append(rows, counts, list(map(ids.get, slices, slices)))  # type: ignore[arg-type]  # words to ids; numbers kept
        for term, triples in pending.items():
            self._add_postings(ids[term], triples)

    def _add_postings(self, term_id: int, triples: list[int]) -> None:
        df = self._df[term_id]
        self._df[term_id] = df + len(triples) // 3
        if df == 0 and len(triples) == 3:  # the term's only row
            self._one[0][term_id], self._one[1][term_id], self._one[2][term_id] = triples
            return
        postings = self._postings[term_id]
        if postings is None:
            postings = self._postings[term_id] = _Postings.empty()
            if df:  # its one row's posting goes first
                postings.extend([self._one[0][term_id], self._one[1][term_id], self._one[2][term_id]])  # type: ignore[list-item]  # a tf
        postings.extend(triples)

    def _id_of(self, term: str) -> int:
        found = self._ids.get(term)
        if found is None:
            found = self._ids[term] = self._free.pop() if self._free else len(self._terms)
            if found == len(self._terms):
                self._terms.append(term)
                self._df.append(0)
                self._postings.append(None)
                for column in self._one:
                    column.append(0)
            else:
                self._terms[found] = term
        return found

    def _views(self, term_id: int) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.float32], npt.NDArray[np.uint32]]:
        postings = self._postings[term_id]
        if postings is not None:
            return postings.views()
        rows, tfs, versions = self._one
        return (np.frombuffer(rows, np.int32, 1, 4 * term_id), np.frombuffer(tfs, np.float32, 1, 4 * term_id),
                np.frombuffer(versions, np.uint32, 1, 4 * term_id))  # fmt: skip

    def _count(self, term_id: int) -> int:
        """The term's postings, live or stale."""
        postings = self._postings[term_id]
        return 1 if postings is None else postings.count

    def remove(self, row: int) -> None:
        ids = self._rows.of(row)
        if ids.shape[0] == 0:
            return
        self._rows.drop(row)
        self._n_docs -= 1
        self._doc_version[row : row + 1] += 1  # every posting of this row is now stale (a slice wraps silently)
        self._total_len -= int(self._doc_len[row])
        self._doc_len[row] = 0
        for term_id in ids.tolist():
            df = self._df[term_id] = self._df[term_id] - 1
            postings = self._postings[term_id]
            if df == 0:
                del self._ids[self._terms[term_id]]
                self._postings[term_id] = None
                self._free.append(term_id)
            elif postings is not None and df * 2 < postings.count:
                postings.sweep(self._doc_version)

    def _by_rows_cheaper(self, rows: npt.NDArray[np.int64], term_ids: list[int]) -> bool:
        """Whether scoring ``rows`` from their own terms costs less than walking the query terms' postings. A
        posting costs ~2 ns (read in order); a row ~100 ns at 100k rows (its slice is a jump in memory) plus
        its slice's length: a user's 1,000 rows among 100k, yes, unless the query's words are rare."""
        per_row = _ROW_COST_IN_POSTINGS + self._rows.live / max(self._n_docs, 1)
        return bool(rows.shape[0] * per_row < sum(map(self._count, term_ids)))

    def score(
        self, tokens: list[str], n_rows: int, rows: npt.NDArray[np.int64] | None = None
    ) -> tuple[npt.NDArray[np.float32], bool]:
        """(raw BM25 per row as a dense array of length ``n_rows``, whether anything matched). ``rows``: score
        only these (a scope's candidates: distinct, each below ``n_rows``); IDF stays the whole index's, so a
        score never depends on them.
        Each term's postings are read in place (concatenating them copied 2 MB per query at 100k rows); or,
        when ``rows`` hold fewer term entries than those postings, each row's own terms."""
        out = np.zeros(n_rows, np.float32)
        n_docs = self._n_docs
        ids, df = self._ids, self._df
        matched = [(ids[t], qtf) for t, qtf in Counter(tokens).items() if t in ids]
        if n_docs == 0 or not matched:
            return out, False
        avg_len = self._total_len / n_docs
        weights = [math.log(1.0 + (n_docs - df[i] + 0.5) / (df[i] + 0.5)) * qtf for i, qtf in matched]
        term_ids = [i for i, _ in matched]
        if rows is not None and self._by_rows_cheaper(rows, term_ids):
            found = _score_rows(rows, self._rows.starts, self._rows.data, np.array(term_ids, np.int32),
                                np.array(weights, np.float64), avg_len, out)  # fmt: skip
            return out, found > 0
        wanted = _EVERY_ROW
        if rows is not None:
            wanted = np.zeros(max(n_rows, self._doc_len.shape[0]), np.uint8)
            wanted[rows] = 1
        live = 0
        for term_id, idf in zip(term_ids, weights, strict=True):
            live += _accumulate(*self._views(term_id), idf, self._doc_len, self._doc_version, avg_len, wanted, out)
        return out, live > 0
