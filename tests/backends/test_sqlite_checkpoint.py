"""SQLite: the WAL is checkpointed by the backend's own thread, off the writes' path, and that thread ends
with the backend."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import anyio
import numpy as np
import pytest
from memkit_backends.sqlite import SQLiteBackend
from memkit_backends.sqlite._checkpoint import WRITER_CHECKPOINT_PAGES

from memkit.backend import Record, Scope, StorageURL

pytestmark = pytest.mark.anyio

DIM = 384


def _records(n: int, start: int = 0) -> list[Record]:
    rng = np.random.default_rng(start)
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return [Record(id=f"r{start + i}", scope=Scope(user_id="u"), body=b"{}", text=f"note {start + i}",
                   vector=vectors[i], importance=0.5, timestamp=1.0) for i in range(n)]  # fmt: skip


def _checkpoint_threads() -> set[threading.Thread]:
    """Alive checkpoint threads (another test's backend left open may own one: compare with a baseline)."""
    return {t for t in threading.enumerate() if t.name == "memkit-sqlite-checkpoint"}


def _open_files_under(folder: Path) -> list[str]:
    found = (os.path.realpath(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd"))
    return [path for path in found if path.startswith(str(folder))]


def _waited_to_grow(path: Path, size: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while path.stat().st_size < size:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


async def _grows_past(path: Path, size: int) -> bool:
    return await anyio.to_thread.run_sync(_waited_to_grow, path, size)


async def test_written_pages_reach_the_database_file_before_the_writer_would_checkpoint(tmp_path: Path) -> None:
    """~12 MB of rows, far under the writer's own threshold (64 MB): without the thread they would all stay in
    the WAL until the backend closed."""
    path = tmp_path / "x.db"
    written = 6_000 * DIM * 4
    assert written < WRITER_CHECKPOINT_PAGES * 8192 // 2
    before = _checkpoint_threads()
    async with SQLiteBackend(StorageURL(f"sqlite:///{path}")) as backend:
        await backend.ensure_collection("c", DIM)
        for start in range(0, 6_000, 1_000):
            await backend.upsert("c", _records(1_000, start))
        assert await _grows_past(path, written)  # the database file itself, not only its -wal
        assert len(_checkpoint_threads() - before) == 1
        assert await backend.count("c", Scope(user_id="u")) == 6_000
    assert not _checkpoint_threads() - before  # ended with the backend
    assert not (tmp_path / "x.db-wal").exists()  # and the last connection's close emptied the WAL


async def test_a_reopened_backend_checkpoints_again(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    before = _checkpoint_threads()
    backend = SQLiteBackend(StorageURL(f"sqlite:///{path}"))
    async with backend:
        await backend.ensure_collection("c", DIM)
        await backend.upsert("c", _records(10))
    size = path.stat().st_size
    async with backend:  # the same object, opened again
        for start in range(10, 4_010, 1_000):
            await backend.upsert("c", _records(1_000, start))
        assert await _grows_past(path, size + 4_000 * DIM * 4)
    assert not _checkpoint_threads() - before


async def test_a_backend_that_only_reads_starts_no_thread(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    async with SQLiteBackend(StorageURL(f"sqlite:///{path}")) as backend:
        await backend.ensure_collection("c", DIM)
        await backend.upsert("c", _records(10))
    before = _checkpoint_threads()
    async with SQLiteBackend(StorageURL(f"sqlite:///{path}")) as backend:
        assert await backend.count("c", Scope(user_id="u")) == 10
        assert not _checkpoint_threads() - before


def test_close_ends_the_thread_whenever_it_comes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """close() racing the thread's own steps (a write's signal, the pause after it, the checkpoint): the
    thread ends every time. A close() landing between the pause and the thread's clear() once left it waiting
    for a write forever, and an import hung at its end."""
    import sqlite3

    from memkit_backends.sqlite import _checkpoint

    path = tmp_path / "x.db"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
    monkeypatch.setattr(_checkpoint, "_AFTER_WRITE_S", 0.0005)  # the pause: the race's window, made frequent
    for attempt in range(300):
        checkpointer = _checkpoint.Checkpointer(str(path), "NORMAL")
        checkpointer.wrote()
        time.sleep((attempt % 7) * 0.0002)
        closing = threading.Thread(target=checkpointer.close, daemon=True)  # a hung one must not hold pytest
        closing.start()
        closing.join(timeout=5.0)
        assert not closing.is_alive(), f"close() did not return (attempt {attempt})"


async def test_a_backend_closed_while_cancelled_leaves_no_thread_or_open_file(tmp_path: Path) -> None:
    """Leaving ``async with`` by a timeout cancels its close too: it must close all the same."""
    path = tmp_path / "x.db"
    before = _checkpoint_threads()
    with anyio.move_on_after(0.5):
        async with SQLiteBackend(StorageURL(f"sqlite:///{path}")) as backend:
            await backend.ensure_collection("c", DIM)
            await backend.upsert("c", _records(10))
            await anyio.sleep(30)
    assert not _checkpoint_threads() - before
    assert not _open_files_under(tmp_path)
    assert not (tmp_path / "x.db-wal").exists()


async def test_the_thread_finds_the_file_after_the_working_directory_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative sqlite:///x.db, then os.chdir before the first write: the thread still checkpoints x.db."""
    monkeypatch.chdir(tmp_path)
    async with SQLiteBackend(StorageURL("sqlite:///x.db")) as backend:
        await backend.ensure_collection("c", DIM)
    size = (tmp_path / "x.db").stat().st_size
    async with SQLiteBackend(StorageURL("sqlite:///x.db")) as backend:  # an existing file: opening writes nothing
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        monkeypatch.chdir(elsewhere)
        for start in range(0, 3_000, 1_000):
            await backend.upsert("c", _records(1_000, start))
        assert await _grows_past(tmp_path / "x.db", size + 3_000 * DIM * 4)
