"""Writing rows of ``memkit_records`` and their tokens: from records (``upsert``) or from a batch already encoded
by its producer (``EncodedRows``: ``memkit import``'s reading process).

Both end in ``insert_rows``, so a row is written the same way whichever way it came. The encoded batch skips
what the importing process would otherwise do per row while the other core waits: building a ``Record``,
tokenizing its text and encoding its fields (a fifth of an import's writing process, measured at 100k).
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Sequence
from itertools import chain
from typing import Annotated, Any, Final, NamedTuple

import msgspec
import numpy as np
import numpy.typing as npt

from memkit._validation import _shared_scope
from memkit.backend import Fields, Record
from memkit.errors import DimensionMismatchError, ValidationError
from memkit.text import tokenize
from memkit_backends._embedded.columnar import ColumnarCollection
from memkit_backends._embedded.indexes import dim_after
from memkit_backends.sqlite._cache import file_dim
from memkit_backends.sqlite._codec import counts_of, record_params
from memkit_backends.sqlite._connect import next_seqs

__all__ = [
    "EncodedRows",
    "Written",
    "check_encoded",
    "encoded_params",
    "insert_rows",
    "records_of",
    "stored_dim",
    "unique_rows",
    "write_records",
]

UPSERT_SQL: Final = (
    "INSERT INTO memkit_records (collection, id, user_id, agent_id, session_id, body, text, vector, "
    "importance, timestamp, expires_at, fields, seq) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) "
    "ON CONFLICT (collection, id) DO UPDATE SET user_id = excluded.user_id, "
    "agent_id = excluded.agent_id, session_id = excluded.session_id, body = excluded.body, "
    "text = excluded.text, vector = excluded.vector, importance = excluded.importance, "
    "timestamp = excluded.timestamp, expires_at = excluded.expires_at, fields = excluded.fields, "
    "seq = excluded.seq"
)
"""A record rewritten over a row keeps its access counts: they are in ``memkit_counters``, by its id."""

_FiniteFloat = Annotated[float, msgspec.Meta(ge=-sys.float_info.max, le=sys.float_info.max)]
_decode_fields = msgspec.json.Decoder(dict[str, str | int | _FiniteFloat | bool | tuple[str, ...]]).decode
"""A record's fields, as ``check_record`` allows them (a JSON number too large for a float, read as infinity,
is refused)."""
_TEXT: Final = {str, type(None)}
_NUMBER: Final = {float, int, bool, type(None)}
"""Types a number of a row may have (None: no expiry; a None importance or timestamp is refused as not finite)."""


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
    as ``upsert`` writes the records they stand for, after the checks ``upsert`` makes (``check_encoded``)."""

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


def check_encoded(rows: EncodedRows, stored_dim: int | None) -> None:
    """Refuse, before any SQL, a batch ``upsert`` would refuse for its records (or could not write): columns of
    other lengths or types, vectors not one finite float32 matrix of the collection's dimension, numbers that
    are not finite, fields that do not decode to the field types (or hold NaN or infinity), tokens given for
    no text or missing for a text. That the tokens are the text's own is the producer's word."""
    n = len(rows.ids)
    columns = (rows.scopes, rows.bodies, rows.texts, rows.numbers, rows.fields, rows.tokens)
    if any(len(column) != n for column in columns):
        raise ValidationError("the encoded rows' columns differ in length")
    vectors = rows.vectors
    if not isinstance(vectors, np.ndarray) or vectors.ndim != 2 or vectors.shape[0] != n:
        raise ValidationError("the encoded rows' vectors must be a matrix with a row per record")
    if vectors.dtype != np.float32 or not vectors.flags.c_contiguous:
        raise ValidationError("the encoded rows' vectors must be one C-contiguous float32 matrix")
    if stored_dim is not None and vectors.shape[1] != stored_dim:
        raise DimensionMismatchError(f"vectors have {vectors.shape[1]} dimensions; the collection has {stored_dim}")
    if n and not np.isfinite(vectors).all():
        raise ValidationError("a vector has NaN or infinite values")
    _check_columns(rows)


def _check_columns(rows: EncodedRows) -> None:
    """The other columns, each checked in one pass (a call per row was 4 us of an import's ~35 per row)."""
    if not set(map(type, rows.ids)) <= {str} or not set(map(type, rows.bodies)) <= {bytes}:
        raise ValidationError("encoded rows: ids must be strings and bodies bytes")
    if not set(map(type, rows.texts)) <= _TEXT or not set(map(type, rows.tokens)) <= _TEXT:
        raise ValidationError("encoded rows: texts and tokens must be strings or None")
    if [not text for text in rows.texts] != [tokens is None for tokens in rows.tokens]:
        raise ValidationError("encoded rows: tokens are a string for each text and None where there is none")
    if not set(map(type, rows.scopes)) <= {tuple} or not set(map(len, rows.scopes)) <= {3}:
        raise ValidationError("encoded rows: each scope is (user_id, agent_id, session_id)")
    if not set(map(type, chain.from_iterable(rows.scopes))) <= _TEXT:
        raise ValidationError("encoded rows: scope ids must be strings or None")
    try:
        importance, timestamps, expiry = zip(*rows.numbers, strict=True) if rows.numbers else ((), (), ())
        if not set(map(type, importance + timestamps + expiry)) <= _NUMBER:
            raise TypeError("importance, timestamp and expires_at must be numbers")
        finite = np.isfinite(np.array(importance + timestamps, np.float64)).all()
        expiring = np.array([at for at in expiry if at is not None], np.float64)
        for fields in rows.fields:
            _decode_fields(fields)  # finite numbers only: JSON has no NaN, and the decoder refuses infinity
    except (TypeError, ValueError, msgspec.DecodeError) as exc:
        raise ValidationError(f"encoded rows: a number or a record's fields cannot be written: {exc}") from None
    if not finite or np.isnan(expiring).any():
        raise ValidationError("encoded rows: importance and timestamp must be finite numbers, expires_at a number")


def unique_rows(rows: EncodedRows) -> EncodedRows:
    """One row per id, where its first row was, holding its last (as ``upsert`` orders a batch: the last
    write of an id wins, and the ids keep their first positions, hence their change numbers)."""
    last = {record_id: at for at, record_id in enumerate(rows.ids)}
    if len(last) == len(rows.ids):
        return rows
    keep = list(last.values())
    return EncodedRows(
        ids=[rows.ids[at] for at in keep], scopes=[rows.scopes[at] for at in keep],
        bodies=[rows.bodies[at] for at in keep], texts=[rows.texts[at] for at in keep], vectors=rows.vectors[keep],
        numbers=[rows.numbers[at] for at in keep], fields=[rows.fields[at] for at in keep],
        tokens=[rows.tokens[at] for at in keep],
    )  # fmt: skip


def encoded_params(collection: str, rows: EncodedRows, first_seq: int) -> list[tuple[Any, ...]]:
    """``UPSERT_SQL``'s parameters for each row (checked by ``check_encoded``; ids made unique by ``unique_rows``)."""
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


def write_records(
    conn: sqlite3.Connection, collection: str, cache: ColumnarCollection | None, records: Sequence[Record],
    undecodable: set[str] | None,
) -> Written:  # fmt: skip
    """Writes the rows and their texts' tokens; returns the tokens by id, for the cache (a text
    tokenized twice was a sixth of an import), and the counters of rows the cache could not decode
    (``undecodable``: their ids). ``cache``: None when the collection is not loaded. A record rewritten over a
    row keeps its counts (``memkit_counters``), whether or not the rest of the row could be read: one rule,
    loaded or not."""
    # Refuses NaN fields and dimension mismatches before any SQL.
    dim = dim_after(records, stored_dim(conn, collection, cache))
    first = next_seqs(conn, len(records))
    tokens = {record.id: tokenize(record.text) for record in records if record.text}
    joined = {r.id: " ".join(tokens[r.id]) if r.id in tokens else None for r in records}
    params = [record_params(collection, record, first + i) for i, record in enumerate(records)]
    rowids = insert_rows(conn, collection, params, first_seq=first, tokens=joined, dim=dim)
    bad = sorted((undecodable or set()).intersection(rowids)) if cache is not None else []
    counters: dict[str, tuple[int, float | None]] = {}
    for start in range(0, len(bad), 500):  # SQLite's limit on bound parameters
        chunk = bad[start : start + 500]
        counters.update((record_id, counts_of(reads, read_at)) for record_id, reads, read_at in conn.execute(
            "SELECT id, reads, read_at FROM memkit_counters WHERE collection = ? AND id IN "
            f"({','.join('?' * len(chunk))})", (collection, *chunk)))  # fmt: skip
    return Written(tokens, counters)
