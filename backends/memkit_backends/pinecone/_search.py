"""One hybrid query against Pinecone: similarity lists as candidates for memkit's exact rerank.

Pinecone has no BM25, so the text of a query is not scored here (``text_search=False``: every row's lexical
score is 0, in the lists and outside them alike, so the exactness bound still holds). Candidates are the
query's nearest vectors with their metadata (importance, timestamp, expiry), with the scope, the filters,
expiry and the minimum importance in Pinecone's filter; ``exact_top_k`` deepens the list until the k-th hit
beats what any unseen row could reach, and past ``POLICY.max_depth`` scores the whole scope, read by
metadata filter with its vectors.

A record without a vector is stored with a placeholder vector and ``_nov``: its similarity is 0 wherever
it appears, and an unseen one can reach 0, so the similarity floor of a list is never taken below 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np

from memkit.backend import Query, Scores
from memkit_backends._server.rerank import Candidates, DeepenPolicy, exact_top_k, numbers_table
from memkit_backends.pinecone._filters import query_filter
from memkit_backends.pinecone._io import IndexIO
from memkit_backends.pinecone._layout import NO_EXPIRY, record_id_of

__all__ = ["POLICY", "PineconeSearch"]

POLICY: Final = DeepenPolicy(first_depth=100, growth=3, max_depth=1_000, whole_scope_below=0)
"""Lists of 100, 300 and 900 rows, then the whole scope. 1,000 is Pinecone's ``top_k`` ceiling for a query
that returns metadata; counting the scope first would read it whole, so it is never counted."""


def _numbers(metadata: Mapping[str, Any], similarity: float) -> tuple[float, float, float, float | None]:
    expires = float(metadata["_exp"])
    return similarity, float(metadata["_imp"]), float(metadata["_ts"]), None if expires >= NO_EXPIRY else expires


class PineconeSearch:
    """The candidate source of ``exact_top_k`` for one query on one namespace."""

    def __init__(self, io: IndexIO, namespace: str, query: Query) -> None:
        self._io = io
        self._namespace = namespace
        self._query = query
        self._where = query_filter(query.scope, query.filters, now=query.now, min_importance=query.min_importance)
        self._vector = None if query.vector is None else np.asarray(query.vector, np.float64)
        self._whole: Candidates | None = None

    async def run(self) -> list[tuple[str, Scores]]:
        if self._query.k == 0:
            return []
        if self._vector is None:
            return (await self.whole_scope()).rank(self._query)  # nothing to search by: recency and importance
        return await exact_top_k(self, self._query, POLICY)

    async def scope_size(self, up_to: int) -> int:
        return up_to + 1  # never asked: POLICY counts nothing first

    async def lists(self, depth: int) -> Candidates:
        if self._vector is None:  # (run() asks for lists only with a vector)
            return await self.whole_scope()
        matches = await self._io.query(self._namespace, self._vector.tolist(), depth, self._where)
        ids, rows, scores = [], [], []
        for match in matches:
            record_id = record_id_of(match.metadata)
            if record_id is None:
                continue  # not a memkit vector (the filter's _v condition keeps these out anyway)
            ids.append(record_id)
            scores.append(float(match.score))
            rows.append(_numbers(match.metadata, 0.0 if match.metadata.get("_nov") else float(match.score)))
        candidates = Candidates()
        candidates.add(ids, numbers_table(rows))
        if len(matches) >= depth:
            candidates.similarity_floor = max(min(scores, default=0.0), 0.0)
        return candidates

    async def whole_scope(self) -> Candidates:
        """Every row in scope, its similarity computed here from its stored vector (read once per query)."""
        if self._whole is None:
            ids: list[str] = []
            metadata: list[Mapping[str, Any]] = []
            values: list[Sequence[float]] = []
            async for page in self._io.matching(self._namespace, self._where):
                for stored in page.values():
                    if stored.metadata is not None and (record_id := record_id_of(stored.metadata)) is not None:
                        ids.append(record_id)
                        metadata.append(stored.metadata)
                        values.append(stored.values)
            similarity = self._similarities(values, metadata)
            self._whole = Candidates()
            self._whole.add(ids, numbers_table([_numbers(m, s) for m, s in zip(metadata, similarity, strict=True)]))
        return self._whole

    def _similarities(self, values: list[Sequence[float]], metadata: list[Mapping[str, Any]]) -> list[float]:
        """Cosine similarity, as Pinecone's cosine metric scores it, in one matrix product (0 for no vector)."""
        if self._vector is None or not values:
            return [0.0] * len(values)
        stored = np.asarray(values, np.float64).reshape(len(values), -1)
        norms = np.linalg.norm(stored, axis=1) * float(np.linalg.norm(self._vector))
        similarity = (stored @ self._vector) / np.where(norms > 0, norms, 1.0)
        similarity[[bool(m.get("_nov")) for m in metadata]] = 0.0
        return similarity.tolist()  # type: ignore[no-any-return]
