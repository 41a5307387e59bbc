"""One hybrid query against Weaviate: its vector search and its BM25 as candidates for memkit's exact rerank.

``WeaviateSearch`` is the shared deepen loop's ``CandidateSource`` (``exact_top_k``), as on Redis and
Postgres. A round asks Weaviate for the ``depth`` nearest objects the filter admits (cosine distance,
similarity = 1 - distance) and the ``depth`` best BM25 matches of memkit's own tokens, both with the scope,
filters, expiry and minimum importance in Weaviate's filter. It then fills what each list lacks for the
other's rows, for exactly the rows that could still reach the top k (``Candidates.unresolved``): the
similarity of text matches outside the vector list (a vector search restricted to their UUIDs), the text
score of vector rows outside a full text list (BM25 restricted to their UUIDs). Weaviate's BM25 scores do
not depend on the filter (its statistics are the collection's), so a filtered list's scores are final;
text scores are divided by the best match in scope, filters aside, as on every backend.

Records without a vector are not in Weaviate's vector index. Their similarity is 0; a full vector list's
floor is never taken below 0, so unseen ones are bounded; when the vector list held every vector row, the
rows without one are read too (``nov``), so "the list held every row" stays true.

Exactness: with the ``flat`` index (the default) Weaviate's vector search is a scan of the rows the filter
admits, and BM25 top-k is exact, so the answer is the exact hybrid top k; with ``hnsw`` it is exact while a
scope stays under Weaviate's ``flatSearchCutoff`` (40,000 rows), approximate above. Past the deepest lists
the whole scope is scored here (its vectors read page by page); its text scores come from one BM25 list of
at most ``QUERY_MAX`` (10,000) matches, so a scope with more text matches than that is ranked exactly only
if Weaviate's ``QUERY_MAXIMUM_RESULTS`` is raised to cover it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from memkit.backend import Query, Scores
from memkit.text import query_terms
from memkit_backends._server.rerank import Candidates, DeepenPolicy, exact_top_k, numbers_table
from memkit_backends.weaviate._filters import And, Cond, query_where
from memkit_backends.weaviate._io import QUERY_MAX, CollectionIO
from memkit_backends.weaviate._layout import IDS, NO_EXPIRY, NUMBERS, object_uuid, record_id_of
from memkit_backends.weaviate._scan import next_rows

__all__ = ["TEXT_POLICY", "VECTOR_POLICY", "WeaviateSearch", "bm25_words"]

VECTOR_POLICY: Final = DeepenPolicy(first_depth=100, growth=4, max_depth=6_400, whole_scope_below=0)
"""Lists of 100, 400, 1,600 and 6,400 rows, then the whole scope: within ``QUERY_MAX`` (10,000)."""
TEXT_POLICY: Final = DeepenPolicy(first_depth=100, growth=4, max_depth=6_400, whole_scope_below=100)
"""Without a vector the scope is counted first (a text list cannot tell rows that do not match)."""
WHOLE_PAGE: Final = 1_000


def bm25_words(text: str) -> str:
    """The query's memkit tokens, each said as often as the query says it: Weaviate's BM25 counts a
    repeated query term once per repeat (BM25's query-term frequency, as memkit's other backends score)."""
    return " ".join(token for count, group in query_terms(text) for token in group for _ in range(count))


def _row(obj: Any, similarity: float) -> tuple[float, float, float, float | None]:
    props = obj.properties
    expires = float(props["exp"])
    return similarity, float(props["imp"]), float(props["ts"]), None if expires >= NO_EXPIRY else expires


def _similarity(obj: Any) -> float:
    distance = obj.metadata.distance
    return 0.0 if distance is None or obj.properties.get("nov") else 1.0 - float(distance)


class WeaviateSearch:
    """The candidate source of ``exact_top_k`` for one query on one collection."""

    def __init__(self, io: CollectionIO, query: Query) -> None:
        self._io = io
        self._query = query
        self._where = query_where(query.scope, query.filters, now=query.now, min_importance=query.min_importance)
        self._scope_where: And | None = None
        if query.filters or query.min_importance > 0:
            self._scope_where = query_where(query.scope, now=query.now)
        self._words = bm25_words(query.text or "")
        self._vector = None if query.vector is None else np.asarray(query.vector, np.float64)
        self._whole: Candidates | None = None
        self._top: float | None = None

    async def run(self) -> list[tuple[str, Scores]]:
        if self._query.k == 0:
            return []
        if self._vector is None and not self._words:
            return (await self.whole_scope()).rank(self._query)  # nothing to search by
        return await exact_top_k(self, self._query, VECTOR_POLICY if self._vector is not None else TEXT_POLICY)

    async def scope_size(self, up_to: int) -> int:
        return await self._io.count(self._where)

    async def _lexical_top(self) -> float | None:
        """The best text score in scope, filters aside (only where filters could keep it out of the lists)."""
        if self._scope_where is None or not self._words:
            return None
        if self._top is None:
            best = await self._io.text(self._words, self._scope_where, 1, IDS)
            self._top = float(best[0].metadata.score or 0.0) if best else 0.0
        return self._top

    async def lists(self, depth: int) -> Candidates:
        candidates = Candidates()
        candidates.lexical_top = await self._lexical_top()
        if self._vector is not None:
            await self._nearest(self._vector.tolist(), depth, candidates)
        if not self._words:
            return candidates
        matches = await self._io.text(self._words, self._where, depth, NUMBERS)
        text_rows = Candidates()
        ids = [record_id_of(m.properties) or "" for m in matches]
        text_rows.add(ids, numbers_table([_row(m, 0.0) for m in matches]))
        candidates.lexical = {i: float(m.metadata.score or 0.0) for i, m in zip(ids, matches, strict=True)}
        if len(matches) >= depth:
            candidates.lexical_floor = min(candidates.lexical.values())
        if self._vector is None:
            candidates.add(ids, text_rows.table)
            return candidates
        text_only, no_text = candidates.unresolved(self._query, text_truncated=candidates.lexical_floor is not None,
                                                   text_rows=text_rows)  # fmt: skip
        await self._fill(self._vector.tolist(), candidates, text_rows, text_only, no_text)
        return candidates

    async def _nearest(self, vector: list[float], depth: int, candidates: Candidates) -> None:
        found = await self._io.nearest(vector, self._where, depth, NUMBERS)
        sims = [_similarity(obj) for obj in found]
        candidates.add([record_id_of(o.properties) or "" for o in found], numbers_table(
            [_row(o, s) for o, s in zip(found, sims, strict=True)]))  # fmt: skip
        if len(found) >= depth:
            candidates.similarity_floor = max(min(sims), 0.0)
            return
        # Every row with a vector is in hand: read those without one (similarity 0) as well.
        blank = await self._io.fetch(And((*self._where.parts, Cond("nov", "eq", True))), limit=depth,
                                     properties=NUMBERS)  # fmt: skip
        candidates.add([record_id_of(o.properties) or "" for o in blank], numbers_table([_row(o, 0.0) for o in blank]))
        if len(blank) >= depth:
            candidates.similarity_floor = 0.0

    async def _fill(self, vector: list[float], candidates: Candidates, text_rows: Candidates, text_only: list[str],
                    no_text: list[str]) -> None:  # fmt: skip
        """The similarity of text matches outside the vector list; the text score of vector rows outside a full
        text list. Rows left out cannot reach the top k."""
        if text_only:
            found = await self._io.nearest(vector, self._restricted(text_only), len(text_only), NUMBERS)
            similarity = {record_id_of(o.properties): _similarity(o) for o in found}
            table = text_rows.rows_of(text_only)
            table[:, 0] = [similarity.get(i, 0.0) for i in text_only]  # no vector: 0, as in memory://
            candidates.add(text_only, table)
        if no_text:
            scored = await self._io.text(self._words, self._restricted(no_text), len(no_text), IDS)
            candidates.lexical.update({record_id_of(o.properties) or "": float(o.metadata.score or 0.0)
                                       for o in scored})  # fmt: skip

    def _restricted(self, ids: Sequence[str]) -> And:
        return And((*self._where.parts, Cond("_id", "any", tuple(object_uuid(i) for i in ids))))

    async def whole_scope(self) -> Candidates:
        """Every row in scope, its similarity computed here from its stored vector (read once per query)."""
        if self._whole is not None:
            return self._whole
        objects: list[Any] = []
        after = None
        while True:
            rows, more = await next_rows(self._fetch, self._where, after, limit=WHOLE_PAGE, newest_first=False)
            objects += [obj for _, _, obj in rows]
            if not more or not rows:
                break
            after = rows[-1][0], rows[-1][1]
        whole = Candidates()
        whole.lexical_top = await self._lexical_top()
        ids = [record_id_of(o.properties) or "" for o in objects]
        whole.add(ids, numbers_table([_row(o, s) for o, s in zip(objects, self._similarities(objects), strict=True)]))
        if self._words and objects:
            scored = await self._io.text(self._words, self._where, min(len(objects), QUERY_MAX), IDS)
            whole.lexical = {record_id_of(o.properties) or "": float(o.metadata.score or 0.0) for o in scored}
        self._whole = whole
        return whole

    async def _fetch(self, where: Any, limit: int, sort: tuple[str, bool] | None) -> list[tuple[float, str, Any]]:
        found = await self._io.fetch(where, limit=limit, properties=NUMBERS, vector=self._vector is not None,
                                     sort=sort)  # fmt: skip
        return [(float(o.properties["ts"]), record_id_of(o.properties) or "", o) for o in found]

    def _similarities(self, objects: list[Any]) -> list[float]:
        """Cosine similarity, as Weaviate's cosine distance scores it, in one matrix product (0 for no vector)."""
        if self._vector is None or not objects:
            return [0.0] * len(objects)
        dim = len(self._vector)
        stored = np.zeros((len(objects), dim))
        for at, obj in enumerate(objects):
            vector = _default_vector(obj.vector)
            if vector is not None and len(vector) == dim and not obj.properties.get("nov"):
                stored[at] = vector
        norms = np.linalg.norm(stored, axis=1) * float(np.linalg.norm(self._vector))
        similarity = (stored @ self._vector) / np.where(norms > 0, norms, 1.0)
        return similarity.tolist()  # type: ignore[no-any-return]


def _default_vector(vectors: Any) -> list[float] | None:
    """The unnamed vector of an object as the client returns it (``{"default": [...]}``)."""
    if not vectors:
        return None
    if isinstance(vectors, dict):
        value = vectors.get("default", next(iter(vectors.values())))
        return list(value) if value is not None else None
    return list(vectors)
