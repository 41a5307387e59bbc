"""SQLite schema, upgraded in place: version 1 -> 2 -> 3, idempotently, inside the caller's transaction.

Version 2 added the scope column of the full-text index; version 3 added the access counters
(``access_count``, ``last_accessed`` of ``memkit_records``), the physical expiry of keys (``gc_at`` of
``memkit_kv``) and ``deletions_floor``, the newest change number pruned from ``memkit_deletions``.
"""

from __future__ import annotations

import hashlib
import sqlite3
from typing import Final

from memkit.backend import Record, Scope
from memkit.errors import CorruptDataError
from memkit.text import tokenize

__all__ = ["SCHEMA_VERSION", "create_schema", "fts_tokens", "scope_tokens"]

SCHEMA_VERSION: Final = 3

_TABLES: Final = """
CREATE TABLE IF NOT EXISTS memkit_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO memkit_meta (key, value) VALUES ('schema_version', {version}), ('change_seq', 0),
    ('deletions_floor', 0);
CREATE TABLE IF NOT EXISTS memkit_collections (name TEXT PRIMARY KEY, dim INTEGER);
CREATE TABLE IF NOT EXISTS memkit_records (
    collection TEXT NOT NULL,
    id TEXT NOT NULL,
    user_id TEXT,
    agent_id TEXT,
    session_id TEXT,
    body BLOB NOT NULL,
    text TEXT,
    vector BLOB,
    importance REAL NOT NULL,
    timestamp REAL NOT NULL,
    expires_at REAL,
    fields BLOB NOT NULL,
    seq INTEGER NOT NULL,
    access_count INTEGER NOT NULL DEFAULT 0,
    last_accessed REAL,
    UNIQUE (collection, id)
);
CREATE TABLE IF NOT EXISTS memkit_deletions (seq INTEGER PRIMARY KEY, collection TEXT NOT NULL, id TEXT NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS memkit_records_fts USING fts5 (tokens, scope, tokenize = 'unicode61');
CREATE TABLE IF NOT EXISTS memkit_kv (
    namespace TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, expires_at REAL, gc_at REAL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID;
"""

_INDEXES: Final = """
CREATE INDEX IF NOT EXISTS memkit_records_seq ON memkit_records (seq);
CREATE INDEX IF NOT EXISTS memkit_records_scope ON memkit_records (collection, user_id, agent_id, session_id);
CREATE INDEX IF NOT EXISTS memkit_records_expiry ON memkit_records (collection, expires_at)
    WHERE expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS memkit_kv_gc ON memkit_kv (gc_at) WHERE gc_at IS NOT NULL;
"""

_ADDED_IN_3: Final = {
    "memkit_records": (("access_count", "INTEGER NOT NULL DEFAULT 0"), ("last_accessed", "REAL")),
    "memkit_kv": (("gc_at", "REAL"),),
}


def create_schema(conn: sqlite3.Connection) -> None:
    """Create or upgrade the schema; the caller holds the write lock (``BEGIN IMMEDIATE``)."""
    version = conn.execute(
        "SELECT value FROM memkit_meta WHERE key = 'schema_version'"
        if _has_table(conn, "memkit_meta")
        else "SELECT NULL"
    ).fetchone()[0]
    if version is not None and version > SCHEMA_VERSION:
        raise CorruptDataError(f"this file was written by a newer memkit (schema {version}); upgrade memkit")
    if version == 1:
        conn.execute("DROP TABLE memkit_records_fts")  # v2 adds the scope column; rebuilt below
    _execute(conn, _TABLES.format(version=SCHEMA_VERSION))
    _add_columns(conn)
    _execute(conn, _INDEXES)
    if version == 1:
        _rebuild_fts(conn)
    if version is not None and version < SCHEMA_VERSION:
        conn.execute("UPDATE memkit_meta SET value = ? WHERE key = 'schema_version'", (SCHEMA_VERSION,))


def _execute(conn: sqlite3.Connection, script: str) -> None:
    # Statement by statement: executescript() would commit the caller's transaction.
    for statement in script.split(";\n"):
        if statement.strip():
            conn.execute(statement)


def _add_columns(conn: sqlite3.Connection) -> None:
    """Version 3's columns on tables an older version created (a no-op on a version 3 file)."""
    for table, columns in _ADDED_IN_3.items():
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        for name, declaration in columns:
            if name not in have:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {declaration}")
                if name == "gc_at":  # older versions judged expiry by the process clock: the same deadline
                    conn.execute("UPDATE memkit_kv SET gc_at = expires_at")


def _rebuild_fts(conn: sqlite3.Connection) -> None:
    rows = conn.execute("SELECT rowid, text, user_id, agent_id, session_id FROM memkit_records WHERE text IS NOT NULL")
    conn.executemany(
        "INSERT INTO memkit_records_fts (rowid, tokens, scope) VALUES (?, ?, ?)",
        [(rowid, " ".join(tokenize(text)), scope_tokens(Scope(user_id=u, agent_id=a, session_id=s)))
         for rowid, text, u, a, s in rows],
    )  # fmt: skip


def scope_tokens(scope: Scope) -> str:
    """Scope ids as FTS5 terms (hex, so any id is one safe token): the text search itself is scoped."""
    return " ".join(
        f"{prefix}{hashlib.blake2b(value.encode(), digest_size=10).hexdigest()}"
        for prefix, value in (("u", scope.user_id), ("a", scope.agent_id), ("s", scope.session_id))
        if value is not None
    )


def fts_tokens(record: Record) -> str | None:
    """The text FTS5 indexes: memkit's own tokens, so stemming and stop words match ``memory://``."""
    return " ".join(tokenize(record.text)) if record.text else None


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone() is not None
