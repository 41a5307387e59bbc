"""SQLite's queries: text scored in process, key-value prefix scans as primary-key ranges."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from memkit import Memkit, open_backend
from memkit.embedders import HashingEmbedder

pytestmark = pytest.mark.anyio


async def test_a_recall_scores_its_text_in_process(tmp_path: Path) -> None:
    """Text is scored by the cache's BM25 over the user's rows: no full-text SQL per recall (FTS5 took 1-2 ms
    of a 3 ms recall at 10k rows, holding the one connection every store waits for)."""
    path = tmp_path / "plan.db"
    async with Memkit(f"sqlite:///{path}", embedder=HashingEmbedder(32)) as mem:
        for i in range(30):
            await mem.long_term.store(f"note {i} about topic{i}", user_id="u")
        await mem.long_term.recall("warm up", user_id="u")  # a collection nothing read yet loads on a first read
        statements: list[str] = []
        conn = mem.backend._conn  # type: ignore[attr-defined]
        conn.set_trace_callback(statements.append)
        hits = await mem.long_term.recall("topic7 note", user_id="u")
        conn.set_trace_callback(None)
    assert hits[0].memory.content == "note 7 about topic7" and hits[0].lexical == pytest.approx(1.0)
    assert not any("MATCH" in s or "memkit_records_fts" in s for s in statements), statements


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


async def test_a_write_reads_back_only_its_own_rows(tmp_path: Path) -> None:
    """An upsert's SELECTs go by change number or by id, never through a whole collection (a lookup by
    ``seq >= ? AND collection = ?`` was planned on the scope index: every row of the collection, per batch)."""
    from memkit.testing import make_record

    path = tmp_path / "w.db"
    async with open_backend(f"sqlite:///{path}") as backend:
        await backend.upsert("c", [make_record(f"r{i}", text=f"note {i}", seed=i) for i in range(50)])
        statements: list[str] = []
        conn = backend._conn  # type: ignore[attr-defined]
        conn.set_trace_callback(statements.append)
        await backend.upsert("c", [make_record("late", text="late note", seed=99)])
        conn.set_trace_callback(None)
    reads = [s for s in statements if s.lstrip().upper().startswith("SELECT") and "memkit_records" in s]
    assert reads
    with sqlite3.connect(path) as check:
        for statement in reads:
            plan = " ".join(row[3] for row in check.execute(f"EXPLAIN QUERY PLAN {statement}"))
            assert "memkit_records_scope" not in plan and "SCAN memkit_records" not in plan, (statement, plan)


async def test_catching_up_reads_only_the_changed_rows(tmp_path: Path) -> None:
    """Another connection's commit is applied by reading the rows changed since (by change number), not
    every row of the loaded collections (planned on the scope index: 2.3 s per catch-up at 100k rows); the
    same for counts counted and rows deleted."""
    from memkit.backend import Scope
    from memkit.testing import make_record

    path, url = tmp_path / "c.db", f"sqlite:///{tmp_path / 'c.db'}"
    async with open_backend(url) as backend, open_backend(url) as other:
        await backend.upsert("c", [make_record(f"r{i}", text=f"note {i}", seed=i) for i in range(50)])
        assert await backend.count("c", Scope(user_id="alice")) == 50  # loaded
        await other.upsert("c", [make_record("late", seed=99)])
        await other.delete("c", ["r3"])
        await other.touch("c", {"r4": 2}, 100.0)
        statements: list[str] = []
        conn = backend._conn  # type: ignore[attr-defined]
        conn.set_trace_callback(statements.append)
        assert await backend.count("c", Scope(user_id="alice")) == 50  # caught up: one in, one out
        conn.set_trace_callback(None)
        assert [r.access_count for r in await backend.get("c", ["r4"])] == [2]
    reads = [s for s in statements if s.lstrip().upper().startswith("SELECT") and "seq >" in s]
    assert len(reads) == 3
    with sqlite3.connect(path) as check:
        for statement in reads:
            plan = " ".join(row[3] for row in check.execute(f"EXPLAIN QUERY PLAN {statement}"))
            assert "memkit_records_scope" not in plan and "SCAN" not in plan, (statement, plan)


async def test_a_load_reads_a_big_collection_in_table_order_and_a_small_one_by_index(tmp_path: Path) -> None:
    """Loading the collection that is most of the file reads the table in its own order (by the scope
    index every row was a jump); a small collection beside a big one is read through the index."""
    from memkit.backend import Scope
    from memkit.testing import make_record

    path, url = tmp_path / "l.db", f"sqlite:///{tmp_path / 'l.db'}"
    async with open_backend(url) as backend:
        await backend.upsert("big", [make_record(f"r{i}", seed=i) for i in range(40)])
        await backend.upsert("small", [make_record(f"s{i}", seed=i) for i in range(5)])
    plans: dict[str, str] = {}
    async with open_backend(url) as backend:
        statements: list[str] = []
        conn = backend._conn  # type: ignore[attr-defined]
        conn.set_trace_callback(statements.append)
        for name in ("big", "small"):
            await backend.count(name, Scope(user_id="alice"))
        conn.set_trace_callback(None)
    with sqlite3.connect(path) as check:
        for statement in statements:
            if statement.startswith("SELECT r.rowid, r.collection, r.id"):
                name = "big" if "'big'" in statement else "small"
                plans[name] = " ".join(row[3] for row in check.execute(f"EXPLAIN QUERY PLAN {statement}"))
    assert plans["big"].startswith("SCAN r"), plans
    assert "USING INDEX" in plans["small"] and not plans["small"].startswith("SCAN"), plans


async def test_a_new_file_has_8k_pages_and_an_old_one_keeps_its_own(tmp_path: Path) -> None:
    """Memories of 2-3 KB left 4 KiB pages half empty; a file made before keeps its page size and works."""
    from memkit.backend import Scope
    from memkit.testing import make_record

    old = tmp_path / "old.db"
    with sqlite3.connect(old) as conn:
        conn.execute("PRAGMA page_size = 4096")
        conn.execute("CREATE TABLE other (a)")
    for path in (tmp_path / "new.db", old):
        async with open_backend(f"sqlite:///{path}") as backend:
            await backend.upsert("c", [make_record(f"r{i}", text=f"note {i}", seed=i) for i in range(5)])
        async with open_backend(f"sqlite:///{path}") as backend:
            assert await backend.count("c", Scope(user_id="alice")) == 5
    for path, size in ((tmp_path / "new.db", 8192), (old, 4096)):
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA page_size").fetchone()[0] == size
