"""Two clients of one SQLite file: the pruned deletion log, touches seen across caches."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from memkit import open_backend
from memkit.backend import Scope
from memkit.testing import make_record

pytestmark = pytest.mark.anyio
ALICE = Scope(user_id="alice")


def deletions(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM memkit_deletions").fetchone()[0])


def row_version(path: Path, record_id: str) -> tuple[object, ...]:
    """The record's row as stored: its rowid, change number and whole content."""
    with sqlite3.connect(path) as conn:
        return tuple(conn.execute("SELECT rowid, * FROM memkit_records WHERE id = ?", (record_id,)).fetchone())


async def test_the_deletion_log_is_pruned_and_a_reader_left_behind_reloads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "churn.db"
    url = f"sqlite:///{path}"
    async with open_backend(url) as writer, open_backend(url) as reader:
        writer.deletions_kept, writer.prune_every = 50, 10  # type: ignore[attr-defined]
        await writer.upsert("c", [make_record("early"), make_record("kept")])
        assert await reader.count("c", ALICE) == 2  # the reader caches the collection
        # A short churn: the reader catches up from the log.
        for i in range(5):
            await writer.upsert("c", [make_record(f"n{i}")])
            assert await writer.delete("c", [f"n{i}"]) == 1
        await writer.delete("c", ["early"])
        with caplog.at_level(logging.INFO, logger="memkit"):
            assert [r.id for r in (await reader.scan("c", ALICE)).records] == ["kept"]
        assert not any("reloading" in r.getMessage() for r in caplog.records)
        # A long churn (store, then forget, as the layers do): the log stays bounded.
        await writer.upsert("c", [make_record("late")])
        assert await reader.count("c", ALICE) == 2
        await writer.delete("c", ["late"])  # the reader has it cached; this entry of the log is pruned below
        for i in range(300):
            await writer.upsert("c", [make_record(f"m{i}")])
            await writer.delete("c", [f"m{i}"])
        assert deletions(path) <= 60
        with caplog.at_level(logging.INFO, logger="memkit"):
            assert [r.id for r in (await reader.scan("c", ALICE)).records] == ["kept"]
            assert await reader.get("c", ["late", "m5"]) == []
        assert any("reloading" in r.getMessage() for r in caplog.records)
    async with open_backend(url) as fresh:
        assert await fresh.count("c", ALICE) == 1


async def test_a_touch_is_seen_by_other_caches_and_leaves_the_text_index_alone(tmp_path: Path) -> None:
    path = tmp_path / "touch.db"
    url = f"sqlite:///{path}"
    async with open_backend(url) as one, open_backend(url) as two:
        await one.upsert("c", [make_record("r", text="some words"), make_record("s")])
        before = row_version(path, "r")
        assert (await two.get("c", ["r"]))[0].access_count == 0  # cached in the second client
        assert await one.count("c", ALICE) == 2  # and in the first (loaded by a read, not by its writes)
        statements: list[str] = []
        conn = one._conn  # type: ignore[attr-defined]
        conn.set_trace_callback(statements.append)
        await one.touch("c", {"r": 2, "ghost": 1}, 100.0)
        conn.set_trace_callback(None)
        assert not any("fts" in s for s in statements), statements
        await one.touch("c", {"r": 1}, 50.0)
        assert row_version(path, "r") == before  # counted beside the record: its row is not rewritten
        statements.clear()
        two._conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]
        [seen] = await two.get("c", ["r"])
        two._conn.set_trace_callback(None)  # type: ignore[attr-defined]
        assert (seen.access_count, seen.last_accessed) == (3, 100.0)
        # The other client caught up with the counts alone: no record row was changed for it to read again.
        assert any("FROM memkit_counters WHERE seq >" in s for s in statements), statements
        await two.upsert("c", [make_record("r", text="rewritten")])  # counters stay beside the record
        assert (await one.get("c", ["r"]))[0].access_count == 3
        await two.delete("c", ["r"])
        await one.upsert("c", [make_record("r")])
        assert (await two.get("c", ["r"]))[0].access_count == 0


async def test_create_if_absent_is_atomic_across_clients(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cas.db'}"
    async with open_backend(url) as one, open_backend(url) as two:
        await one.count("c", ALICE)
        await two.count("c", ALICE)  # both cached the empty collection
        first = make_record("node")
        assert await one.replace("c", first, expected_body=None) is True
        second = make_record("node")
        second = type(second)(**{**{f: getattr(second, f) for f in second.__struct_fields__}, "body": b"two"})
        assert await two.replace("c", second, expected_body=None) is False
        assert await two.replace("c", first, expected_body=None) is True  # a retry of the winner's call
        assert (await two.get("c", ["node"]))[0].body == first.body


async def test_counts_go_with_their_records_whichever_way_they_are_deleted(tmp_path: Path) -> None:
    """SQLite enforces no foreign keys unless asked: every delete deletes the counters rows itself, or a record
    stored again under the same id would come back with the counts of the one deleted."""
    path = tmp_path / "gone.db"
    async with open_backend(f"sqlite:///{path}") as backend:
        await backend.upsert("c", [make_record("kept"), make_record("forgotten"), make_record("old", expires_at=5.0)])
        await backend.touch("c", {"kept": 1, "forgotten": 2, "old": 3}, 1.0)
        assert await backend.delete("c", ["forgotten"]) == 1
        assert await backend.delete_expired("c", now=10.0) == 1
        await backend.upsert("c", [make_record("forgotten"), make_record("old")])
        got = {r.id: r.access_count for r in await backend.get("c", ["kept", "forgotten", "old"])}
    assert got == {"kept": 1, "forgotten": 0, "old": 0}
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT id, reads FROM memkit_counters").fetchall() == [("kept", 1)]


async def test_a_delete_by_anything_else_takes_the_counts_and_every_count_adds_alike(tmp_path: Path) -> None:
    """A delete in plain SQL (an older memkit still running, a hand edit) takes the record's counts too (a
    trigger in the file); a count of any sign adds the same in the writer, the file and other clients."""
    path = tmp_path / "other.db"
    url = f"sqlite:///{path}"
    async with open_backend(url) as one, open_backend(url) as two:
        await one.upsert("c", [make_record("r"), make_record("s")])
        assert await two.count("c", ALICE) == 2
        await one.touch("c", {"r": 4, "s": 1}, 1.0)
        await one.touch("c", {"r": -1}, 2.0)
        assert [r.access_count for r in await one.get("c", ["r"])] == [3]
        assert [r.access_count for r in await two.get("c", ["r"])] == [3]
        with sqlite3.connect(path) as conn:
            conn.execute("DELETE FROM memkit_records WHERE id = 'r'")
            assert conn.execute("SELECT id FROM memkit_counters").fetchall() == [("s",)]
