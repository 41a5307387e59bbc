"""SQLite's lexical query searches the full-text index once, not once per record in scope."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from memkit import Memkit
from memkit.embedders import HashingEmbedder

pytestmark = pytest.mark.anyio


async def test_fts_is_the_outer_loop(tmp_path: Path) -> None:
    path = tmp_path / "plan.db"
    async with Memkit(f"sqlite:///{path}", embedder=HashingEmbedder(32)) as mem:
        for i in range(30):
            await mem.long_term.store(f"note {i} about topic{i}", user_id="u")
        statements: list[str] = []
        conn = mem.backend._conn  # type: ignore[attr-defined]
        conn.set_trace_callback(statements.append)
        await mem.long_term.recall("topic7 note", user_id="u")
        conn.set_trace_callback(None)
    fts = next(s for s in statements if "MATCH" in s)
    with sqlite3.connect(path) as check:
        plan = check.execute(f"EXPLAIN QUERY PLAN {fts}").fetchall()
    assert "memkit_records_fts" in plan[0][3] and "SCAN" in plan[0][3]
