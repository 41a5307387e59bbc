"""A query's candidates on one Postgres table: the nearest rows and the best text matches, or every row
in scope, as numbers for memkit's kernel to rank (``memkit_backends._server.rerank``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from memkit.backend import Query
from memkit.text import query_terms
from memkit_backends._server.rerank import Candidates, numbers_table
from memkit_backends.postgres._sql import Where

__all__ = ["HybridQuery"]


def _add(candidates: Candidates, rows: Sequence[Mapping[str, Any]]) -> None:
    table = numbers_table([(row["sim"], row["importance"], row["ts"], row["expires_at"]) for row in rows])
    candidates.add([row["id"] for row in rows], table)


_ID, _SIM, _LEX, _IMPORTANCE, _TS, _EXPIRES, _COUNT = range(7)
"""Columns of ``HybridQuery._score_all_sql``'s rows, read by position (a name lookup per cell was a fifth of
a whole-scope read's client time)."""


def _add_scored(candidates: Candidates, rows: Sequence[Any]) -> None:
    """Rows of a whole scope, each with its similarity and text score."""
    table = numbers_table([(row[_SIM], row[_IMPORTANCE], row[_TS], row[_EXPIRES]) for row in rows])
    candidates.add([row[_ID] for row in rows], table)
    candidates.lexical.update({row[_ID]: float(row[_LEX]) for row in rows if row[_LEX] > 0})


class HybridQuery:
    """One query against one table, on one connection: a ``CandidateSource`` for ``exact_top_k``."""

    def __init__(self, conn: Any, table: str, vector_type: str, query: Query) -> None:
        self._conn = conn
        self._table = table
        self._vector_type = vector_type
        self._query = query
        self._terms = query_terms(query.text or "")
        self._tokens = [token for _, group in self._terms for token in group]
        self._best_text: float | None = None
        self._whole: Candidates | None = None
        """The whole scope's candidates, when ``scope_size`` read them."""

    def _base_where(self) -> Where:
        query = self._query
        base = Where().scope(query.scope).filters(query.filters).alive(query.now)
        if query.min_importance > 0:
            base.add(f"importance >= {base.bind(query.min_importance)}")
        return base

    async def scope_size(self, up_to: int) -> int:
        """Rows the query may return, counted up to just past ``up_to``. When they are no more than that, the
        same statement scores them all, kept for ``whole_scope``: a recall over a user's 1,000 rows made one
        round trip where it made two (and none more for a scope with no rows)."""
        where = self._base_where()
        base = where.sql()
        scored = self._score_all_sql(where)
        most = int(up_to)
        # The gate is an uncorrelated subquery: Postgres evaluates it once, before either branch reads a row,
        # and skips the branch whose one-time filter fails. The second branch's row carries the count. Its
        # bounds are literals (the policy's, never a caller's): bound as parameters, the statement took twice
        # as long from the client as the count and the scoring sent apart (a cached generic plan).
        sql = (
            f"WITH gate AS MATERIALIZED (SELECT count(*) AS n FROM (SELECT 1 FROM {self._table} WHERE {base} "
            f"LIMIT {most + 1}) s) {scored} AND ((SELECT n FROM gate) <= {most}) "
            f"UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, NULL, n FROM gate WHERE n > {most}"
        )
        rows = await self._conn.fetch(sql, *where.params)
        if rows and rows[0][_COUNT] is not None:
            return int(rows[0][_COUNT])
        if not rows:  # nothing to rank: the best text score in scope is not read either
            self._whole = Candidates()
            return 0
        self._whole = await self._with_text_top()
        _add_scored(self._whole, rows)
        return len(rows)

    def _similarity_sql(self, where: Where) -> str:
        query = self._query
        if query.vector is None:
            return "0.0"
        vector = where.bind(np.asarray(query.vector, dtype=np.float32))
        return f"coalesce(1 - (embedding <=> {vector}::vector::{self._vector_type}), 0.0)"

    async def _with_text_top(self) -> Candidates:
        """Empty candidates knowing the best text score in scope, where filters could keep it out of the lists."""
        candidates = Candidates()
        if self._tokens and (self._query.filters or self._query.min_importance > 0):
            if self._best_text is None:  # the same for every depth: read once
                self._best_text = await self._best_text_score()
            candidates.lexical_top = self._best_text
        return candidates

    async def lists(self, depth: int) -> Candidates:
        """The nearest rows and the best text matches, ``depth`` of each."""
        candidates = await self._with_text_top()
        base = self._base_where()
        if self._query.vector is not None:
            await self._similar(base, depth, candidates)
        if self._tokens:
            await self._lexical(base, depth, candidates)
        return candidates

    async def whole_scope(self) -> Candidates:
        """Every row in scope with its similarity and text score, in one pass over the scope (read already
        when ``scope_size`` found the scope small)."""
        if self._whole is not None:
            return self._whole
        candidates = await self._with_text_top()
        where = self._base_where()
        _add_scored(candidates, await self._conn.fetch(self._score_all_sql(where), *where.params))
        return candidates

    async def _best_text_score(self) -> float:
        """The best text score in the query's scope, filters aside: what every text score is divided by."""
        where = Where().scope(self._query.scope).alive(self._query.now)
        where.add(self._match_sql(where))
        sql = f"SELECT max({self._rank_sql(where)}) FROM {self._table} WHERE {where.sql()}"
        return float(await self._conn.fetchval(sql, *where.params) or 0.0)

    def _match_sql(self, where: Where) -> str:
        """Rows matching any of the query's words. Tokens are word characters only, so joining them with '|'
        cannot inject tsquery syntax."""
        return f"tsv @@ to_tsquery('simple', {where.bind(' | '.join(self._tokens))})"

    def _rank_sql(self, where: Where) -> str:
        """A row's text score. ts_rank averages over an OR query's words where BM25 sums them, and ignores a
        word said twice: each group of words said equally often is ranked alone, times its size and its
        count (BM25's query-term frequency, as memory:// and sqlite:// score it; counts are integers)."""
        if len(self._terms) == 1:
            return f"ts_rank(tsv, to_tsquery('simple', {where.bind(' | '.join(self._tokens))}))"
        ranks = [f"{count * len(group)} * ts_rank(tsv, to_tsquery('simple', {where.bind(' | '.join(group))}))"
                 for count, group in self._terms]  # fmt: skip
        return "(" + " + ".join(ranks) + ")"

    def _score_all_sql(self, where: Where) -> str:
        """Every row of ``where`` with its similarity and text score (columns as ``_add_scored`` reads them)."""
        clauses = where.sql()
        sim = self._similarity_sql(where)
        lex = self._rank_sql(where) if self._tokens else "0.0"
        return (f"SELECT id, {sim} AS sim, {lex} AS lex, importance, ts, expires_at, NULL::bigint AS n "
                f"FROM {self._table} WHERE ({clauses})")  # fmt: skip

    async def _similar(self, base: Where, depth: int, candidates: Candidates) -> None:
        """The nearest rows in scope, each with its text score: a row the (truncated) text list misses
        may still match the text a little, and ranking it as a non-match would misplace it."""
        where = base.copy()
        where.add("embedding IS NOT NULL")
        vector = f"{where.bind(np.asarray(self._query.vector, dtype=np.float32))}::vector::{self._vector_type}"
        lex = "0.0"
        if self._tokens:
            lex = f"CASE WHEN {self._match_sql(where)} THEN {self._rank_sql(where)} ELSE 0.0 END"
        # The text score is computed in the outer query, for the nearest rows only.
        sql = (
            f"SELECT id, sim, importance, ts, expires_at, {lex} AS lex FROM ("
            f"SELECT id, tsv, 1 - (embedding <=> {vector}) AS sim, importance, ts, expires_at FROM {self._table} "
            f"WHERE {where.sql()} ORDER BY embedding <=> {vector} LIMIT {where.bind(depth)}) nearest ORDER BY sim DESC"
        )
        async with self._conn.transaction():
            # pgvector 0.8: keep scanning the HNSW graph until enough rows pass the filters.
            await self._conn.execute("SET LOCAL hnsw.iterative_scan = strict_order")
            await self._conn.execute(f"SET LOCAL hnsw.ef_search = {min(max(depth, 40), 1000)}")
            rows = await self._conn.fetch(sql, *where.params)
        _add(candidates, rows)
        candidates.lexical.update({row["id"]: float(row["lex"]) for row in rows if row["lex"] > 0})
        if len(rows) == depth:
            candidates.similarity_floor = float(rows[-1]["sim"])

    async def _lexical(self, base: Where, depth: int, candidates: Candidates) -> None:
        where = base.copy()
        where.add(self._match_sql(where))
        rank = self._rank_sql(where)
        sim = self._similarity_sql(where)
        limit = f" LIMIT {where.bind(depth)}"
        sql = (
            f"SELECT id, {rank} AS lex, {sim} AS sim, importance, ts, "
            f"expires_at FROM {self._table} WHERE {where.sql()} ORDER BY lex DESC, id{limit}"
        )
        rows = await self._conn.fetch(sql, *where.params)
        candidates.lexical.update({row["id"]: float(row["lex"]) for row in rows})
        _add(candidates, rows)
        if len(rows) == depth:
            candidates.lexical_floor = float(rows[-1]["lex"])
