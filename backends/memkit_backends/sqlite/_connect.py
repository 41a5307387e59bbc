"""Opening the SQLite file, and saying why when it cannot be written.

SQLite reports every failure to create or write the file (and its ``-wal`` / ``-shm`` companions) as
"unable to open database file" or "attempt to write a readonly database"; the cause is found here.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from typing import TypeVar

from memkit.errors import BackendError, BackendRefusedError, BackendTimeoutError, BackendUnavailableError
from memkit_backends.sqlite._checkpoint import WRITER_CHECKPOINT_PAGES

__all__ = ["connect", "driver_error", "next_seqs", "transaction", "unwritable_reason"]


def unwritable_reason(path: str) -> tuple[type[BackendError], str] | None:
    """Why this process cannot create or write ``path`` (with its -wal and -shm files), if it cannot."""
    target = os.path.abspath(path)
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        return BackendUnavailableError, f"directory {directory} does not exist"
    if os.statvfs(directory).f_flag & os.ST_RDONLY:
        return BackendRefusedError, f"{directory} is on a read-only file system"
    if os.path.isdir(target):
        return BackendRefusedError, f"{target} is a directory"
    if os.path.exists(target) and not os.access(target, os.R_OK | os.W_OK):
        return BackendRefusedError, f"permission denied: {target} is not readable and writable by uid {os.getuid()}"
    if not os.access(directory, os.W_OK | os.X_OK):
        return BackendRefusedError, (
            f"permission denied: uid {os.getuid()} cannot create files in {directory} "
            "(SQLite needs to, for the -wal and -shm files beside the database)"
        )
    return None


def driver_error(path: str, timeout_s: float, exc: sqlite3.Error) -> BackendError:
    """The memkit error for a driver error (the caller chains it)."""
    message = str(exc)
    if _is_locked(exc):
        return BackendTimeoutError(
            f"{path} stayed locked by another connection for {timeout_s:g} s (raise ?timeout=): {exc}"
        )
    if "unable to open" in message or "readonly" in message or "read-only" in message:
        found = unwritable_reason(path)
        if found is not None:
            kind, reason = found
            return kind(f"cannot write SQLite file {path}: {reason} ({exc})")
        return BackendRefusedError(f"cannot write SQLite file {path}: {exc}")
    if "not a database" in message:
        return BackendRefusedError(f"{path} is not a SQLite database: {exc}")
    return BackendError(f"SQLite error on {path}: {exc}")


T = TypeVar("T")

CACHE_KIB = 8_192
"""SQLite's page cache per connection, in KiB (its default: 2,000). Reads are served by the process's copy
of the collection, so the cache serves writes alone; 32 MiB of it was 25 MiB of a 100k ingest's peak RSS
(521 -> 494-496 MiB at 8) for no write speed: raw upserts at 300k ran 45.6-46.9k/s at 8 MiB against
45.9-46.8k/s at 32 (``benchmarks.backends``), ``store_many`` and ``store()`` alike (``benchmarks.ingest``)."""


def connect(path: str, timeout_s: float, synchronous: str) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL journal, given synchronous level."""
    found = unwritable_reason(path)
    if found is not None and found[0] is BackendUnavailableError:  # SQLite would say only "unable to open"
        raise found[0](f"cannot open SQLite file {path}: {found[1]}")
    conn = None
    try:
        conn = sqlite3.connect(path, timeout=timeout_s, isolation_level=None, check_same_thread=False)
        # For a new file only (an existing one keeps its page size): a memory with a 384-dim vector is
        # 2-3 KB, so at 4 KiB a page held one or two, the rest empty; 8 KiB pages held 100k such memories in
        # 240 MB instead of 291 (30k with 150-500 character contents: 91 MB instead of 129).
        conn.execute("PRAGMA page_size = 8192")
        _enter_wal(conn, timeout_s)
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute(f"PRAGMA wal_autocheckpoint = {WRITER_CHECKPOINT_PAGES}")  # the Checkpointer's thread does it
        # SQLite's default page cache (2 MB) held less than the indexes a write updates: an id lands on a
        # random page of the (collection, id) index, read again from the OS each time (100k memories: 6 MB of
        # index; writing them 46 -> 32 us each). An upper bound, filled only as pages are used (CACHE_KIB).
        conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
    except sqlite3.Error as exc:
        if conn is not None:
            conn.close()
        raise driver_error(path, timeout_s, exc) from exc
    return conn


def _is_locked(exc: sqlite3.Error) -> bool:
    message = str(exc)
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in message or "busy" in message)


def _enter_wal(conn: sqlite3.Connection, timeout_s: float) -> None:
    """Switch to WAL, waiting up to ``timeout_s`` for other connections.

    Switching a rollback-journal file (one an older memkit or another tool wrote) needs an exclusive lock, and SQLite
    answers "locked" at once, without its busy handler, when waiting could deadlock with another connection's
    upgrade; several processes opening the same old file at once would fail. So the wait is done here (in a worker
    thread: sleeping does not block the event loop).
    """
    deadline = time.monotonic() + timeout_s
    delay_s = 0.002
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if not _is_locked(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(delay_s)
            delay_s = min(delay_s * 2, 0.05)


def transaction(conn: sqlite3.Connection, work: Callable[[], T]) -> T:
    """``work`` in one write transaction (``BEGIN IMMEDIATE``: the write lock first), rolled back if it raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = work()
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return result


def next_seqs(conn: sqlite3.Connection, count: int) -> int:
    """Reserve ``count`` change numbers; returns the first (inside a write transaction)."""
    end = conn.execute(
        "UPDATE memkit_meta SET value = value + ? WHERE key = 'change_seq' RETURNING value", (count,)
    ).fetchone()[0]
    return int(end) - count + 1
