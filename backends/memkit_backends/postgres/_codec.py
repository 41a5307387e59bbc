"""Records to rows and back, the binary vector codec, keyset cursors, and the checks made before a round trip."""

from __future__ import annotations

import base64
import binascii
import json
import math
import struct
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec
import numpy as np

from memkit.backend import FilterValue, Record, Scope
from memkit.errors import ValidationError
from memkit.text import tokenize
from memkit_backends._server.fields import decode_fields

__all__ = [
    "check_filters",
    "check_records",
    "decode_cursor",
    "decode_key_cursor",
    "decode_record",
    "encode_cursor",
    "encode_row",
    "register_vector_codec",
]


def _encode_vector(vector: Any) -> bytes:
    """pgvector's binary format: dimension (int16), unused (int16), big-endian float32 values."""
    values = np.asarray(vector, dtype=">f4")
    return struct.pack(">HH", values.shape[0], 0) + values.tobytes()


def _decode_vector(data: bytes) -> Any:
    dim = struct.unpack_from(">H", data)[0]
    return np.frombuffer(data, dtype=">f4", count=dim, offset=4).astype(np.float32)


async def register_vector_codec(conn: Any) -> None:
    """Vectors cross the wire as binary (not a text list of 384 numbers): bulk ingest is CPU-bound here."""
    schema = await conn.fetchval("SELECT typnamespace::regnamespace::text FROM pg_type WHERE typname = 'vector'")
    if schema is None:
        await conn.execute("SELECT pg_advisory_lock(hashtext('memkit.extension'))")
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        finally:
            await conn.execute("SELECT pg_advisory_unlock(hashtext('memkit.extension'))")
        schema = await conn.fetchval("SELECT typnamespace::regnamespace::text FROM pg_type WHERE typname = 'vector'")
    await conn.set_type_codec("vector", schema=schema, encoder=_encode_vector, decoder=_decode_vector, format="binary")


# -- checks before anything is written: Postgres text cannot hold NUL, JSON has no NaN -----------------
def _check_text(value: str | None, what: str) -> None:
    if value is not None and "\x00" in value:
        raise ValidationError(f"{what} {value[:40]!r} contains a NUL character, which Postgres text cannot hold")


def _check_value(value: object, what: str) -> None:
    if isinstance(value, str):
        _check_text(value, what)
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValidationError(f"{what} is {value}: only finite numbers can be stored and matched")
    elif isinstance(value, tuple | list):
        for item in value:
            _check_value(item, what)


def _check_fields(fields: Mapping[str, object], what: str) -> None:
    for name, value in fields.items():
        _check_text(name, f"{what} name")
        _check_value(value, f"{what} {name!r}")


def check_records(records: Iterable[Record]) -> None:
    """Refuse, before the round trip, what the server would refuse mid-batch (or, for NaN, store wrongly)."""
    for record in records:
        _check_text(record.id, "record id")
        scope = record.scope
        for what, value in (("user id", scope.user_id), ("agent id", scope.agent_id),
                            ("session id", scope.session_id), ("text", record.text)):  # fmt: skip
            _check_text(value, what)
        if not (math.isfinite(record.importance) and math.isfinite(record.timestamp)):
            raise ValidationError(f"record {record.id!r}: importance and timestamp must be finite numbers")
        if record.expires_at is not None and math.isnan(record.expires_at):
            raise ValidationError(f"record {record.id!r}: expires_at is NaN")
        _check_fields(record.fields, "field")


def check_filters(filters: Mapping[str, FilterValue] | None) -> None:
    _check_fields(filters or {}, "filter")


# -- rows ------------------------------------------------------------------------------------------------
def encode_row(record: Record) -> tuple[Any, ...]:
    """Columns in the order of ``_backend._WRITE_COLUMNS``; tag tuples become JSON arrays."""
    scope = record.scope
    tokens = " ".join(tokenize(record.text)) if record.text else None
    vector = None if record.vector is None else np.asarray(record.vector, dtype=np.float32)
    return (
        record.id, scope.user_id, scope.agent_id, scope.session_id, record.body, record.text, tokens,
        record.importance, record.timestamp, record.expires_at, json.dumps(record.fields), vector,
    )  # fmt: skip


def decode_record(row: Mapping[str, Any]) -> Record:
    embedding = row["embedding"]
    return Record(
        id=row["id"],
        scope=Scope(user_id=row["user_id"], agent_id=row["agent_id"], session_id=row["session_id"]),
        body=bytes(row["body"]),
        text=row["text"],
        vector=None if embedding is None else np.asarray(embedding, dtype=np.float32),
        importance=float(row["importance"]),
        timestamp=float(row["ts"]),
        expires_at=row["expires_at"],
        fields=decode_fields(row["fields"]),
        access_count=int(row["access_count"]),
        last_accessed=row["last_accessed"],
    )


# -- keyset cursors: opaque to callers, the last position seen -------------------------------------------
def encode_cursor(position: object) -> str:
    return base64.urlsafe_b64encode(msgspec.json.encode(position)).decode("ascii")


def _decode(cursor: str, kind: type[Any]) -> Any:
    try:
        return msgspec.json.decode(base64.urlsafe_b64decode(cursor.encode("ascii")), type=kind, strict=True)
    except (binascii.Error, UnicodeError, ValueError, msgspec.DecodeError, AttributeError) as exc:
        raise ValidationError(f"malformed cursor {cursor!r}: pass back a next_cursor unchanged") from exc


def decode_cursor(cursor: str | None) -> tuple[float, str] | None:
    """A scan's (timestamp, id) position."""
    if cursor is None:
        return None
    ts, record_id = _decode(cursor, tuple[float, str])
    if not math.isfinite(ts) or "\x00" in record_id:
        raise ValidationError(f"malformed cursor {cursor!r}: pass back a next_cursor unchanged")
    return float(ts), str(record_id)


def decode_key_cursor(cursor: str | None) -> str | None:
    """A kv_scan's last key."""
    if cursor is None:
        return None
    key = _decode(cursor, str)
    _check_text(key, "cursor key")
    return str(key)
