"""Reranking a server's candidates with memkit's kernel, and knowing when the candidates suffice.

Servers return candidates by their own similarity (ANN) and text search; the
hybrid score also weighs recency and importance, so a row outside both
candidate lists can still belong in the top k. ``Candidates.is_exact`` bounds
the best score such a row could reach; when the k-th hit beats the bound the
answer is exact, otherwise the caller fetches deeper lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memkit.backend import Hit, Query, Record
from memkit_backends._columnar import ColumnarCollection

__all__ = ["Candidates"]


@dataclass
class Candidates:
    depth: int
    """How many rows each list was asked for."""
    records: dict[str, Record] = field(default_factory=dict)
    lexical: dict[str, float] = field(default_factory=dict)
    """Raw text-search score per id, for every row of the lexical list."""
    similarity_floor: float | None = None
    """Similarity of the last row of a full similarity list; None when the list held every row."""
    lexical_floor: float | None = None
    """Raw score of the last row of a full lexical list; None when it held every match."""

    def rerank(self, query: Query) -> list[Hit]:
        collection = ColumnarCollection(index_text=False)
        collection.upsert(list(self.records.values()))
        return collection.query(query, external_lexical=self.lexical if query.text else None)

    def is_exact(self, query: Query, hits: list[Hit]) -> bool:
        """True when no row outside the candidates can outscore the k-th hit."""
        has_vector = query.vector is not None
        if has_vector and self.similarity_floor is None:
            return True  # the similarity list held every row in scope
        if len(hits) < query.k:
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
        return hits[-1].scores.final >= bound
