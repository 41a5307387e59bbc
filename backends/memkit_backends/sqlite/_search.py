"""SQLite's share of a hybrid query: raw BM25 per record from FTS5, scope and expiry pushed into the SQL."""

from __future__ import annotations

import sqlite3
from typing import Any

from memkit.backend import Query
from memkit.text import tokenize
from memkit_backends.sqlite._schema import scope_tokens

__all__ = ["fts_scores"]


def fts_scores(conn: sqlite3.Connection, collection: str, query: Query) -> dict[str, float]:
    """Raw BM25 per record id of the query's text (the arrays scale and fuse it)."""
    tokens = sorted(set(tokenize(query.text or "")))
    if not tokens:
        return {}
    # Tokens are plain word characters; quoting each makes FTS5 read it as a term, never as syntax.
    # The scope's terms are ANDed in, so FTS5 intersects posting lists instead of scoring every
    # match of every user; the scope column has weight 0 in bm25, so scores are unchanged.
    match = "tokens : (" + " OR ".join(f'"{token}"' for token in tokens) + ")"
    for term in scope_tokens(query.scope).split():
        match += f' AND scope : "{term}"'
    sql = [
        # CROSS JOIN fixes the loop order: one full-text search, then a rowid lookup per match
        # (the planner otherwise runs one full-text search per record in scope).
        "SELECT r.id, -bm25(memkit_records_fts, 1.0, 0.0) FROM memkit_records_fts "
        "CROSS JOIN memkit_records r ON r.rowid = memkit_records_fts.rowid "
        "WHERE memkit_records_fts MATCH ? AND r.collection = ? AND (r.expires_at IS NULL OR r.expires_at > ?)"
    ]
    params: list[Any] = [match, collection, query.now]
    for column, value in (("user_id", query.scope.user_id), ("agent_id", query.scope.agent_id),
                          ("session_id", query.scope.session_id)):  # fmt: skip
        if value is not None:
            sql.append(f"AND r.{column} = ?")
            params.append(value)
    return {record_id: float(score) for record_id, score in conn.execute(" ".join(sql), params)}
