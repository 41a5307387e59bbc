"""Reranking a server's candidates with memkit's kernel, and knowing when the candidates suffice.

Servers return candidates by their own similarity (ANN) and text search; the
hybrid score also weighs recency and importance, so a row outside both
candidate lists can still belong in the top k. ``Candidates.is_exact`` bounds
the best score such a row could reach; when the k-th hit beats the bound the
answer is exact, otherwise the caller fetches deeper lists.

Candidates carry only numbers (the server's similarity, text score,
importance, timestamp, expiry), held as columns: the kernel reranks them as
one-dimensional "vectors" holding the similarity, so no embedding crosses the
network, and full records are fetched for the final k alone. Columns rather
than an object per row: reading a few hundred rows per list was most of a
query's client time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from memkit.backend import Query, Scores
from memkit.scoring import Columns, ScoreParams, top_k

__all__ = ["NUMBER_COLUMNS", "CandidateSource", "Candidates", "DeepenPolicy", "Table", "exact_top_k", "numbers_table"]

NUMBER_COLUMNS: Final = ("similarity", "importance", "timestamp", "expires_at")
"""Columns of a candidate table, in order; expires_at is +inf for rows that never expire."""
_SIMILARITY, _IMPORTANCE, _TIMESTAMP, _EXPIRES = range(4)
_ONE = np.ones(1, np.float32)

Table = npt.NDArray[np.float64]


def numbers_table(rows: Sequence[Sequence[float | None]]) -> Table:
    """A candidate table from (similarity, importance, timestamp, expires_at or None) rows."""
    table = np.array(rows, dtype=np.float64).reshape(-1, 4)  # None becomes NaN
    table[np.isnan(table[:, _EXPIRES]), _EXPIRES] = math.inf
    return table


def _recency(timestamps: Table, query: Query) -> Table:
    return np.exp(-np.maximum(query.now - timestamps, 0.0) * (math.log(2.0) / query.half_life_s))


class Candidates:
    """Rows a server returned for one query: ids, a table of their numbers, and raw text scores."""

    def __init__(self) -> None:
        self.lexical: dict[str, float] = {}
        """Raw text-search score per id, for every row of the lexical list."""
        self.similarity_floor: float | None = None
        """Similarity of the last row of a full similarity list; None when the list held every row."""
        self.lexical_floor: float | None = None
        """Raw score of the last row of a full lexical list; None when it held every match."""
        self.lexical_top: float | None = None
        """The best raw text score in the query's scope, where filters kept it out of ``lexical``."""
        self._ids: list[str] = []
        self._position: dict[str, int] = {}
        self._blocks: list[Table] = []
        self._table: Table = np.empty((0, 4), np.float64)

    def top_lexical(self) -> float:
        """What text scores are divided by: the best in scope whatever the filters, as on every backend
        (a filtered query's scores then compare with an unfiltered one's, which the neighbour boost needs)."""
        return max(self.lexical_top or 0.0, max(self.lexical.values(), default=0.0))

    def add(self, ids: Sequence[str], table: Table) -> None:
        """Rows with their numbers (columns as ``NUMBER_COLUMNS``); an id already held keeps its first row."""
        if not self._ids:
            position = dict(zip(ids, range(len(ids)), strict=True))
            if len(position) == len(ids):  # a first list, or a whole scope: distinct ids, one C-level pass
                self._position, self._ids = position, list(ids)
                self._blocks.append(table)
                return
        keep = []
        for at, row_id in enumerate(ids):
            if row_id not in self._position:
                self._position[row_id] = len(self._ids)
                self._ids.append(row_id)
                keep.append(at)
        if keep:
            self._blocks.append(table if len(keep) == len(ids) else table[keep])

    @property
    def table(self) -> Table:
        if self._blocks:
            self._table = np.concatenate([self._table, *self._blocks])
            self._blocks = []
        return self._table

    def rows_of(self, ids: Sequence[str]) -> Table:
        """A copy of the rows of ``ids`` (each must be held)."""
        return self.table[[self._position[i] for i in ids]].reshape(-1, 4)

    def rank(self, query: Query) -> list[tuple[str, Scores]]:
        """The top ``query.k`` candidate ids by the fused kernel, with their per-signal scores."""
        n = len(self._ids)
        if not n:
            return []
        order = sorted(range(n), key=self._ids.__getitem__)  # ties break by id, as on every backend
        table = self.table[order]
        ids = [self._ids[at] for at in order]
        columns = Columns(
            n,
            np.ascontiguousarray(table[:, _SIMILARITY : _SIMILARITY + 1], np.float32),
            np.ones(n, np.float32),
            np.ascontiguousarray(table[:, _IMPORTANCE], np.float32),
            np.ascontiguousarray(table[:, _TIMESTAMP]),
            np.ascontiguousarray(table[:, _EXPIRES]),
            np.ones(n, np.uint8),
            np.full((3, n), -1, np.int32),
        )
        top_lexical = self.top_lexical()
        lexical = None
        if query.text and top_lexical > 0:
            lexical = (np.array([self.lexical.get(i, 0.0) for i in ids]) / top_lexical).astype(np.float32)
        params = ScoreParams.from_query(query)
        best = top_k(columns, params, query.k, query=_ONE if query.vector is not None else None, lexical=lexical)
        rows = best.rows.tolist()
        recency = _recency(table[rows, _TIMESTAMP], query).tolist()
        ranked = []
        for at, (row, final, similarity) in enumerate(zip(rows, best.final.tolist(), best.similarity.tolist(),
                                                          strict=True)):  # fmt: skip
            scores = Scores(final=final, similarity=similarity,
                            lexical=0.0 if lexical is None else float(lexical[row]),
                            recency=recency[at], importance=float(table[row, _IMPORTANCE]))  # fmt: skip
            ranked.append((ids[row], scores))
        return ranked

    def unresolved(
        self, query: Query, *, text_truncated: bool, text_rows: Candidates | None = None
    ) -> tuple[list[str], list[str]]:
        """Ids that need a second look, and only those that could still reach the top k.

        Returns (text matches outside the similarity list, which lack their similarity, and without
        ``text_rows`` their importance and timestamp too; similarity-list rows outside a truncated text
        list, which lack their text score). A row whose best possible score is below the k-th best
        guaranteed score cannot be in the top k, so it is not fetched (the threshold idea of Fagin's
        algorithms). ``text_rows`` holds the text matches' numbers where the server returned them.
        """
        text_only = [i for i in self.lexical if i not in self._position]
        no_text = [i for i in self._ids if i not in self.lexical] if text_truncated else []
        w = query.weights
        if min(w.similarity, w.lexical, w.recency, w.importance) < 0 or len(self._ids) < query.k:
            return text_only, no_text
        top = self.top_lexical()
        scale = w.lexical / top if query.text and top > 0 else 0.0
        table = self.table
        partial = w.similarity * table[:, _SIMILARITY] + w.recency * _recency(table[:, _TIMESTAMP], query)
        partial += w.importance * table[:, _IMPORTANCE]
        guaranteed = partial + scale * np.array([self.lexical.get(i, 0.0) for i in self._ids])
        guaranteed[table[:, _EXPIRES] <= query.now] = -math.inf  # the kernel drops expired rows
        if int(np.count_nonzero(guaranteed > -math.inf)) < query.k:
            return text_only, no_text
        threshold = float(np.partition(guaranteed, -query.k)[-query.k]) - 1e-6  # float32 kernel, float64 here
        if text_truncated and self.lexical_floor is not None:
            best = (partial + scale * self.lexical_floor).tolist()
            no_text = [i for i, b in zip(self._ids, best, strict=True) if i not in self.lexical and b >= threshold]
        return [i for i, c in zip(text_only, self._ceilings(query, text_only, text_rows, scale), strict=True)
                if c >= threshold], no_text  # fmt: skip

    def _ceilings(self, query: Query, ids: list[str], known: Candidates | None, scale: float) -> list[float]:
        """The best score each text match outside the similarity list could reach."""
        w = query.weights
        best_similarity = self.similarity_floor if self.similarity_floor is not None else 0.0
        rest = np.full(len(ids), w.recency + w.importance)
        if known is not None:
            where = np.array([known._position.get(i, -1) for i in ids], np.int64)
            found = where >= 0
            rows = known.table[where[found]]
            rest[found] = w.recency * _recency(rows[:, _TIMESTAMP], query) + w.importance * rows[:, _IMPORTANCE]
        lexical = np.array([self.lexical[i] for i in ids], np.float64)
        return (w.similarity * best_similarity + rest + scale * lexical).tolist()  # type: ignore[no-any-return]

    def is_exact(self, query: Query, ranked: list[tuple[str, Scores]]) -> bool:
        """True when no row outside the candidates can outscore the k-th hit."""
        has_vector = query.vector is not None
        if has_vector and self.similarity_floor is None:
            return True  # the similarity list held every row in scope
        if len(ranked) < query.k:
            return False
        weights = query.weights
        best_similarity = self.similarity_floor if has_vector and self.similarity_floor is not None else 0.0
        top_lexical = self.top_lexical()
        best_lexical = 0.0
        if query.text and top_lexical > 0 and self.lexical_floor is not None:
            best_lexical = self.lexical_floor / top_lexical
        bound = (
            weights.similarity * best_similarity + weights.lexical * best_lexical + weights.recency + weights.importance
        )
        return ranked[-1][1].final >= bound


class DeepenPolicy(NamedTuple):
    """How a server adapter deepens its candidate lists until the answer is provably exact."""

    first_depth: int
    """Rows per list in the first round (at least 4 k)."""
    growth: int
    """How much deeper each next round looks."""
    max_depth: int
    """Past this the lists stop growing and the whole scope is scored."""
    whole_scope_below: int
    """Scopes up to this many rows are scored whole at once (0: never count first)."""


class CandidateSource(Protocol):
    """What an adapter supplies for one query: its candidate lists at a depth, and its whole scope."""

    async def scope_size(self, up_to: int) -> int:
        """Rows the query may return, counted up to just past ``up_to``."""
        ...

    async def lists(self, depth: int) -> Candidates: ...

    async def whole_scope(self) -> Candidates: ...


async def exact_top_k(source: CandidateSource, query: Query, policy: DeepenPolicy) -> list[tuple[str, Scores]]:
    """The exact hybrid top k from a server's candidate lists: deeper lists until the k-th hit beats what any
    unseen row could reach (``Candidates.is_exact``), at last every row in scope. Shared by every server
    adapter, so the policy is one decision with its constants beside it, not a loop per adapter."""
    if policy.whole_scope_below > 0 and await source.scope_size(policy.whole_scope_below) <= policy.whole_scope_below:
        return (await source.whole_scope()).rank(query)
    depth = max(policy.first_depth, 4 * query.k)
    while depth <= policy.max_depth:
        candidates = await source.lists(depth)
        ranked = candidates.rank(query)
        if candidates.is_exact(query, ranked):
            return ranked
        depth *= policy.growth
    return (await source.whole_scope()).rank(query)
