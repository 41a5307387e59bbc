"""Reranking a server's candidates with memkit's kernel, and knowing when the candidates suffice.

Servers return candidates by their own similarity (ANN) and text search; the
hybrid score also weighs recency and importance, so a row outside both
candidate lists can still belong in the top k. ``Candidates.is_exact`` bounds
the best score such a row could reach; when the k-th hit beats the bound the
answer is exact, otherwise the caller fetches deeper lists.

Candidates carry only numbers (the server's similarity, text score,
importance, timestamp, expiry): the kernel reranks them as one-dimensional
"vectors" holding the similarity, so no embedding crosses the network, and
full records are fetched for the final k alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from memkit.backend import Query, Scores
from memkit.scoring import Columns, ScoreParams, top_k

__all__ = ["Candidate", "Candidates"]

_ONE = np.ones(1, np.float32)


@dataclass(frozen=True, slots=True)
class Candidate:
    similarity: float
    importance: float
    timestamp: float
    expires_at: float | None


@dataclass
class Candidates:
    rows: dict[str, Candidate] = field(default_factory=dict)
    lexical: dict[str, float] = field(default_factory=dict)
    """Raw text-search score per id, for every row of the lexical list."""
    similarity_floor: float | None = None
    """Similarity of the last row of a full similarity list; None when the list held every row."""
    lexical_floor: float | None = None
    """Raw score of the last row of a full lexical list; None when it held every match."""

    def rank(self, query: Query) -> list[tuple[str, Scores]]:
        """The top ``query.k`` candidate ids by the fused kernel, with their per-signal scores."""
        ids = sorted(self.rows)
        if not ids:
            return []
        n = len(ids)
        rows = [self.rows[i] for i in ids]
        columns = Columns(
            n,
            np.array([[r.similarity] for r in rows], np.float32),
            np.ones(n, np.float32),
            np.array([r.importance for r in rows], np.float32),
            np.array([r.timestamp for r in rows], np.float64),
            np.array([math.inf if r.expires_at is None else r.expires_at for r in rows], np.float64),
            np.ones(n, np.uint8),
            np.full((3, n), -1, np.int32),
        )
        top_lexical = max(self.lexical.values(), default=0.0)
        lexical = None
        if query.text and top_lexical > 0:
            lexical = np.array([self.lexical.get(i, 0.0) / top_lexical for i in ids], np.float32)
        w = query.weights
        params = ScoreParams(query.now, query.half_life_s, query.min_importance, w.similarity, w.lexical,
                             w.recency, w.importance, query.min_score)  # fmt: skip
        best = top_k(columns, params, query.k, query=_ONE if query.vector is not None else None, lexical=lexical)
        ranked = []
        for row, final, similarity in zip(best.rows.tolist(), best.final.tolist(), best.similarity.tolist(),
                                          strict=True):  # fmt: skip
            candidate = rows[row]
            age = max(query.now - candidate.timestamp, 0.0)
            scores = Scores(final=final, similarity=similarity,
                            lexical=0.0 if lexical is None else float(lexical[row]),
                            recency=0.5 ** (age / query.half_life_s), importance=candidate.importance)  # fmt: skip
            ranked.append((ids[row], scores))
        return ranked

    def unresolved(
        self, query: Query, *, text_truncated: bool, text_rows: Mapping[str, Candidate] | None = None
    ) -> tuple[list[str], list[str]]:
        """Ids that need a second look, and only those that could still reach the top k.

        Returns (text matches outside the similarity list, which lack their similarity, and without
        ``text_rows`` their importance and timestamp too; similarity-list rows outside a truncated text
        list, which lack their text score). A row whose best possible score is below the k-th best
        guaranteed score cannot be in the top k, so it is not fetched (the threshold idea of Fagin's
        algorithms). ``text_rows`` holds the text matches' numbers where the server returned them.
        """
        text_only = [i for i in self.lexical if i not in self.rows]
        no_text = [i for i in self.rows if i not in self.lexical] if text_truncated else []
        w = query.weights
        if min(w.similarity, w.lexical, w.recency, w.importance) < 0 or len(self.rows) < query.k:
            return text_only, no_text
        top = max(self.lexical.values(), default=0.0)
        scale = w.lexical / top if query.text and top > 0 else 0.0
        ids = list(self.rows)
        rows = [self.rows[i] for i in ids]
        similarity = np.array([r.similarity for r in rows])
        importance = np.array([r.importance for r in rows])
        age = np.maximum(query.now - np.array([r.timestamp for r in rows]), 0.0)
        partial = w.similarity * similarity + w.recency * np.exp(-age * (math.log(2.0) / query.half_life_s))
        partial += w.importance * importance
        guaranteed = partial + scale * np.array([self.lexical.get(i, 0.0) for i in ids])
        threshold = float(np.partition(guaranteed, -query.k)[-query.k]) - 1e-6  # float32 kernel, float64 here
        if text_truncated and self.lexical_floor is not None:
            best = partial + scale * self.lexical_floor
            no_text = [i for i, b in zip(ids, best.tolist(), strict=True) if i not in self.lexical and b >= threshold]
        best_similarity = self.similarity_floor if self.similarity_floor is not None else 0.0

        def ceiling(row_id: str) -> float:
            row = (text_rows or {}).get(row_id)
            if row is None:
                return w.similarity * best_similarity + w.recency + w.importance + scale * self.lexical[row_id]
            recency = math.exp(-max(query.now - row.timestamp, 0.0) * (math.log(2.0) / query.half_life_s))
            known = w.recency * recency + w.importance * row.importance + scale * self.lexical[row_id]
            return w.similarity * best_similarity + known

        return [i for i in text_only if ceiling(i) >= threshold], no_text

    def is_exact(self, query: Query, ranked: list[tuple[str, Scores]]) -> bool:
        """True when no row outside the candidates can outscore the k-th hit."""
        has_vector = query.vector is not None
        if has_vector and self.similarity_floor is None:
            return True  # the similarity list held every row in scope
        if len(ranked) < query.k:
            return False
        weights = query.weights
        best_similarity = self.similarity_floor if has_vector and self.similarity_floor is not None else 0.0
        top_lexical = max(self.lexical.values(), default=0.0)
        best_lexical = 0.0
        if query.text and top_lexical > 0 and self.lexical_floor is not None:
            best_lexical = self.lexical_floor / top_lexical
        bound = (
            weights.similarity * best_similarity + weights.lexical * best_lexical + weights.recency + weights.importance
        )
        return ranked[-1][1].final >= bound
