"""How a memkit record lies in Weaviate: its collection, its object UUID, its explicit properties.

A memkit collection is a Weaviate collection named ``PREFIX_name`` (plain lower-case names) or
``PREFIX__digest`` (any other name: Weaviate class names are ASCII letters, digits and ``_``; plain names
cannot start with ``_``, so the two forms never meet). An object's UUID is a UUID5 of the record id, and
the record id itself is kept in ``rid`` and checked on every read.

The schema is explicit (``PROPERTIES``; memkit never relies on auto-schema). What a filter compares is
always a hex digest or a number, never user text: Weaviate trims whitespace of ``field``-tokenized text
before comparing it, so ``"alice "`` would equal ``"alice"``; a digest of the exact UTF-8 bytes cannot.

- ``v`` layout version (1), ``rid`` the record id (not indexed);
- ``u`` / ``a`` / ``s`` digests of the scope ids that are set (absent: not set), filterable;
- ``imp``, ``ts``, ``exp`` importance, timestamp, expiry (``NO_EXPIRY`` when it never expires), filterable
  numbers (``ts`` sortable: scans page by it);
- ``flt`` one digest per filterable field value (``_filters.field_token``), matched with contains-any;
- ``tokens`` memkit's own word tokens of the text (stemmed, stop words out), BM25-searchable, whitespace
  tokenization: Weaviate's BM25 then scores exactly the terms memkit's other backends score;
- ``doc`` JSON (not indexed): the scope ids as given, the fields (names and types exactly), the text;
  ``body`` the body, base64 (not indexed); ``nov`` true when the record has no vector;
- ``n`` / ``la`` the access counters (``touch``), carried over by upserts.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import uuid
from collections.abc import Mapping
from typing import Any, Final

import msgspec
import numpy as np

from memkit.backend import Fields, Record, Scope
from memkit.errors import CorruptDataError, ValidationError
from memkit.text import tokenize
from memkit_backends.weaviate._filters import field_tokens, scope_digest

__all__ = [
    "IDS",
    "LAYOUT",
    "NO_EXPIRY",
    "NUMBERS",
    "PROPERTIES",
    "class_name",
    "decode_record",
    "encode_properties",
    "object_uuid",
    "record_id_of",
]

LAYOUT: Final = 1
NO_EXPIRY: Final = 1e300
"""``exp`` of a record that never expires: a number, so ``exp > now`` admits it."""
NAMESPACE: Final = uuid.UUID("5b1e4c2e-8d0c-5a8e-9a57-6d656d6b6974")
_PLAIN: Final = re.compile(r"[a-z0-9][a-z0-9_]{0,99}")
IDS: Final = ("v", "rid")
"""The properties ``record_id_of`` reads."""
NUMBERS: Final = (*IDS, "imp", "ts", "exp", "nov")
"""The properties a candidate list returns: enough for the kernel to rank a row (no body, no vector)."""

PROPERTIES: Final[tuple[tuple[str, str, str | None, bool, bool], ...]] = (
    # name, data type, tokenization, filterable, searchable
    ("v", "int", None, True, False),
    ("rid", "text", "field", False, False),
    ("u", "text", "field", True, False),
    ("a", "text", "field", True, False),
    ("s", "text", "field", True, False),
    ("imp", "number", None, True, False),
    ("ts", "number", None, True, False),
    ("exp", "number", None, True, False),
    ("flt", "text[]", "field", True, False),
    ("tokens", "text", "whitespace", False, True),
    ("doc", "text", "field", False, False),
    ("body", "text", "field", False, False),
    ("nov", "boolean", None, True, False),
    ("n", "int", None, False, False),
    ("la", "number", None, False, False),
)
_doc = msgspec.json.Encoder()


class _Doc(msgspec.Struct, frozen=True, omit_defaults=True):
    scope: tuple[str | None, str | None, str | None]
    fields: dict[str, Any] = msgspec.field(default_factory=dict)
    text: str | None = None


_read_doc = msgspec.json.Decoder(_Doc)


def check_text(value: str, what: str) -> str:
    if not isinstance(value, str):
        raise ValidationError(f"{what} must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise ValidationError(f"{what} {value[:60]!r} contains a NUL character")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise ValidationError(f"{what} {value[:60]!r} is not valid Unicode (a lone surrogate)") from None
    return value


def class_name(prefix: str, collection: str) -> str:
    """The Weaviate collection of a memkit collection (see the module docstring)."""
    check_text(collection, "collection name")
    if _PLAIN.fullmatch(collection):
        return f"{prefix}_{collection}"
    return f"{prefix}__{hashlib.blake2b(collection.encode(), digest_size=16).hexdigest()}"


def object_uuid(record_id: str) -> str:
    """The object UUID of a record id (UUID5 in memkit's namespace); ``ValidationError`` for a non-id."""
    if not isinstance(record_id, str) or not record_id:
        raise ValidationError(f"a record id is a non-empty string, got {record_id!r:.60}")
    return str(uuid.uuid5(NAMESPACE, check_text(record_id, "record id")))


def _fields_doc(fields: Fields) -> dict[str, Any]:
    for name in fields:
        check_text(name, "field name")
    return {name: list(value) if isinstance(value, tuple | list) else value for name, value in fields.items()}


def encode_properties(record: Record, counters: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The properties of ``record``, keeping ``counters`` (the stored ``n`` / ``la``); refuses what Weaviate
    could not store faithfully (NaN, NUL, lone surrogates) with ``ValidationError``, before anything is sent."""
    if not (math.isfinite(record.importance) and math.isfinite(record.timestamp)):
        raise ValidationError(f"record {record.id[:60]!r}: importance and timestamp must be finite")
    if record.expires_at is not None and math.isnan(record.expires_at):
        raise ValidationError(f"record {record.id[:60]!r}: expires_at is NaN")
    scope = record.scope
    ids = (scope.user_id, scope.agent_id, scope.session_id)
    for value in ids:
        if value is not None:
            check_text(value, "scope id")
    if record.text is not None:
        check_text(record.text, "record text")
    try:
        doc = _doc.encode(_Doc(scope=ids, fields=_fields_doc(record.fields), text=record.text)).decode()
    except (TypeError, msgspec.EncodeError) as exc:
        raise ValidationError(f"record {record.id[:60]!r}: its fields cannot be stored: {exc}") from exc
    properties: dict[str, Any] = {
        "v": LAYOUT, "rid": record.id, "imp": float(record.importance), "ts": float(record.timestamp),
        "exp": NO_EXPIRY if record.expires_at is None else float(record.expires_at),
        "flt": field_tokens(record.fields), "tokens": " ".join(tokenize(record.text or "")), "doc": doc,
        "body": base64.b64encode(record.body).decode("ascii"), "nov": record.vector is None,
    }  # fmt: skip
    for key, value in zip(("u", "a", "s"), ids, strict=True):
        if value is not None:
            properties[key] = scope_digest(key, value)
    properties["n"] = int((counters or {}).get("n") or 0)
    if counters and counters.get("la") is not None:
        properties["la"] = float(counters["la"])
    return properties


def record_id_of(properties: Mapping[str, Any] | None) -> str | None:
    """The memkit id of a stored object, or None for an object memkit did not write."""
    if not properties or properties.get("v") != LAYOUT or not isinstance(properties.get("rid"), str):
        return None
    return str(properties["rid"])


def decode_record(properties: Mapping[str, Any], vector: Any = None) -> Record:
    """A record from its stored properties and (when fetched) its vector."""
    try:
        doc = _read_doc.decode(str(properties["doc"]))
        expires = float(properties["exp"])
        last = properties.get("la")
        user, agent, session = doc.scope
        fields = {k: tuple(v) if isinstance(v, list) else v for k, v in doc.fields.items()}
        return Record(
            id=str(properties["rid"]),
            scope=Scope(user_id=user, agent_id=agent, session_id=session),
            body=base64.b64decode(str(properties["body"])),
            text=doc.text,
            vector=None if properties.get("nov") or vector is None else np.asarray(vector, np.float32),
            importance=float(properties["imp"]),
            timestamp=float(properties["ts"]),
            expires_at=None if expires >= NO_EXPIRY else expires,
            fields=fields,
            access_count=int(properties.get("n") or 0),
            last_accessed=None if last is None else float(last),
        )
    except (KeyError, TypeError, ValueError, msgspec.DecodeError) as exc:
        raise CorruptDataError(f"a Weaviate object's properties are not a memkit record: {exc!r}") from exc
