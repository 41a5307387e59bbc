"""SQLite schema, upgraded in place from any older version, idempotently, inside the caller's transaction.

Version 2 added the scope column of the full-text index; version 3 added the access counters
(``access_count``, ``last_accessed`` of ``memkit_records``), the physical expiry of keys (``gc_at`` of
``memkit_kv``) and ``deletions_floor``, the newest change number pruned from ``memkit_deletions``.
Version 4 dropped the FTS5 table (``memkit_records_fts``) for ``memkit_tokens``, each text's tokens by
its row's rowid: queries score text from the in-process BM25 index since version 3, so the FTS5 index
was written with every row and never searched. The tokens are kept so that loading a collection does
not tokenize its texts again; they are not a column of ``memkit_records`` because its rows are sized
for the page: a 384-dimensional record and its tokens no longer fit two to a 4 KiB page (the file of
100k such memories doubled, and with it every write and read of them). Each tokens row names its
record's collection and id too, and is used only where they still match: a copy that renumbers rowids
(``.dump`` and restore) would otherwise give records other records' tokens; a mismatch is tokenized.
Version 5 moved access counts to ``memkit_counters``: a small row per counted record (by collection and
id) with a change number of its own. A count rewrote the record's whole row (vector and text: 21 KB
written per count at 100k records, pages and all), and every other client re-read and decoded that row.
The upgrade copies the counts from the records' rows (``access_count``, ``last_accessed``: no longer read,
and not cleared: that rewrote every counted row, vector and all). A trigger deletes a record's counters row
with it, whoever deletes it (an older memkit still running, a hand edit): SQLite enforces no foreign keys
unless each connection asks, and a record stored again under the id would have taken the old counts.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from memkit.errors import CorruptDataError

__all__ = ["SCHEMA_VERSION", "create_schema"]

SCHEMA_VERSION: Final = 5

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
CREATE TABLE IF NOT EXISTS memkit_tokens (
    record INTEGER PRIMARY KEY, collection TEXT NOT NULL, id TEXT NOT NULL, tokens TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS memkit_counters (
    collection TEXT NOT NULL, id TEXT NOT NULL, reads INTEGER NOT NULL, read_at REAL, seq INTEGER NOT NULL,
    PRIMARY KEY (collection, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS memkit_deletions (seq INTEGER PRIMARY KEY, collection TEXT NOT NULL, id TEXT NOT NULL);
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
CREATE INDEX IF NOT EXISTS memkit_counters_seq ON memkit_counters (seq);
CREATE INDEX IF NOT EXISTS memkit_kv_gc ON memkit_kv (gc_at) WHERE gc_at IS NOT NULL;
"""

_COUNTERS_FOLLOW: Final = """
CREATE TRIGGER IF NOT EXISTS memkit_counters_follow AFTER DELETE ON memkit_records BEGIN
    DELETE FROM memkit_counters WHERE collection = OLD.collection AND id = OLD.id; END
"""
"""One statement (``_execute`` splits scripts at each ``;`` that ends a line)."""

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
    _execute(conn, _TABLES.format(version=SCHEMA_VERSION))
    _add_columns(conn)
    _execute(conn, _INDEXES)
    conn.execute(_COUNTERS_FOLLOW)
    if version is not None and version < 4:
        _copy_tokens(conn)
    if version is not None and version < 5:
        _move_counts(conn)
    if version is not None and version < SCHEMA_VERSION:
        conn.execute("UPDATE memkit_meta SET value = ? WHERE key = 'schema_version'", (SCHEMA_VERSION,))


def _execute(conn: sqlite3.Connection, script: str) -> None:
    # Statement by statement: executescript() would commit the caller's transaction.
    for statement in script.split(";\n"):
        if statement.strip():
            conn.execute(statement)


def _add_columns(conn: sqlite3.Connection) -> None:
    """Version 3's columns on tables an older version created (a no-op on a version 3 or 4 file)."""
    for table, columns in _ADDED_IN_3.items():
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        for name, declaration in columns:
            if name not in have:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {declaration}")
                if name == "gc_at":  # older versions judged expiry by the process clock: the same deadline
                    conn.execute("UPDATE memkit_kv SET gc_at = expires_at")


def _copy_tokens(conn: sqlite3.Connection) -> None:
    # Copied in SQL, not tokenized again: quick on a big file (the write lock is held, and other processes
    # opening it wait at most their busy timeout), no text is decoded (one text that is not UTF-8 failed
    # every open), and the tokens are those the version that wrote the file scored with.
    if _has_table(conn, "memkit_records_fts"):
        conn.execute("INSERT OR REPLACE INTO memkit_tokens (record, collection, id, tokens) "
                     "SELECT r.rowid, r.collection, r.id, f.tokens FROM memkit_records_fts f "
                     "JOIN memkit_records r ON r.rowid = f.rowid WHERE typeof(f.tokens) = 'text'")  # fmt: skip
        conn.execute("DROP TABLE memkit_records_fts")


def _move_counts(conn: sqlite3.Connection) -> None:
    # Counts that cannot be read (a hand edit) are dropped, as a rewrite of their row dropped them before.
    conn.execute("INSERT OR IGNORE INTO memkit_counters (collection, id, reads, read_at, seq) "
                 "SELECT collection, id, access_count, CASE WHEN typeof(last_accessed) IN ('integer', 'real') "
                 "THEN last_accessed END, seq FROM memkit_records WHERE typeof(access_count) = 'integer' "
                 "AND (access_count != 0 OR last_accessed IS NOT NULL)")  # fmt: skip


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone() is not None
