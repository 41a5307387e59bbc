"""SQLite schema and the row <-> Record codec."""

from __future__ import annotations

import hashlib
import sqlite3
from typing import Any, Final

import msgspec
import numpy as np

from memkit.backend import FieldValue, Record, Scope
from memkit.errors import CorruptDataError
from memkit.text import tokenize

__all__ = [
    "RECORD_COLUMNS",
    "SCHEMA_VERSION",
    "create_schema",
    "fts_tokens",
    "record_from_row",
    "record_params",
    "scope_tokens",
]

SCHEMA_VERSION: Final = 2

_DDL: Final = """
CREATE TABLE IF NOT EXISTS memkit_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO memkit_meta (key, value) VALUES ('schema_version', {version}), ('change_seq', 0);
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
    UNIQUE (collection, id)
);
CREATE INDEX IF NOT EXISTS memkit_records_seq ON memkit_records (seq);
CREATE INDEX IF NOT EXISTS memkit_records_scope ON memkit_records (collection, user_id, agent_id, session_id);
CREATE INDEX IF NOT EXISTS memkit_records_expiry ON memkit_records (collection, expires_at)
    WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS memkit_deletions (seq INTEGER PRIMARY KEY, collection TEXT NOT NULL, id TEXT NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS memkit_records_fts USING fts5 (tokens, scope, tokenize = 'unicode61');
CREATE TABLE IF NOT EXISTS memkit_kv (
    namespace TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, expires_at REAL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID;
"""

RECORD_COLUMNS: Final = (
    "rowid, collection, id, user_id, agent_id, session_id, body, text, vector, importance, timestamp, expires_at, "
    "fields, seq"
)
_fields_encoder = msgspec.json.Encoder()
_fields_decoder = msgspec.json.Decoder(dict[str, str | int | float | bool])


def create_schema(conn: sqlite3.Connection) -> None:
    version = conn.execute(
        "SELECT value FROM memkit_meta WHERE key = 'schema_version'"
        if _has_table(conn, "memkit_meta")
        else "SELECT NULL"
    ).fetchone()[0]
    if version is not None and version > SCHEMA_VERSION:
        raise CorruptDataError(f"this file was written by a newer memkit (schema {version}); upgrade memkit")
    if version == 1:
        conn.execute("DROP TABLE memkit_records_fts")  # v2 adds the scope column; rebuilt below
    # Statement by statement: executescript() would commit the caller's transaction.
    for statement in _DDL.format(version=SCHEMA_VERSION).split(";\n"):
        if statement.strip():
            conn.execute(statement)
    if version == 1:
        _rebuild_fts(conn)
        conn.execute("UPDATE memkit_meta SET value = ? WHERE key = 'schema_version'", (SCHEMA_VERSION,))


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


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone() is not None


def record_params(collection: str, record: Record, seq: int) -> tuple[Any, ...]:
    vector = None if record.vector is None else np.ascontiguousarray(record.vector, np.float32).tobytes()
    scope = record.scope
    return (
        collection, record.id, scope.user_id, scope.agent_id, scope.session_id, record.body, record.text, vector,
        record.importance, record.timestamp, record.expires_at, _fields_encoder.encode(record.fields), seq,
    )  # fmt: skip


def fts_tokens(record: Record) -> str | None:
    """The text FTS5 indexes: memkit's own tokens, so stemming and stop words match ``memory://``."""
    return " ".join(tokenize(record.text)) if record.text else None


def record_from_row(row: tuple[Any, ...]) -> Record:
    try:
        fields: dict[str, FieldValue] = _fields_decoder.decode(row[12])
        vector = None if row[8] is None else np.frombuffer(row[8], dtype=np.float32).copy()
    except (msgspec.DecodeError, ValueError) as exc:
        raise CorruptDataError(f"record {row[2]!r} in collection {row[1]!r} cannot be decoded: {exc}") from exc
    return Record(
        id=row[2],
        scope=Scope(user_id=row[3], agent_id=row[4], session_id=row[5]),
        body=bytes(row[6]),
        text=row[7],
        vector=vector,
        importance=row[9],
        timestamp=row[10],
        expires_at=row[11],
        fields=fields,
    )
