"""Rows of ``memkit_records`` <-> ``Record``s.

Fields are JSON; tags (tuples) are JSON lists and decode back to tuples. Decoding checks every column,
so a corrupt row (written by hand, or by an older version that let NaN into the fields) raises
``CorruptDataError`` for that row alone and the loader can skip it.
"""

from __future__ import annotations

import math
from typing import Any, Final

import msgspec
import numpy as np

from memkit.backend import Fields, Record, Scope
from memkit.errors import CorruptDataError, ValidationError
from memkit_backends._embedded.indexes import check_record

__all__ = ["RECORD_COLUMNS", "RECORD_SOURCE", "counts_of", "record_from_row", "record_params"]

RECORD_SOURCE: Final = "memkit_records r LEFT JOIN memkit_counters c ON c.collection = r.collection AND c.id = r.id"
"""What ``RECORD_COLUMNS`` are read from: each record with its counters row, if it was ever counted."""
RECORD_COLUMNS: Final = (
    "r.rowid, r.collection, r.id, r.user_id, r.agent_id, r.session_id, r.body, r.text, r.vector, r.importance, "
    "r.timestamp, r.expires_at, r.fields, r.seq, c.reads, c.read_at, "
    "(SELECT tokens FROM memkit_tokens t WHERE t.record = r.rowid AND t.id = r.id AND t.collection = r.collection)"
)
"""The last, the text's tokens, is not part of the record: the loader gives it to the BM25 index."""

_fields_encoder = msgspec.json.Encoder()
_fields_decoder = msgspec.json.Decoder(dict[str, str | int | float | bool | tuple[str, ...]])


def record_params(collection: str, record: Record, seq: int) -> tuple[Any, ...]:
    """The INSERT's parameters: ``RECORD_COLUMNS`` from ``collection`` to ``seq``."""
    vector = None if record.vector is None else np.ascontiguousarray(record.vector, np.float32).tobytes()
    scope = record.scope
    return (
        collection, record.id, scope.user_id, scope.agent_id, scope.session_id, record.body, record.text, vector,
        record.importance, record.timestamp, record.expires_at, _fields_encoder.encode(record.fields), seq,
    )  # fmt: skip


def record_from_row(row: tuple[Any, ...]) -> Record:
    """The record of a ``SELECT {RECORD_COLUMNS}`` row; ``CorruptDataError`` if any column is unusable."""
    try:
        record = _decode(row)
        check_record(record)
    except (msgspec.DecodeError, ValidationError, ValueError, TypeError) as exc:
        raise CorruptDataError(f"record {row[2]!r} in collection {row[1]!r} cannot be decoded: {exc}") from exc
    return record


def _decode(row: tuple[Any, ...]) -> Record:
    (_, _, record_id, user_id, agent_id, session_id, body, text, vector, importance, timestamp, expires_at,
     fields, _, reads, read_at, _) = row  # fmt: skip
    for name, value in (("id", record_id), ("user_id", user_id), ("agent_id", agent_id),
                        ("session_id", session_id), ("text", text)):  # fmt: skip
        if not (value is None or isinstance(value, str)) or (name == "id" and value is None):
            raise TypeError(f"{name} is a {type(value).__name__}")
    if not isinstance(body, bytes):
        raise TypeError(f"body is a {type(body).__name__}, not a blob")
    if vector is not None and (not isinstance(vector, bytes) or len(vector) % 4):
        raise ValueError("vector is not a float32 blob")
    count, last = counts_of(reads, read_at)
    decoded: Fields = _fields_decoder.decode(fields)
    return Record(
        id=record_id,
        scope=Scope(user_id=user_id, agent_id=agent_id, session_id=session_id),
        body=body,
        text=text,
        vector=None if vector is None else np.frombuffer(vector, dtype=np.float32).copy(),
        importance=_number(importance, "importance"),
        timestamp=_number(timestamp, "timestamp"),
        expires_at=None if expires_at is None else _number(expires_at, "expires_at"),
        fields=decoded,
        access_count=count,
        last_accessed=last,
    )


def counts_of(reads: object, read_at: object) -> tuple[int, float | None]:
    """A record's access count and last access from its counters row (None, None: never counted). Counts that
    cannot be read (a hand edit) count as none: they are statistics, the record stays readable, and its
    next count writes readable ones (``touch``'s statement)."""
    count = reads if isinstance(reads, int) else 0
    last = float(read_at) if isinstance(read_at, int | float) and math.isfinite(read_at) else None
    return count, last


def _number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise ValueError(f"{name} is {value!r}, not a number")
    return float(value)
