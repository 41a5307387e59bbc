"""The near-duplicate check of a whole batch on Postgres: every vector in one statement, one round trip.

The default ``RecordStore.nearest`` runs one hybrid query per vector (a count, the candidate list and the
records: three round trips each). Here the batch travels as one ``vector[]`` parameter, unnested WITH
ORDINALITY, and each vector's nearest rows come from a LATERAL subquery. The answers are the default's:

- A scope of up to ``whole_scope_below`` rows is scored whole, as ``exact_top_k`` does: the scope's rows are
  read once into a materialised CTE and every vector scores all of them, exactly (no graph, whatever the
  index), a row without an embedding scoring 0 (the hybrid query's ``coalesce``).
- A larger scope goes through each vector's candidate list: its ``depth`` nearest rows with an embedding,
  ``ORDER BY embedding <=> v`` (the HNSW graph where there is one, with the hybrid query's iterative-scan
  settings, so the list is the one the hybrid query reads), reranked as the kernel ranks.
- The kernel ranks by the similarity rounded to float32 (``real``), ties by id in code-point order, and keeps
  a row only if that similarity is >= ``min_similarity`` (rows with negative importance never pass its
  minimum importance of 0); the same is done here in SQL, and the similarity returned is that float32.

Which branch runs is decided in the statement (a one-time filter on the counted scope), and the settings are
made by ``set_config(..., true)`` in the statement itself: pgvector (0.8) reads them in ``hnswgettuple``, when
a scan first searches the graph, not when the scan begins, and no scan searches before the probe CTE, whose
filter calls ``set_config``, has produced its first row. They last until the end of the statement's own
(implicit) transaction. ``test_postgres_nearest`` checks that they take effect.

Measured (1,000 vectors, k=3, floor 0.92, over a 1,000-row scope of a 100k-row collection of 384-dim vectors,
index=none, half the vectors near duplicates; one run on a shared 2-core machine): 268 ms here against
5,385 ms for the default loop (3,000 round trips), with the same answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from memkit.backend import Scope
from memkit_backends.postgres._sql import ID_ORDER, Where

__all__ = ["batch_sql", "group_rows", "ids_sql"]

_MAX_EF_SEARCH = 1000
"""pgvector's ceiling for ``hnsw.ef_search``."""


def _ranked(scored: str, k: str, min_similarity: str) -> str:
    """Rows of ``scored`` (id, sim as real) that pass the floor, best ``k`` first, ties by id: the kernel's order.
    NaN (a zero vector's cosine distance) sorts above every number in Postgres; it is never a near duplicate."""
    # OFFSET 0 keeps the subquery from being flattened, where EXPLAIN shows the distance in the filter (twice)
    # and in the sort key. 1,000 vectors x a 1,000-row scope, dim 384, best of 5 on a busy 2-core machine:
    # 201 ms against 244 ms flattened at a floor of 0.92 (store_many's), 485 against 605 ms with no floor.
    return (
        f"SELECT id, sim FROM ({scored} OFFSET 0) scored WHERE sim >= {min_similarity}::float8 AND sim <> 'NaN' "
        f"ORDER BY sim DESC, {ID_ORDER} LIMIT {k}"
    )


def batch_sql(
    table: str,
    vector_type: str,
    scope: Scope,
    now: float,
    vectors: list[npt.NDArray[np.float32]],
    *,
    k: int,
    min_similarity: float,
    depth: int,
    whole_scope_below: int,
) -> tuple[str, list[Any]]:
    """The statement for the whole batch, and its parameters; it returns rows (ord, id, sim), ord from 1."""
    where = Where().scope(scope).alive(now)
    base = where.sql()
    # asyncpg takes any sized iterable for an array element as a nested array, a memoryview as one value
    # (which the vector codec reads as float32): each vector stays one element of the vector[] parameter.
    batch = where.bind([np.ascontiguousarray(vector, dtype=np.float32).data for vector in vectors])
    limit, floor = where.bind(k), where.bind(float(min_similarity))
    ef_search = min(max(depth, 40), _MAX_EF_SEARCH)  # as the hybrid query's candidate list sets it
    probe = (
        f"probe AS MATERIALIZED (SELECT u.ord, u.v::{vector_type} AS v "
        f"FROM unnest({batch}::vector[]) WITH ORDINALITY AS u(v, ord) "
        "WHERE (SELECT set_config('hnsw.iterative_scan', 'strict_order', true) "
        f"|| set_config('hnsw.ef_search', '{ef_search}', true)) IS NOT NULL)"
    )
    # Ordered by the output column: the distance computed once a row, and still the graph's order.
    nearest = (
        f"SELECT t.id, t.embedding <=> p.v AS distance FROM {table} t "
        f"WHERE {base} AND importance >= 0 AND embedding IS NOT NULL ORDER BY distance LIMIT {where.bind(depth)}"
    )
    listed = f"SELECT id, (1 - distance)::real AS sim FROM ({nearest}) c"
    lists = f"SELECT p.ord, n.id, n.sim FROM probe p CROSS JOIN LATERAL ({_ranked(listed, limit, floor)}) n"
    if whole_scope_below <= 0:
        return f"WITH {probe} {lists}", where.params
    most = where.bind(whole_scope_below)
    gate = f"gate AS (SELECT count(*) <= {most} AS whole FROM (SELECT 1 FROM {table} WHERE {base} LIMIT {most} + 1) s)"
    scoped = f"scoped AS MATERIALIZED (SELECT id, embedding FROM {table} WHERE {base} AND importance >= 0)"
    scored = "SELECT s.id, coalesce(1 - (s.embedding <=> p.v), 0.0)::real AS sim FROM scoped s"
    whole = f"SELECT p.ord, n.id, n.sim FROM probe p CROSS JOIN LATERAL ({_ranked(scored, limit, floor)}) n"
    sql = (
        f"WITH {probe}, {gate}, {scoped} {whole} WHERE (SELECT whole FROM gate) "
        f"UNION ALL {lists} WHERE NOT (SELECT whole FROM gate)"
    )
    return sql, where.params


def ids_sql(table: str, scope: Scope, now: float, k: int) -> tuple[str, list[Any]]:
    """A collection without vectors: the kernel scores every row 0, so the first ``k`` ids in scope."""
    where = Where().scope(scope).alive(now)
    sql = f"SELECT id FROM {table} WHERE {where.sql()} AND importance >= 0 ORDER BY {ID_ORDER} LIMIT "
    return sql + where.bind(k), where.params


def group_rows(rows: Sequence[Any], n: int) -> list[list[tuple[str, float]]]:
    """Rows (ord, id, sim) as one best-first list per vector (ties by id in code-point order, as str sorts)."""
    found: list[list[tuple[str, float]]] = [[] for _ in range(n)]
    for row in rows:
        found[row["ord"] - 1].append((row["id"], float(row["sim"])))
    for hits in found:
        hits.sort(key=lambda hit: (-hit[1], hit[0]))
    return found
