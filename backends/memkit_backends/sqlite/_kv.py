"""The key-value face on SQLite: ``memkit_kv``, one row per (namespace, key), expiry by the caller's clock.

Keys compare with the BINARY collation, memcmp of UTF-8, which is code point order. A prefix is the
key range ``[prefix, prefix_end(prefix))`` on the primary key, never a LIKE pattern, so ``%`` and ``_``
are literal and a page reads only the keys it returns.
"""

from __future__ import annotations

import sqlite3
import time

from memkit.backend import KVPage
from memkit.errors import ValidationError
from memkit_backends._embedded.cursor import decode_key_cursor, encode_key_cursor
from memkit_backends._embedded.kv import expiry, prefix_end

__all__ = ["kv_collect", "kv_delete", "kv_delete_prefix", "kv_get", "kv_replace", "kv_scan", "kv_set"]

_LIVE = "(expires_at IS NULL OR expires_at > ?)"


def _clock(now: float | None) -> float:
    return time.time() if now is None else now


def kv_get(conn: sqlite3.Connection, namespace: str, key: str, now: float | None) -> bytes | None:
    row = conn.execute(
        f"SELECT value FROM memkit_kv WHERE namespace = ? AND key = ? AND {_LIVE}", (namespace, key, _clock(now))
    ).fetchone()
    return None if row is None else bytes(row[0])


def kv_set(
    conn: sqlite3.Connection, namespace: str, key: str, value: bytes, *, ttl_s: float | None, now: float | None
) -> None:
    expires_at, gc_at = expiry(now, ttl_s)
    conn.execute(
        "INSERT OR REPLACE INTO memkit_kv (namespace, key, value, expires_at, gc_at) VALUES (?, ?, ?, ?, ?)",
        (namespace, key, bytes(value), expires_at, gc_at),
    )


def kv_delete(conn: sqlite3.Connection, namespace: str, key: str, now: float | None) -> bool:
    """Deletes the key, expired or not; True when its value was live."""
    row = conn.execute(
        "DELETE FROM memkit_kv WHERE namespace = ? AND key = ? RETURNING expires_at", (namespace, key)
    ).fetchone()
    return row is not None and (row[0] is None or row[0] > _clock(now))


def kv_replace(
    conn: sqlite3.Connection,
    namespace: str,
    key: str,
    value: bytes,
    *,
    expected: bytes | None,
    ttl_s: float | None,
    now: float | None,
) -> bool:
    expiry(now, ttl_s)  # validate before taking the lock
    conn.execute("BEGIN IMMEDIATE")  # the write lock makes read-compare-write atomic across processes
    try:
        current = kv_get(conn, namespace, key, now)
        if current is not None and current == bytes(value):
            written = True  # a retry whose first attempt succeeded
        elif current != expected:
            written = False
        else:
            kv_set(conn, namespace, key, value, ttl_s=ttl_s, now=now)
            written = True
        conn.execute("COMMIT")
        return written
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _range(prefix: str) -> tuple[str, list[object]]:
    end = prefix_end(prefix)
    if end is None:
        return "key >= ?", [prefix]
    return "key >= ? AND key < ?", [prefix, end]


def kv_scan(
    conn: sqlite3.Connection, namespace: str, *, prefix: str, limit: int, cursor: str | None, now: float | None
) -> KVPage:
    if limit < 1:
        raise ValidationError(f"kv_scan limit must be >= 1, got {limit}")
    where, params = _range(prefix)
    if cursor is not None:
        where += " AND key > ?"
        params.append(decode_key_cursor(cursor))
    rows = conn.execute(
        f"SELECT key, value FROM memkit_kv WHERE namespace = ? AND {where} AND {_LIVE} ORDER BY key LIMIT ?",
        [namespace, *params, _clock(now), limit + 1],
    ).fetchall()
    items = [(key, bytes(value)) for key, value in rows[:limit]]
    return KVPage(items=items, next_cursor=encode_key_cursor(items[-1][0]) if len(rows) > limit else None)


def kv_delete_prefix(conn: sqlite3.Connection, namespace: str, prefix: str) -> int:
    where, params = _range(prefix)
    return conn.execute(f"DELETE FROM memkit_kv WHERE namespace = ? AND {where}", [namespace, *params]).rowcount


def kv_collect(conn: sqlite3.Connection) -> int:
    """Drop keys whose physical deadline (this machine's clock + ttl_s at the write) has passed."""
    return conn.execute("DELETE FROM memkit_kv WHERE gc_at IS NOT NULL AND gc_at <= ?", (time.time(),)).rowcount
