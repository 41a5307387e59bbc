"""Hybrid queries on RediSearch: candidate lists from the server, an exact rerank in memkit's kernel.

``HybridSearch`` is the shared deepen loop's ``CandidateSource`` (``exact_top_k``). One round trip
asks for the nearest rows in scope (KNN, pre-filtered inside the index) and the best text matches
(BM25) together. A second fills what each list lacks for the other's rows, for exactly those rows
(``INKEYS``): the similarity of text matches outside the KNN list, the text score of KNN rows outside
a truncated text list. Every candidate then carries its exact similarity and text score, so
``Candidates.is_exact`` can bound what a row outside both lists could reach; when the k-th hit does
not beat that bound the lists are fetched deeper, and at last the whole scope is scored.

Replies are read as RESP2 flat lists: on a 300-row reply that measured 0.7 ms against 1.2 ms for the
RESP3 maps, most of a query's client time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final

import msgspec
import numpy as np
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from memkit.backend import Query, Scores
from memkit.text import query_terms
from memkit_backends._server.rerank import Candidates, DeepenPolicy, Table, exact_top_k
from memkit_backends.redis._keys import NONE_EXPIRY, query_clauses, text_clauses

__all__ = ["TEXT_POLICY", "VECTOR_POLICY", "HybridSearch", "Row", "parse_rows", "pipeline", "prefilter"]

FIRST_DEPTH: Final = 200
"""Rows per list in the first round trip. Swept at 100k (1,000 rows per user), p50/p95 ms: 200 4.0/9.6,
250 4.5/10.0, 300 5.0/6.1, 100 8.5/9.6 (too shallow: most queries need a second round)."""
VECTOR_POLICY: Final = DeepenPolicy(first_depth=FIRST_DEPTH, growth=2, max_depth=6_400, whole_scope_below=0)
"""Never counts first: a count is one more round trip, and the first lists already tell a small scope
(a KNN list shorter than its depth held every row, which ``is_exact`` takes as exact)."""
TEXT_POLICY: Final = DeepenPolicy(first_depth=FIRST_DEPTH, growth=4, max_depth=51_200, whole_scope_below=FIRST_DEPTH)
"""Without a vector the scope is counted first (the text list cannot tell it), and the text list grows
4x a round, to its depth of v1 (no bound but the scope's size, which 51,200 covers to ~200k)."""
BRUTE_FORCE: Final = 20_000
"""Scopes up to this many rows are scanned by the server, not searched through an HNSW graph."""
_NUMBERS: Final = ("imp", "ts", "exp")
_NUMBER_NAMES: Final = tuple(name.encode() for name in _NUMBERS)

Row = tuple[str, float, dict[bytes, bytes]]
"""Record id, text score (0.0 without WITHSCORES), returned fields."""


def parse_rows(reply: Sequence[Any], prefix_len: int, *, with_scores: bool, with_fields: bool = True) -> list[Row]:
    """Rows of an FT.SEARCH reply in RESP2: ``[total, key, (score,) (fields,) key, ...]``."""
    items = reply[1:]
    step = 1 + int(with_scores) + int(with_fields)
    rows: list[Row] = []
    for at in range(0, len(items), step):
        key = items[at]
        score = float(items[at + 1]) if with_scores else 0.0
        flat = items[at + step - 1] if with_fields else ()
        rows.append((key[prefix_len:].decode(), score, dict(zip(flat[::2], flat[1::2], strict=False))))
    return rows


def candidate_table(
    reply: Sequence[Any], prefix_len: int, *, with_scores: bool, distance: bool
) -> tuple[list[str], list[float], Table]:
    """Rows returning ``(dist,) imp, ts, exp`` (in RETURN order): ids, text scores (with_scores) and a
    candidate table, read by position: the reply is most of a query's client time."""
    items = reply[1:]
    step = 2 + int(with_scores)
    names = (b"dist", *_NUMBER_NAMES) if distance else _NUMBER_NAMES
    flats = items[step - 1 :: step]
    if any(len(flat) != 2 * len(names) for flat in flats) or (flats and tuple(flats[0][::2]) != names):
        rows = parse_rows(reply, prefix_len, with_scores=with_scores)
        flats = [[x for name in names for x in (name, fields[name])] for _, _, fields in rows]
    values = np.array([float(x) for flat in flats for x in flat[1::2]], np.float64).reshape(-1, len(names))
    table = np.empty((len(flats), 4), np.float64)
    table[:, 0] = 1.0 - values[:, 0] if distance else 0.0
    table[:, 1:] = values[:, -3:]
    table[table[:, 3] >= NONE_EXPIRY, 3] = math.inf
    ids = [key[prefix_len:].decode() for key in items[0::step]]
    scores = [float(score) for score in items[1::step]] if with_scores else []
    return ids, scores, table


def prefilter(query: Query, *, unscored: bool = False) -> str:
    """Scope, filters, expiry and minimum importance as a RediSearch query (hex digests and numbers only);
    ``unscored``: in a form that adds nothing to text scores (``text_clauses``)."""
    # Expiry is left to the kernel (candidates carry it): a numeric range over every row in the index
    # measured 0.3-0.6 ms per list at 100k.
    clauses = text_clauses(query.scope, query.filters) if unscored else query_clauses(query.scope, query.filters, None)
    if query.min_importance > 0:
        clauses.append(f"@imp:[{query.min_importance!r} +inf]")
    return " ".join(clauses) or "*"


class HybridSearch:
    """One query against one collection's RediSearch index: the candidate lists of ``exact_top_k``."""

    def __init__(
        self, client: aioredis.Redis, index: str, prefix: str, query: Query, *, hnsw: bool, scope_numbers: bool
    ) -> None:
        self._client = client
        self._index = index
        self._prefix = prefix
        self._hnsw = hnsw
        self._query = query
        self._where = prefilter(query)
        self._text_where = prefilter(query, unscored=True) if scope_numbers else self._where
        """The query's filters for text searches, in a form that adds nothing to text scores."""
        self._scope_where: str | None = None
        """For a filtered query: its scope alone, where text scores are read and scaled (filters are TAG
        clauses, which RediSearch scores, and text scores are scaled by the best match in scope whatever
        the filters, as on every backend)."""
        if query.filters or query.min_importance > 0:
            scope_only = msgspec.structs.replace(query, filters={}, min_importance=0.0)
            self._scope_where = prefilter(scope_only, unscored=scope_numbers)
        terms = query_terms(query.text or "")
        self._tokens = [token for _, group in terms for token in group]
        self._words = _text_clause(terms)
        self._vector = None if query.vector is None else np.ascontiguousarray(query.vector, np.float32).tobytes()
        self._size: int | None = None
        self._brute_force: bool | None = None
        self._whole: Candidates | None = None

    async def run(self) -> list[tuple[str, Scores]]:
        """The hybrid top k: ids with their scores, ranked once by the kernel."""
        query = self._query
        if self._vector is None and (not self._tokens or self._scope_where is not None):
            # No list to deepen: without words every row ties on text, and a filtered text list's scores
            # carry the filters' terms, so neither bounds unseen rows. The whole scope is scored.
            return (await self.whole_scope()).rank(query)
        return await exact_top_k(self, query, VECTOR_POLICY if self._vector is not None else TEXT_POLICY)

    async def scope_size(self, up_to: int) -> int:
        """Rows in scope (counted once per query: the text list and the HNSW decision both need it)."""
        if self._size is None:
            self._size = await self.count(self._where)
        return self._size

    async def lists(self, depth: int) -> Candidates:
        if self._vector is None:
            return await self._text_list(depth)
        if self._brute_force is None:
            # On an HNSW index RediSearch may walk the graph for a scope of a few thousand rows (measured
            # 46 ms p50 at 100k against 4.6 on FLAT); below BRUTE_FORCE rows the scope is scanned instead.
            self._brute_force = self._hnsw and await self.scope_size(BRUTE_FORCE) <= BRUTE_FORCE
        return await self._lists(self._vector, depth, whole_scope=self._brute_force)

    async def whole_scope(self) -> Candidates:
        """Every row in scope; read once per query (the text path may ask for it at several depths)."""
        if self._whole is None:
            if self._vector is None:
                self._whole = await self._whole_text()
            else:
                self._size = await self.count(self._where)  # fresh: rows may have come since the first lists
                self._whole = await self._lists(self._vector, max(1, self._size), whole_scope=True)
        return self._whole

    async def _text_list(self, depth: int) -> Candidates:
        """The text list at ``depth`` with its rows' numbers; the whole scope once the depth reaches it."""
        if depth >= await self.scope_size(depth):
            return await self.whole_scope()
        (reply,) = await self.pipeline([self._text(depth, _NUMBERS)])
        ids, scores, table = candidate_table(reply, len(self._prefix), with_scores=True, distance=False)
        candidates = Candidates()
        candidates.add(ids, table)
        candidates.lexical = dict(zip(ids, scores, strict=True))
        if len(ids) == depth:
            candidates.lexical_floor = min(scores)
        return candidates

    async def _whole_text(self) -> Candidates:
        """No vector: every row in scope with its numbers, and the text scores of those that match."""
        size = await self.scope_size(0)
        tokens, where = self._tokens, self._where
        scan = ("FT.SEARCH", self._index, where, "RETURN", str(len(_NUMBERS)), *_NUMBERS,
                "LIMIT", "0", str(max(size, 1)), "DIALECT", "2")  # fmt: skip
        # A filtered query's text list spans its whole scope: rows the filters drop only set the scale.
        text_depth = await self.count(self._scope_where) if self._scope_where else size
        text = self._text(max(text_depth, 1), (), where=self._scope_where)
        replies = await self.pipeline([scan, text] if tokens else [scan])
        plen = len(self._prefix)
        candidates = Candidates()
        ids, _, table = candidate_table(replies[0], plen, with_scores=False, distance=False)
        candidates.add(ids, table)
        if tokens:
            rows = parse_rows(replies[1], plen, with_scores=True, with_fields=False)
            candidates.lexical = {rid: score for rid, score, _ in rows}
        return candidates

    async def count(self, where: str) -> int:
        reply = await self.pipeline([("FT.SEARCH", self._index, where, "NOCONTENT", "LIMIT", "0", "0",
                                      "DIALECT", "2")])  # fmt: skip
        return int(reply[0][0])

    async def pipeline(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        return await pipeline(self._client, commands)

    async def _lists(self, vector: bytes, depth: int, *, whole_scope: bool) -> Candidates:
        """The KNN list and the text list at ``depth``, each completed for the other's rows."""
        query, tokens = self._query, self._tokens
        commands = [self._knn(self._where, vector, depth, _NUMBERS, whole_scope=whole_scope)]
        if tokens:
            commands.append(self._text(depth, _NUMBERS))
        if tokens and self._scope_where is not None:
            commands.append(self._text(1, (), where=self._scope_where))  # the best match in scope
        replies = await self.pipeline(commands)
        plen = len(self._prefix)
        candidates = Candidates()
        nearest, _, table = candidate_table(replies[0], plen, with_scores=False, distance=True)
        candidates.add(nearest, table)
        if len(nearest) == depth:
            candidates.similarity_floor = float(table[:, 0].min())
        text_rows = Candidates()
        if tokens:
            matches, scores, table = candidate_table(replies[1], plen, with_scores=True, distance=False)
            text_rows.add(matches, table)
            candidates.lexical = dict(zip(matches, scores, strict=True))
            if len(matches) == depth:
                # With filters the list's scores include theirs, so this bounds unseen rows from above.
                candidates.lexical_floor = min(scores)
            if self._scope_where is not None:
                candidates.lexical_top = float(replies[2][2]) if len(replies[2]) > 2 else 0.0
            if self._scope_where is not None and matches:  # scores without the filters' terms
                (reply,) = await self.pipeline([self._text_scores(matches)])
                candidates.lexical = self._read_text_scores(reply)
        text_only, no_text = candidates.unresolved(query, text_truncated=candidates.lexical_floor is not None,
                                                   text_rows=text_rows)  # fmt: skip
        await self._fill(vector, candidates=candidates, text_only=text_only, text_rows=text_rows, no_text=no_text)
        return candidates

    async def _fill(
        self, vector: bytes, *, candidates: Candidates, text_only: list[str], text_rows: Candidates,
        no_text: list[str],
    ) -> None:  # fmt: skip
        """The similarity of text matches outside the KNN list; the text score of KNN rows outside a
        truncated text list. Rows left out cannot reach the top k (``Candidates.unresolved``)."""
        commands = []
        if text_only:
            keys = [self._prefix + rid for rid in text_only]
            commands.append(self._knn(self._where, vector, len(keys), (), whole_scope=True, keys=keys))
        if no_text:
            commands.append(self._text_scores(no_text))
        if not commands:
            return
        replies = iter(await self.pipeline(commands))
        plen = len(self._prefix)
        if text_only:
            similarity = {
                rid: 1.0 - float(f[b"dist"]) for rid, _, f in parse_rows(next(replies), plen, with_scores=False)
            }
            table = text_rows.rows_of(text_only)
            table[:, 0] = [similarity.get(rid, 0.0) for rid in text_only]  # no vector: 0, as in memory://
            candidates.add(text_only, table)
        if no_text:
            candidates.lexical.update(self._read_text_scores(next(replies)))

    def _knn(
        self, where: str, vector: bytes, depth: int, fields: Sequence[str], *, whole_scope: bool,
        keys: Sequence[str] = (),
    ) -> tuple[Any, ...]:  # fmt: skip
        options = f" EF_RUNTIME {max(depth, 10)}" if self._hnsw else ""
        if whole_scope and where != "*":  # (a policy is only accepted with a filter)
            options = " HYBRID_POLICY ADHOC_BF"  # distances for the rows passing the filter, no graph walk
        inkeys = ("INKEYS", str(len(keys)), *keys) if keys else ()
        returned = ("dist", *(f for f in fields if f != "dist"))
        return ("FT.SEARCH", self._index, f"({where})=>[KNN {depth} @emb $vec{options} AS dist]", *inkeys,
                "PARAMS", "2", "vec", vector, "RETURN", str(len(returned)), *returned,
                "LIMIT", "0", str(depth), "DIALECT", "2")  # fmt: skip

    def _text_scores(self, ids: list[str]) -> tuple[Any, ...]:
        """The text scores of exactly ``ids``, read with the scope alone when filters would add theirs."""
        keys = [self._prefix + rid for rid in ids]
        return self._text(len(keys), (), keys=keys, where=self._scope_where)

    def _read_text_scores(self, reply: Sequence[Any]) -> dict[str, float]:
        rows = parse_rows(reply, len(self._prefix), with_scores=True, with_fields=False)
        return {rid: score for rid, score, _ in rows}

    def _text(
        self, depth: int, fields: Sequence[str], *, keys: Sequence[str] = (), where: str | None = None
    ) -> tuple[Any, ...]:
        where = where or self._text_where
        search = self._words if where == "*" else f"{self._words} {where}"
        inkeys = ("INKEYS", str(len(keys)), *keys) if keys else ()
        returned = ("RETURN", str(len(fields)), *fields) if fields else ("NOCONTENT",)
        return ("FT.SEARCH", self._index, search, *inkeys, "WITHSCORES", "SCORER", "BM25STD", *returned,
                "LIMIT", "0", str(depth), "DIALECT", "2")  # fmt: skip


def _text_clause(terms: list[tuple[int, list[str]]]) -> str:
    """The query's words as a RediSearch text clause, a word said n times weighing n (BM25's query-term
    frequency, as memory:// and sqlite:// score it). BM25STD adds up a union's repeated terms; weight
    attributes (``=> {$weight: n}``) were ignored inside a scoped query on RediSearch 2.10. Tokens are word
    characters only: they cannot change the query's structure."""
    return "@tokens:(" + "|".join(token for count, group in terms for token in group for _ in range(count)) + ")"


async def pipeline(client: aioredis.Redis, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
    """Commands in one round trip, their replies in order. The first error is raised as redis-py raised
    it, for the caller's retry and error mapping (``redis_error``), without redis-py's note that would
    quote the command (vectors, ids) into the message."""
    async with client.pipeline(transaction=False) as pipe:
        for command in commands:
            pipe.execute_command(*command)
        replies = await pipe.execute(raise_on_error=False)
    for reply in replies:
        if isinstance(reply, RedisError):
            raise reply
    return list(replies)
