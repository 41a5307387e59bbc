"""SQLite's lexical query searches the full-text index once, not once per record in scope."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from memkit import Memkit, open_backend
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


async def test_kv_prefix_scans_are_primary_key_ranges(tmp_path: Path) -> None:
    path = tmp_path / "kv.db"
    async with open_backend(f"sqlite:///{path}") as backend:
        for i in range(20):
            await backend.kv_set("ns", f"tool:{i:02d}", b"v")
        statements: list[str] = []
        conn = backend._conn  # type: ignore[attr-defined]
        conn.set_trace_callback(statements.append)
        page = await backend.kv_scan("ns", prefix="tool:1", limit=3)
        page = await backend.kv_scan("ns", prefix="tool:1", limit=3, cursor=page.next_cursor)
        assert await backend.kv_delete_prefix("ns", "tool:0") == 10
        conn.set_trace_callback(None)
    assert [key for key, _ in page.items] == ["tool:13", "tool:14", "tool:15"]
    kv = [s for s in statements if "memkit_kv" in s]
    assert kv and not any("LIKE" in s.upper() or "GLOB" in s.upper() for s in kv)
    with sqlite3.connect(path) as check:
        for statement in kv:
            plan = " ".join(row[3] for row in check.execute(f"EXPLAIN QUERY PLAN {statement}"))
            assert "PRIMARY KEY" in plan and "key>" in plan.replace(" ", "") and "key<" in plan.replace(" ", ""), plan
