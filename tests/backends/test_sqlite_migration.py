"""A file written with schema 1 (full-text index without the scope column) opens and is upgraded."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from memkit import Memkit
from memkit.embedders import HashingEmbedder

pytestmark = pytest.mark.anyio


async def test_schema_1_file_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    url = f"sqlite:///{path}"
    async with Memkit(url, embedder=HashingEmbedder(32)) as mem:
        await mem.long_term.store("the blue teapot is in the attic", user_id="u")
    with sqlite3.connect(path) as conn:  # turn it into what schema 1 wrote
        conn.execute("DROP TABLE memkit_records_fts")
        conn.execute("CREATE VIRTUAL TABLE memkit_records_fts USING fts5 (tokens, tokenize = 'unicode61')")
        conn.execute(
            "INSERT INTO memkit_records_fts (rowid, tokens) SELECT rowid, 'blue teapot attic' FROM memkit_records"
        )
        conn.execute("UPDATE memkit_meta SET value = 1 WHERE key = 'schema_version'")
    async with Memkit(url, embedder=HashingEmbedder(32)) as mem:
        hits = await mem.long_term.recall("teapot", user_id="u")
        assert hits[0].memory.content == "the blue teapot is in the attic" and hits[0].lexical == pytest.approx(1.0)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM memkit_meta WHERE key = 'schema_version'").fetchone()[0] == 2
