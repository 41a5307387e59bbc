"""Writing rows of ``memkit_records`` and their tokens: from records (``upsert``) or from a batch already encoded
by its producer (``EncodedRows``: ``memkit import``'s reading process).

Both end in ``insert_rows``, so a row is written the same way whichever way it came. The encoded batch skips
what the importing process would otherwise do per row while the other core waits: building a ``Record``,
tokenizing its text and encoding its fields (a fifth of an import's writing process, measured at 100k).
"""

from __future__ import annotations

import math
import sqlite3
from typing import Any, Final, NamedTuple

import msgspec
import numpy as np
import numpy.typing as npt

from memkit._validation import _shared_scope
from memkit.backend import Fields, Record
from memkit.errors import DimensionMismatchError, ValidationError
from memkit_backends._embedded.columnar import ColumnarCollection
from memkit_backends.sqlite._cache import file_dim

__all__ = ["EncodedRows", "Written", "encoded_params", "insert_rows", "records_of", "stored_dim", "unique_rows"]

UPSERT_SQL: Final = (
    "INSERT INTO memkit_records (collection, id, user_id, agent_id, session_id, body, text, vector, "
    "importance, timestamp, expires_at, fields, seq) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) "
    "ON CONFLICT (collection, id) DO UPDATE SET user_id = excluded.user_id, "
    "agent_id = excluded.agent_id, session_id = excluded.session_id, body = excluded.body, "
    "text = excluded.text, vector = excluded.vector, importance = excluded.importance, "
    "timestamp = excluded.timestamp, expires_at = excluded.expires_at, fields = excluded.fields, "
    "seq = excluded.seq, "
    "access_count = CASE WHEN typeof(access_count) = 'integer' THEN access_count ELSE 0 END, "
    "last_accessed = CASE WHEN typeof(last_accessed) IN ('integer', 'real') THEN last_accessed END"
)
"""A record rewritten over a row keeps the row's counters if they can be read (else they are reset)."""

_decode_fields = msgspec.json.Decoder(dict[str, str | int | float | bool | tuple[str, ...]]).decode


class Written(NamedTuple):
    tokens: dict[str, list[str]]
    """Each written text's tokens, by record id."""
    counters: dict[str, tuple[int, float | None]]
    """Access counters of rewritten rows the cache had skipped as undecodable, by record id."""


def stored_dim(conn: sqlite3.Connection, name: str, cache: ColumnarCollection | None) -> int | None:
    """The collection's vector dimension: the loaded arrays', else the file's (which another process may
    have set since the arrays were loaded without one: setting it is no change the cache catches up on)."""
    return cache.dim if cache is not None and cache.dim is not None else file_dim(conn, name)


class EncodedRows(NamedTuple):
    """Records as columns, checked and encoded by whoever built them (with the library's rules: ``memkit
    import`` builds them with ``to_record`` from checked lines). ``SQLiteBackend.upsert_encoded`` writes them
    as ``upsert`` writes the records they stand for; it checks only what it cannot write without (lengths,
    the vectors' shape and values, the numbers)."""

    ids: list[str]
    scopes: list[tuple[str | None, str | None, str | None]]
    """user_id, agent_id, session_id"""
    bodies: list[bytes]
    texts: list[str | None]
    vectors: npt.NDArray[np.float32]
    """One row per record, all of them (records without a vector go through ``upsert``)."""
    numbers: list[tuple[float, float, float | None]]
    """importance, timestamp, expires_at"""
    fields: list[bytes]
    """Each record's fields as JSON (``msgspec.json.encode(record.fields)``)."""
    tokens: list[str | None]
    """Each text's tokens (``memkit.text.tokenize``) joined by spaces; None where the record has no text."""


def _checked(rows: EncodedRows, stored_dim: int | None) -> None:
    n = len(rows.ids)
    columns = (rows.scopes, rows.bodies, rows.texts, rows.numbers, rows.fields, rows.tokens)
    if any(len(column) != n for column in columns) or rows.vectors.shape[0] != n or rows.vectors.ndim != 2:
        raise ValidationError("the encoded rows' columns differ in length")
    if rows.vectors.dtype != np.float32 or not rows.vectors.flags.c_contiguous:
        raise ValidationError("the encoded rows' vectors must be one C-contiguous float32 matrix")
    if stored_dim is not None and rows.vectors.shape[1] != stored_dim:
        raise DimensionMismatchError(f"vectors have {rows.vectors.shape[1]} dimensions; the collection has "
                                     f"{stored_dim}")  # fmt: skip
    if n and not np.isfinite(rows.vectors).all():
        raise ValidationError("a vector has NaN or infinite values")
    for importance, timestamp, expires_at in rows.numbers:
        if not (math.isfinite(importance) and math.isfinite(timestamp)) or (
            expires_at is not None and math.isnan(expires_at)
        ):
            raise ValidationError("importance, timestamp and expires_at must be numbers (not NaN)")


def unique_rows(rows: EncodedRows) -> EncodedRows:
    """The rows with one row per id, the last (as ``upsert``: the last write of an id wins)."""
    last = {record_id: at for at, record_id in enumerate(rows.ids)}
    if len(last) == len(rows.ids):
        return rows
    keep = sorted(last.values())
    return EncodedRows(
        ids=[rows.ids[at] for at in keep], scopes=[rows.scopes[at] for at in keep],
        bodies=[rows.bodies[at] for at in keep], texts=[rows.texts[at] for at in keep], vectors=rows.vectors[keep],
        numbers=[rows.numbers[at] for at in keep], fields=[rows.fields[at] for at in keep],
        tokens=[rows.tokens[at] for at in keep],
    )  # fmt: skip


def encoded_params(collection: str, rows: EncodedRows, stored_dim: int | None, first_seq: int) -> list[tuple[Any, ...]]:
    """``UPSERT_SQL``'s parameters for each row (checked first; ids made unique by ``unique_rows``)."""
    _checked(rows, stored_dim)
    size = rows.vectors.shape[1] * 4
    blob = rows.vectors.astype("<f4", copy=False).tobytes()  # one copy for the batch, sliced per row
    return [
        (collection, record_id, user_id, agent_id, session_id, body, text, blob[at * size : (at + 1) * size],
         importance, timestamp, expires_at, fields, first_seq + at)
        for at, (record_id, (user_id, agent_id, session_id), body, text, (importance, timestamp, expires_at), fields)
        in enumerate(zip(rows.ids, rows.scopes, rows.bodies, rows.texts, rows.numbers, rows.fields, strict=True))
    ]  # fmt: skip


def insert_rows(conn: sqlite3.Connection, collection: str, params: list[tuple[Any, ...]], *, first_seq: int,
                tokens: dict[str, str | None], dim: int | None) -> dict[str, int]:  # fmt: skip
    """Writes the rows (``UPSERT_SQL``'s parameters, change numbers from ``first_seq``) and their texts' tokens
    (joined; None: the record has no text, and a rewritten row's old tokens go). Returns each id's rowid."""
    conn.executemany(UPSERT_SQL, params)
    # ``+collection``: by the change numbers' index, not the scope index (every row of the collection).
    rowids: dict[str, int] = dict(conn.execute("SELECT id, rowid FROM memkit_records WHERE seq >= ? AND "
                                               "+collection = ?", (first_seq, collection)))  # fmt: skip
    # A rewrite keeps its rowid: its old tokens are replaced, or deleted when it no longer has text.
    conn.executemany("INSERT OR REPLACE INTO memkit_tokens (record, collection, id, tokens) VALUES (?, ?, ?, ?)",
                     [(rowids[record_id], collection, record_id, words) for record_id, words in tokens.items()
                      if words is not None])  # fmt: skip
    conn.executemany("DELETE FROM memkit_tokens WHERE record = ?",
                     [(rowids[record_id],) for record_id, words in tokens.items() if words is None])  # fmt: skip
    conn.execute("INSERT OR IGNORE INTO memkit_collections (name, dim) VALUES (?, ?)", (collection, dim))
    conn.execute("UPDATE memkit_collections SET dim = ? WHERE name = ? AND dim IS NULL", (dim, collection))
    return rowids


def records_of(rows: EncodedRows) -> list[Record]:
    """The records the rows stand for (for a collection this process holds in arrays: they go through
    ``upsert``, which keeps the arrays in step)."""
    records = []
    for at, record_id in enumerate(rows.ids):
        importance, timestamp, expires_at = rows.numbers[at]
        fields: Fields = _decode_fields(rows.fields[at])
        records.append(Record(id=record_id, scope=_shared_scope(*rows.scopes[at]), body=rows.bodies[at],
                              text=rows.texts[at], vector=rows.vectors[at], importance=importance,
                              timestamp=timestamp, expires_at=expires_at, fields=fields))  # fmt: skip
    return records
