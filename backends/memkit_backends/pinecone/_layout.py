"""How a memkit record lies in Pinecone: its vector id, its namespace, and its metadata.

Pinecone ids and namespace names are ASCII without NUL, at most 512 characters; memkit ids and collection
names are any text. A vector id is the record id percent-encoded (readable for ordinary ids, injective for
all), or ``~`` and a digest when that is too long (``~`` is always encoded, so the two forms never meet);
the record id itself is kept in the metadata and read back from there.

Metadata is flat JSON (strings, numbers, booleans, lists of strings), at most 40 KB per record. Every key
memkit writes starts with ``_``:

- ``_v`` the layout version (1), present on every record: the condition a filter always has;
- ``_id`` the record id; ``_u`` / ``_a`` / ``_s`` the scope ids that are set (absent: not set);
- ``_imp``, ``_ts``, ``_exp`` importance, timestamp and expiry (``NO_EXPIRY`` when it never expires);
- ``_flt`` one digest per filterable field value (``_filters.field_token``), matched with ``$in``;
- ``_fields`` the fields as JSON (names and types exactly as given), ``_text`` the text when there is one;
- ``_body`` the body when it is UTF-8, else ``_body64`` (base64); ``_nov`` true when the record has no
  vector (Pinecone stores a dense vector for every record, so it gets ``placeholder_vector``);
- ``_n`` / ``_la`` the access counters, written by ``touch`` and carried over by upserts.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
from collections.abc import Mapping
from typing import Any, Final

import msgspec
import numpy as np

from memkit.backend import Fields, Record, Scope
from memkit.errors import ContentError, CorruptDataError, InvalidURLError, ValidationError
from memkit_backends._server.fields import decode_fields
from memkit_backends.pinecone._filters import field_tokens

__all__ = [
    "LAYOUT",
    "MAX_ID",
    "MAX_METADATA_BYTES",
    "NO_EXPIRY",
    "decode_record",
    "encode_metadata",
    "namespace_of",
    "placeholder_vector",
    "record_id_of",
    "vector_id",
]

LAYOUT: Final = 1
MAX_ID: Final = 512
"""Longest vector id and namespace name Pinecone accepts."""
MAX_METADATA_BYTES: Final = 40_960
"""Pinecone keeps at most 40 KB of metadata per record."""
NO_EXPIRY: Final = 1e300
"""``_exp`` of a record that never expires: a number, so ``$gt now`` admits it."""
_SAFE_ID: Final = re.compile(r"[A-Za-z0-9_.:-]")
_SAFE_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,200}")
_json: Final = msgspec.json.Encoder()


def _check_text(value: str, what: str) -> bytes:
    if "\x00" in value:
        raise ValidationError(f"{what} {value[:60]!r} contains a NUL character")
    try:
        return value.encode()
    except UnicodeEncodeError:
        raise ValidationError(f"{what} {value[:60]!r} is not valid Unicode (a lone surrogate)") from None


def vector_id(record_id: str) -> str:
    """The Pinecone id of a record id: percent-encoded UTF-8, or ``~`` + a digest past 512 characters."""
    if not isinstance(record_id, str) or not record_id:
        raise ValidationError(f"a record id is a non-empty string, got {record_id!r:.60}")
    raw = _check_text(record_id, "record id")
    encoded = "".join(chr(b) if _SAFE_ID.fullmatch(chr(b)) else f"%{b:02X}" for b in raw)
    if len(encoded) <= MAX_ID:
        return encoded
    return "~" + hashlib.blake2b(raw, digest_size=32).hexdigest()


def namespace_of(prefix: str, collection: str) -> str:
    """The namespace of a memkit collection: ``prefix.collection`` for plain names, ``prefix~digest`` else."""
    _check_text(collection, "collection name")
    if _SAFE_NAME.fullmatch(collection):
        return f"{prefix}.{collection}"
    return f"{prefix}~{hashlib.blake2b(collection.encode(), digest_size=16).hexdigest()}"


def check_prefix(prefix: str) -> str:
    """The URL's ``namespace`` option: the part of every namespace name that is memkit's."""
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,200}", prefix):
        raise InvalidURLError(f"namespace={prefix!r}: use 1-200 ASCII letters, digits, '_' or '-'")
    return prefix


def placeholder_vector(dim: int) -> list[float]:
    """The vector stored for a record without one (cosine needs a non-zero vector; ``_nov`` marks it)."""
    return [1.0] + [0.0] * (dim - 1)


def _scope_metadata(scope: Scope) -> dict[str, str]:
    found = {}
    for key, value in (("_u", scope.user_id), ("_a", scope.agent_id), ("_s", scope.session_id)):
        if value is not None:
            _check_text(value, "scope id")
            found[key] = value
    return found


def _body_metadata(body: bytes) -> dict[str, str]:
    try:
        return {"_body": body.decode()}
    except UnicodeDecodeError:
        return {"_body64": base64.b64encode(body).decode("ascii")}


def _fields_metadata(fields: Fields) -> dict[str, Any]:
    for name in fields:
        _check_text(name, "field name")
    plain = {name: list(value) if isinstance(value, tuple | list) else value for name, value in fields.items()}
    try:
        text = _json.encode(plain).decode()
    except (TypeError, msgspec.EncodeError) as exc:
        raise ValidationError(f"record fields cannot be stored: {exc}") from exc
    return {"_fields": text, "_flt": field_tokens(fields)}


def encode_metadata(record: Record, counters: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The metadata of ``record`` (with ``counters``, the stored ``_n`` / ``_la`` to keep); a record whose
    metadata would pass Pinecone's limit raises ``ContentError`` naming it, before anything is sent."""
    if not (math.isfinite(record.importance) and math.isfinite(record.timestamp)):
        raise ValidationError(f"record {record.id!r}: importance and timestamp must be finite")
    expires = record.expires_at
    metadata: dict[str, Any] = {
        "_v": LAYOUT, "_id": record.id, **_scope_metadata(record.scope),
        "_imp": float(record.importance), "_ts": float(record.timestamp),
        "_exp": NO_EXPIRY if expires is None else float(expires),
        **_fields_metadata(record.fields), **_body_metadata(record.body),
    }  # fmt: skip
    if record.text is not None:
        _check_text(record.text, "record text")
        metadata["_text"] = record.text
    if record.vector is None:
        metadata["_nov"] = True
    for key in ("_n", "_la"):
        if counters and key in counters:
            metadata[key] = counters[key]
    size = len(_json.encode(metadata))
    if size > MAX_METADATA_BYTES:
        raise ContentError(
            f"record {record.id[:60]!r} is too large for Pinecone: its metadata (body, text, fields and scope) "
            f"is {size:,} bytes, and Pinecone keeps at most {MAX_METADATA_BYTES:,} bytes (40 KB) per record"
        )
    return metadata


def record_id_of(metadata: Mapping[str, Any] | None) -> str | None:
    """The memkit id of a stored vector, or None for a vector memkit did not write."""
    if not metadata or metadata.get("_v") != LAYOUT or not isinstance(metadata.get("_id"), str):
        return None
    return str(metadata["_id"])


def _body_of(metadata: Mapping[str, Any]) -> bytes:
    if "_body" in metadata:
        return str(metadata["_body"]).encode()
    return base64.b64decode(str(metadata.get("_body64", "")))


def decode_record(metadata: Mapping[str, Any], values: list[float] | None) -> Record:
    """A record from its stored metadata and (when fetched) its vector values."""
    try:
        expires = float(metadata["_exp"])
        vector = None
        if values and not metadata.get("_nov"):
            vector = np.asarray(values, dtype=np.float32)
        last = metadata.get("_la")
        return Record(
            id=str(metadata["_id"]),
            scope=Scope(user_id=metadata.get("_u"), agent_id=metadata.get("_a"), session_id=metadata.get("_s")),
            body=_body_of(metadata),
            text=metadata.get("_text"),
            vector=vector,
            importance=float(metadata["_imp"]),
            timestamp=float(metadata["_ts"]),
            expires_at=None if expires >= NO_EXPIRY else expires,
            fields=decode_fields(str(metadata["_fields"])),
            access_count=int(metadata.get("_n", 0)),
            last_accessed=None if last is None else float(last),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptDataError(f"a Pinecone vector's metadata is not a memkit record: {exc!r}") from exc
