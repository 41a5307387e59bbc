"""How a record is laid out in Redis: an indexed hash, and its body under a key of its own.

The body (a layer's encoded payload) lives outside the hash because RediSearch re-indexes a hash on
every write to it, even to a field it does not index, and RediSearch 2.10 never subtracts a replaced
document from its average document length (and miscounts term frequencies until its garbage collector
runs): measured, 20 rewrites of half an index's bodies took the average length from 16 to 176 and one
term's IDF from 1.1 to 37.8. When memkit rewrote a body on every recall (access counts), LoCoMo
recall@10 fell from 81 to 58 over one conversation's questions. A body-only change now writes the
body key alone; the hash is rewritten only when what it indexes changes. Access counters live in a
third key per record (``counters_prefix_of``), so a recall writes no record at all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Final

import msgspec
import numpy as np

from memkit.backend import Record, Scope
from memkit.text import tokenize
from memkit_backends._server.fields import decode_fields
from memkit_backends.redis._keys import NO_SCOPE, NONE_EXPIRY, SCOPE_FIELDS, filter_tags, scope_number, scope_tag

__all__ = ["HASH_FIELDS", "decode_fields", "decode_listed", "decode_record", "encode_record", "scope_from_hash",
           "scope_numbers", "same_indexed_fields"]  # fmt: skip

Counters = Sequence[bytes | None]
"""A record's counters hash read as ``HMGET key n t``: access count, last access (absent: None)."""
COUNTER_FIELDS: Final = ("n", "t")
_json_loads = msgspec.json.decode  # the same values as json.loads, several times faster: two per record read


def scope_from_hash(raw: Mapping[bytes, bytes]) -> Scope:
    if b"scope" in raw:
        user_id, agent_id, session_id = _json_loads(raw[b"scope"])
        return Scope(user_id=user_id, agent_id=agent_id, session_id=session_id)
    return Scope(  # written before the scope field (one field per id, absent when None)
        user_id=raw[b"uid"].decode() if b"uid" in raw else None,
        agent_id=raw[b"aid"].decode() if b"aid" in raw else None,
        session_id=raw[b"sid"].decode() if b"sid" in raw else None,
    )


def decode_record(raw: Mapping[bytes, bytes], body: bytes | None, counters: Counters = (None, None)) -> Record:
    """A record from its whole hash (``HGETALL``), its body key (None: written before bodies had a key of
    their own) and its counters (absent until the first touch)."""
    return decode_listed([raw.get(field) for field in _HASH_KEYS], body, counters)


HASH_FIELDS: Final = ("rid", "scope", "uid", "aid", "sid", "body", "text", "emb", "imp", "ts", "exp", "fields")
"""The hash fields a read asks for by name (``HMGET``), in the order ``decode_listed`` reads them: not the
indexed copies (scope tags and numbers, filter tags, the text's tokens), which are a read's larger half."""
_HASH_KEYS: Final = tuple(field.encode() for field in HASH_FIELDS)


def decode_listed(values: Sequence[bytes | None], body: bytes | None, counters: Counters = (None, None)) -> Record:
    """A record from the values of ``HASH_FIELDS`` in order (``values[0]``, the id, is not None), its body key
    (None: written before bodies had a key of their own) and its counters (absent until the first touch)."""
    rid, scope, uid, aid, sid, inline, text, vector, importance, timestamp, expires, fields = values
    if scope is not None:
        user_id, agent_id, session_id = _json_loads(scope)
    else:  # written before the scope field (one field per id, absent when None)
        user_id, agent_id, session_id = (None if v is None else v.decode() for v in (uid, aid, sid))
    expires_at = float(expires)  # type: ignore[arg-type]  # always written
    count, last = counters
    return Record(
        id=rid.decode(),  # type: ignore[union-attr]  # the caller skips absent records
        scope=Scope(user_id=user_id, agent_id=agent_id, session_id=session_id),
        body=(inline or b"") if body is None else body,
        text=text.decode() or None if text is not None else None,
        vector=None if vector is None else np.frombuffer(vector, dtype=np.float32).copy(),
        importance=float(importance),  # type: ignore[arg-type]
        timestamp=float(timestamp),  # type: ignore[arg-type]
        expires_at=None if expires_at >= NONE_EXPIRY else expires_at,
        fields=decode_fields(fields),  # type: ignore[arg-type]
        access_count=int(count) if count is not None else 0,
        last_accessed=float(last) if last is not None else None,
    )


def scope_numbers(scope: Scope) -> dict[str, int]:
    return {field: NO_SCOPE if (value := getattr(scope, attribute)) is None else scope_number(value)
            for _, field, attribute in SCOPE_FIELDS}  # fmt: skip


def encode_record(record: Record) -> dict[str, bytes | str | float]:
    """The hash of a record, body aside. Every field but ``emb`` is always written, empty when unset: a
    record with a vector replaces an older version with one HSET, no DEL first (which halved bulk ingest)."""
    scope = record.scope
    return {
        "rid": record.id, "imp": record.importance, "ts": record.timestamp,
        "exp": NONE_EXPIRY if record.expires_at is None else record.expires_at,
        "fields": json.dumps(record.fields), "flt": filter_tags(record.fields),
        "scope": json.dumps([scope.user_id, scope.agent_id, scope.session_id]),
        **{field: "" if (value := getattr(scope, attribute)) is None else scope_tag(value)
           for field, _, attribute in SCOPE_FIELDS},
        **scope_numbers(scope),
        "text": record.text or "", "tokens": " ".join(tokenize(record.text)) if record.text else "",
        **({} if record.vector is None else {"emb": np.ascontiguousarray(record.vector, dtype=np.float32).tobytes()}),
    }  # fmt: skip


def same_indexed_fields(old: Record, new: Record) -> bool:
    """True when ``new`` differs from ``old`` in its body alone, so the hash need not be rewritten."""
    if (old.scope, old.text or None, old.importance, old.timestamp, old.expires_at, old.fields) != (
        new.scope,
        new.text or None,
        new.importance,
        new.timestamp,
        new.expires_at,
        new.fields,
    ):
        return False
    if old.vector is None or new.vector is None:
        return old.vector is None and new.vector is None
    return bool(np.array_equal(old.vector, np.asarray(new.vector, dtype=np.float32)))
