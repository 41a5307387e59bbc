"""WAL checkpoints in a thread of their own, off the writes' path.

In WAL mode a commit appends pages to the ``-wal`` file, and a checkpoint copies them into the database file
and syncs it. SQLite runs that checkpoint inside the commit that crosses its threshold (1,000 pages), so a
writer waited for the disk every 8 MB: on this project's machines that wait was a quarter to a third of an
import into SQLite (100k memories with vectors: ~60 -> ~40 us a memory). Here a thread with its own
connection checkpoints a moment after writes (``PASSIVE``: it never blocks a reader or a writer, and
gives up on pages a reader still needs), while the next batch is written. The writer's own checkpoint
stays, at a higher threshold, for when this thread falls behind.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import urllib.parse
from pathlib import Path
from typing import Final

__all__ = ["WRITER_CHECKPOINT_PAGES", "Checkpointer"]

WRITER_CHECKPOINT_PAGES: Final = 8192
"""The writer's own threshold (64 MB at 8 KiB pages): reached only if the thread here cannot keep up."""
_AFTER_WRITE_S: Final = 0.2
"""How long after a write the thread checkpoints: writes in between share one checkpoint (and one sync)."""


class Checkpointer:
    """Checkpoints ``path``'s WAL in a daemon thread, started by the first ``wrote()``; ``close()`` ends it.
    ``synchronous``: the writer's level (a validated ``PRAGMA synchronous`` value)."""

    def __init__(self, path: str, synchronous: str) -> None:
        # mode=rw: a file removed meanwhile is not created again, empty, by this connection. Resolved now: the
        # working directory may change before the first write starts the thread.
        self._uri = f"file:{urllib.parse.quote(str(Path(path).resolve()))}?mode=rw"
        self._synchronous = synchronous
        self._wrote = threading.Event()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def wrote(self) -> None:
        """Say that a transaction committed: a checkpoint follows shortly."""
        if self._thread is None:
            with self._start_lock:
                if self._thread is None and not self._closing.is_set():
                    self._thread = threading.Thread(target=self._loop, name="memkit-sqlite-checkpoint", daemon=True)
                    self._thread.start()
        self._wrote.set()

    def close(self) -> None:
        """Stop the thread (blocks until its checkpoint in progress, if any, ends; call it off the event loop)."""
        with self._start_lock:
            self._closing.set()
            thread = self._thread
        self._wrote.set()
        if thread is not None:
            thread.join()

    def _loop(self) -> None:
        try:
            conn = sqlite3.connect(self._uri, uri=True, isolation_level=None, check_same_thread=False)
        except sqlite3.Error:
            return
        try:
            with contextlib.suppress(sqlite3.Error):
                conn.execute(f"PRAGMA synchronous = {self._synchronous}")  # a checkpoint syncs as the writer would
            while not self._closing.is_set():
                # Woken by a write or by close(); the timeout only bounds a wake-up lost to a race with close()
                # (which sets _closing first, so a clear() after its set() is seen by the loop's test).
                if not self._wrote.wait(1.0):
                    continue
                if self._closing.wait(_AFTER_WRITE_S):
                    break
                self._wrote.clear()
                # An error (the file moved or broke) is left to the writer: its own checkpoint, or its error.
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        finally:
            conn.close()
