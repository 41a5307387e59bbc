"""Files written by older versions open and are upgraded in place to schema 5: schema 1 (full-text index
without the scope column), schema 2 (no access counters, no physical key expiry, no pruned deletion log),
schema 3 (an FTS5 table where version 4 keeps a plain table of tokens) and schema 4 (access counts in the
records' rows, where version 5 counts in a table beside them)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import numpy as np
import pytest

from memkit import open_backend
from memkit.backend import Backend, Query, Scope, Weights
from memkit.errors import CorruptDataError

pytestmark = pytest.mark.anyio

# What versions 1 and 2 wrote, verbatim (version 1 differs in the full-text table only).
_V2_TABLES = """
CREATE TABLE memkit_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT INTO memkit_meta (key, value) VALUES ('schema_version', {version}), ('change_seq', 1);
CREATE TABLE memkit_collections (name TEXT PRIMARY KEY, dim INTEGER);
CREATE TABLE memkit_records (
    collection TEXT NOT NULL, id TEXT NOT NULL, user_id TEXT, agent_id TEXT, session_id TEXT,
    body BLOB NOT NULL, text TEXT, vector BLOB, importance REAL NOT NULL, timestamp REAL NOT NULL,
    expires_at REAL, fields BLOB NOT NULL, seq INTEGER NOT NULL, UNIQUE (collection, id)
);
CREATE INDEX memkit_records_seq ON memkit_records (seq);
CREATE INDEX memkit_records_scope ON memkit_records (collection, user_id, agent_id, session_id);
CREATE INDEX memkit_records_expiry ON memkit_records (collection, expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE memkit_deletions (seq INTEGER PRIMARY KEY, collection TEXT NOT NULL, id TEXT NOT NULL);
CREATE TABLE memkit_kv (
    namespace TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, expires_at REAL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID;
"""
_FTS = {
    1: "CREATE VIRTUAL TABLE memkit_records_fts USING fts5 (tokens, tokenize = 'unicode61')",
    2: "CREATE VIRTUAL TABLE memkit_records_fts USING fts5 (tokens, scope, tokenize = 'unicode61')",
    3: "CREATE VIRTUAL TABLE memkit_records_fts USING fts5 (tokens, scope, tokenize = 'unicode61')",
    4: "CREATE TABLE memkit_tokens (record INTEGER PRIMARY KEY, collection TEXT NOT NULL, id TEXT NOT NULL, "
    "tokens TEXT NOT NULL)",
}
OLD_COUNT = 5
"""Accesses counted in the record's row by versions 3 and 4 (version 5 adds its own counts to them)."""
_ADDED_IN_3 = """
ALTER TABLE memkit_records ADD COLUMN access_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE memkit_records ADD COLUMN last_accessed REAL;
ALTER TABLE memkit_kv ADD COLUMN gc_at REAL;
INSERT INTO memkit_meta (key, value) VALUES ('deletions_floor', 0);
UPDATE memkit_kv SET gc_at = expires_at;
"""
LEXICAL = Weights(similarity=0.0, lexical=1.0, recency=0.0, importance=0.0)


def write_old_file(path: Path, version: int) -> float:
    """A file as version 1, 2, 3 or 4 left it: one record with text and a vector, one key with a TTL."""
    now = time.time()
    with sqlite3.connect(path) as conn:
        conn.executescript(_V2_TABLES.format(version=version) + _FTS[version] + ";")
        conn.execute("INSERT INTO memkit_collections VALUES ('memories', 4)")
        conn.execute(
            "INSERT INTO memkit_records VALUES ('memories', 'teapot', 'u', NULL, NULL, ?, ?, ?, 0.5, ?, NULL, ?, 1)",
            (b"body", "the blue teapot is in the attic", np.ones(4, np.float32).tobytes(), now, b'{"kind":"fact"}'),
        )
        if version == 1:
            conn.execute("INSERT INTO memkit_records_fts (rowid, tokens) SELECT rowid, 'blue teapot attic' "
                         "FROM memkit_records")  # fmt: skip
        elif version == 4:
            conn.execute("INSERT INTO memkit_tokens SELECT rowid, collection, id, 'blue teapot attic' "
                         "FROM memkit_records")  # fmt: skip
        else:
            conn.execute("INSERT INTO memkit_records_fts (rowid, tokens, scope) SELECT rowid, 'blue teapot attic', "
                         "'u0123456789abcdef0123' FROM memkit_records")  # fmt: skip
        conn.execute("INSERT INTO memkit_kv VALUES ('ns', 'k', ?, ?)", (b"v", now + 3600))
        if version >= 3:
            conn.executescript(_ADDED_IN_3)
            conn.execute("UPDATE memkit_records SET access_count = ?, last_accessed = ?", (OLD_COUNT, now - 60))
    return now


@asynccontextmanager
async def opened(path: Path) -> AsyncIterator[Backend]:
    async with open_backend(f"sqlite:///{path}") as backend:
        yield backend


def meta(path: Path, key: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT value FROM memkit_meta WHERE key = ?", (key,)).fetchone()[0])


@pytest.mark.parametrize("version", [1, 2, 3, 4])
async def test_an_old_file_is_upgraded_in_place(tmp_path: Path, version: int) -> None:
    path = tmp_path / f"v{version}.db"
    now = write_old_file(path, version)
    counted = OLD_COUNT if version >= 3 else 0
    async with opened(path) as backend:
        ask = Query(scope=Scope(user_id="u"), text="teapot", weights=LEXICAL, now=now, k=1)
        [hit] = await backend.query("memories", ask)
        assert hit.record.id == "teapot" and hit.scores.lexical == pytest.approx(1.0)
        assert hit.record.fields == {"kind": "fact"} and hit.record.access_count == counted
        assert await backend.kv_get("ns", "k") == b"v"
        # Counting works on the upgraded file, and adds to what the old version counted.
        await backend.touch("memories", {"teapot": 2}, now)
        [record] = await backend.get("memories", ["teapot"])
        assert record.access_count == counted + 2 and record.last_accessed == pytest.approx(now)
        assert [k for k, _ in (await backend.kv_scan("ns")).items] == ["k"]
    assert meta(path, "schema_version") == 5 and meta(path, "deletions_floor") == 0
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT gc_at FROM memkit_kv").fetchone()[0] == pytest.approx(now + 3600)
        # Version 4: the FTS5 table is gone, the text's tokens (memkit's, stemmed) are kept by rowid.
        assert conn.execute("SELECT r.id, t.tokens FROM memkit_records r JOIN memkit_tokens t ON t.record = r.rowid"
                            ).fetchall() == [("teapot", "blue teapot attic")]  # fmt: skip
        assert conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'memkit_records_fts'").fetchone() is None
        # Version 5: the counts are beside the record, the old version's copied there from its row (which is
        # not rewritten: its columns are no longer read).
        assert conn.execute("SELECT access_count FROM memkit_records").fetchall() == [(counted,)]
        assert conn.execute("SELECT id, reads FROM memkit_counters").fetchall() == [("teapot", counted + 2)]
    async with opened(path) as backend:  # the upgrade is idempotent, and the counters persisted
        assert (await backend.get("memories", ["teapot"]))[0].access_count == counted + 2


async def test_two_clients_upgrading_at_once(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    write_old_file(path, 2)
    counts: list[int] = []

    async def client() -> None:
        async with opened(path) as backend:
            counts.append(await backend.count("memories", Scope(user_id="u")))

    # Switching the old file to WAL races too: SQLite answers "locked" at once there, without its busy handler.
    async with anyio.create_task_group() as group:
        for _ in range(6):
            group.start_soon(client)
    assert counts == [1] * 6 and meta(path, "schema_version") == 5


async def test_an_old_file_with_a_text_that_is_not_utf8_still_opens(tmp_path: Path) -> None:
    """The upgrade copies the tokens in SQL: one undecodable text (written by hand or by a bug) is that
    record's problem, never the whole file's (every open of it failed while the upgrade decoded texts)."""
    path = tmp_path / "v3.db"
    write_old_file(path, 3)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO memkit_records (collection, id, user_id, body, text, importance, timestamp, "
            "fields, seq) VALUES ('junk', 'bad', 'u', x'00', CAST(x'ff74656170' AS TEXT), 0.5, 1.0, '{}', 2)"
        )
    async with opened(path) as backend:
        assert [r.id for r in await backend.get("memories", ["teapot"])] == ["teapot"]
        assert await backend.kv_get("ns", "k") == b"v"
    assert meta(path, "schema_version") == 5


async def test_a_newer_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    write_old_file(path, 2)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE memkit_meta SET value = 99 WHERE key = 'schema_version'")
    with pytest.raises(CorruptDataError, match="newer memkit"):
        async with opened(path):
            pass
