"""The in-process mirror of the file: one columnar collection per collection read, kept in step.

Another process may write the same file, so before every operation the cache compares SQLite's
``PRAGMA data_version`` with the last one it saw and, if it moved, applies only the rows whose change
number (``seq``) is newer, the access counts counted since (``memkit_counters`` rows: two numbers per
record, not its row), and the deletions logged since. The deletion log is pruned (it grew by one
row per forget, forever); ``deletions_floor`` is the newest change number pruned, and a cache that last
looked before it reloads its collections instead of applying a log with holes.

A row that cannot be decoded (corrupt, or NaN written by an older version) is skipped with a warning on
the "memkit" logger and remembered in ``undecodable``, so ``delete`` can still remove it.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Any, Final, Literal

from memkit.backend import Record
from memkit.errors import CorruptDataError
from memkit.scoring import StorageDtype
from memkit_backends._embedded.columnar import ColumnarCollection
from memkit_backends.sqlite._codec import RECORD_COLUMNS, RECORD_SOURCE, counts_of, record_from_row

__all__ = ["DELETIONS_KEPT", "RecordCache", "file_dim", "log_deletions", "prune_deletions"]

logger = logging.getLogger("memkit")

DELETIONS_KEPT: Final = 10_000
"""Deletions kept in the log: a reader idle across more forgets than this reloads what it had cached."""
_LOAD_BATCH = 5_000
_SEQ_COLUMN = 13
_COLLECTION_COLUMN, _ID_COLUMN = 1, 2
_TOKENS_COLUMN = 16
_COUNTS_SQL: Final = "SELECT seq, collection, id, reads, read_at FROM memkit_counters WHERE seq > ? AND +collection IN "
"""Records' counts, where they changed since a change number."""
_Change = tuple[int, str, str, Literal["row", "counts", "deleted"], Any]
"""A change to apply, in order: its number, collection, id, kind, and the record's row or its counts."""


def _meta(conn: sqlite3.Connection, key: str) -> int:
    return int(conn.execute("SELECT value FROM memkit_meta WHERE key = ?", (key,)).fetchone()[0])


def file_dim(conn: sqlite3.Connection, name: str) -> int | None:
    """The vector dimension the file records for collection ``name`` (None: none yet, or no collection)."""
    row = conn.execute("SELECT dim FROM memkit_collections WHERE name = ?", (name,)).fetchone()
    return row[0] if row is not None and isinstance(row[0], int) else None


def log_deletions(conn: sqlite3.Connection, collection: str, ids: list[str], first_seq: int) -> None:
    conn.executemany(
        "INSERT INTO memkit_deletions (seq, collection, id) VALUES (?, ?, ?)",
        [(first_seq + i, collection, record_id) for i, record_id in enumerate(ids)],
    )


def prune_deletions(conn: sqlite3.Connection, keep: int) -> int:
    """Keep the newest ``keep`` deletions; raise ``deletions_floor`` to the newest pruned. Inside the
    caller's write transaction. Returns how many were pruned."""
    row = conn.execute("SELECT seq FROM memkit_deletions ORDER BY seq DESC LIMIT 1 OFFSET ?", (keep,)).fetchone()
    if row is None:
        return 0
    pruned = conn.execute("DELETE FROM memkit_deletions WHERE seq <= ?", (row[0],)).rowcount
    conn.execute("UPDATE memkit_meta SET value = max(value, ?) WHERE key = 'deletions_floor'", (row[0],))
    return int(pruned)


class RecordCache:
    def __init__(self, dtype: StorageDtype, label: str) -> None:
        self._dtype: StorageDtype = dtype
        self._label = label
        self.collections: dict[str, ColumnarCollection] = {}
        self.undecodable: dict[str, set[str]] = {}
        """Per loaded collection, ids of rows that could not be decoded (skipped, still deletable)."""
        self.data_version = -1
        self.last_seq = 0
        """The change number this cache reflects: every change up to it is applied."""

    def clear(self) -> None:
        self.collections.clear()
        self.undecodable.clear()
        self.data_version = -1

    # -- catching up --------------------------------------------------------------------------------
    def sync(self, conn: sqlite3.Connection) -> None:
        """Apply what other connections committed since we last looked."""
        if conn.in_transaction:  # our write lock: nothing else can commit meanwhile
            self._catch_up(conn, conn.execute("PRAGMA data_version").fetchone()[0])
            return
        # Read before the snapshot starts: a commit landing in between shows as a change next time
        # (applied twice, harmlessly) instead of being counted as seen without being loaded.
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        if version == self.data_version:
            return
        conn.execute("BEGIN")
        try:
            self._catch_up(conn, version)
        finally:
            conn.execute("COMMIT")

    def _catch_up(self, conn: sqlite3.Connection, version: int) -> None:
        if version == self.data_version:
            return
        seq = _meta(conn, "change_seq")
        if self.collections and self.last_seq < _meta(conn, "deletions_floor"):
            logger.info("%s: the deletion log was pruned past this cache; reloading its collections", self._label)
            self.collections.clear()
            self.undecodable.clear()
        elif self.collections and seq > self.last_seq:
            self._apply_changes(conn)
        self.last_seq, self.data_version = seq, version

    def _apply_changes(self, conn: sqlite3.Connection) -> None:
        for _, name, record_id, kind, change in sorted(self._changes(conn), key=lambda change: change[0]):
            collection, bad = self.collections[name], self.undecodable.setdefault(name, set())
            if kind == "deleted":
                collection.delete([record_id])
                bad.discard(record_id)
            elif kind == "counts":  # of a record in the arrays (one that cannot be decoded is not: not counted)
                collection.set_counts({record_id: change})
            elif (record := self._decode(change, collection.dim)) is None:
                collection.delete([record_id])
                bad.add(record_id)
            else:
                collection.upsert([record], keep_counters=False, tokens=_stored_tokens(change, record))
                bad.discard(record_id)

    def _changes(self, conn: sqlite3.Connection) -> list[_Change]:
        """The loaded collections' changes since ``last_seq``: rows written, counts counted, rows deleted."""
        # Only the loaded collections': another process importing into a collection this one never read
        # would otherwise have each of its rows, vector and all, fetched here to be dropped.
        loaded = list(self.collections)
        # ``+collection``: SQLite otherwise plans the scope index (collection first) and reads every row of
        # the loaded collections for a few changed ones: 2.3 s per catch-up at 100k rows, 0.1 ms by seq.
        among = f"({','.join('?' * len(loaded))})"
        rows = conn.execute(f"SELECT {RECORD_COLUMNS} FROM {RECORD_SOURCE} WHERE r.seq > ? AND +r.collection IN "
                            f"{among}", (self.last_seq, *loaded))  # fmt: skip
        changes: list[_Change] = [(row[_SEQ_COLUMN], row[_COLLECTION_COLUMN], row[_ID_COLUMN], "row", row)
                                  for row in rows]  # fmt: skip
        changes.extend((seq, name, record_id, "counts", counts_of(reads, read_at)) for seq, name, record_id, reads,
                       read_at in conn.execute(_COUNTS_SQL + among, (self.last_seq, *loaded)))  # fmt: skip
        deletions = conn.execute(f"SELECT seq, collection, id FROM memkit_deletions WHERE seq > ? AND +collection "
                                 f"IN {among}", (self.last_seq, *loaded))  # fmt: skip
        changes.extend((seq, name, record_id, "deleted", None) for seq, name, record_id in deletions)
        return changes

    # -- loading ------------------------------------------------------------------------------------
    def collection(self, conn: sqlite3.Connection, name: str) -> ColumnarCollection:
        """The cached collection, caught up; loaded from the file on first use."""
        self.sync(conn)
        found = self.collections.get(name)
        if found is None:
            found = self.collections[name] = self._load(conn, name)
        return found

    def current(self, conn: sqlite3.Connection, name: str) -> ColumnarCollection | None:
        """The loaded collection if no other connection committed since the cache last caught up, else None
        (nothing read). One ``PRAGMA data_version``, which reads the WAL index in shared memory, not the
        disk: p50 15 us, p99 58 us beside a process committing 1 MB transactions back to back."""
        found = self.collections.get(name)
        if found is None or conn.in_transaction:
            return None
        return found if conn.execute("PRAGMA data_version").fetchone()[0] == self.data_version else None

    def loaded(self, conn: sqlite3.Connection, name: str) -> ColumnarCollection | None:
        """The cached collection, caught up, if it is loaded; None (and nothing loaded) if not."""
        self.sync(conn)
        return self.collections.get(name)

    def _load(self, conn: sqlite3.Connection, name: str) -> ColumnarCollection:
        dim = file_dim(conn, name)
        found = ColumnarCollection(dim, self._dtype)
        rows = int(conn.execute("SELECT count(*) FROM memkit_records WHERE collection = ?", (name,)).fetchone()[0])
        if dim is not None:
            found.reserve(rows)
        bad = self.undecodable[name] = set()
        # Each row's tokens were written with it: no text is tokenized again. A collection that is most of
        # the file is read in the table's own order (``+collection``: the scope index's order is by user,
        # so every row was a jump: 0.9 -> 0.5 s for 100k rows from a warm page cache).
        most = rows * 2 >= int(conn.execute("SELECT count(*) FROM memkit_records").fetchone()[0])
        where = "+r.collection = ?" if most else "r.collection = ?"
        cursor = conn.execute(f"SELECT {RECORD_COLUMNS} FROM {RECORD_SOURCE} WHERE {where}", (name,))
        while batch := cursor.fetchmany(_LOAD_BATCH):
            records: list[Record] = []
            tokens: dict[str, list[str]] = {}
            for row in batch:
                record = self._decode(row, dim)
                if record is None:
                    bad.add(row[_ID_COLUMN])
                    continue
                if dim is None and record.vector is not None:
                    dim = int(record.vector.shape[0])
                records.append(record)
                tokens.update(_stored_tokens(row, record))
            found.upsert(records, keep_counters=False, tokens=tokens, checked=True)  # checked as decoded
        return found

    def _decode(self, row: tuple[Any, ...], dim: int | None) -> Record | None:
        """The row's record, or None (logged) when it cannot be used."""
        try:
            record = record_from_row(row)
            if record.vector is not None and dim is not None and record.vector.shape[0] != dim:
                raise CorruptDataError(
                    f"record {record.id!r} has a {record.vector.shape[0]}-dimensional vector; "
                    f"collection {row[_COLLECTION_COLUMN]!r} holds {dim}"
                )
        except CorruptDataError as exc:
            logger.warning("%s: skipping a record that cannot be read (delete it by id to clear it): %s",
                           self._label, exc)  # fmt: skip
            return None
        return record


def _stored_tokens(row: tuple[Any, ...], record: Record) -> dict[str, list[str]]:
    """The row's tokens by id when it has them (else the index tokenizes the text itself)."""
    words = row[_TOKENS_COLUMN]
    return {record.id: words.split()} if isinstance(words, str) and record.text else {}
