"""Memories <-> backend records, and the small pure helpers of the long-term layer.

Access statistics live beside the record (``Backend.touch``), not in its body, so a recall rewrites
nothing; the body keeps only what a memory had counted before that (stores written by memkit 0.1),
and a decoded memory adds both.

A memory's content is its record's text when it has no context (nearly always): the body then leaves it
out and says so in its write id (``_mark``); decoding puts the text back. (Without the key, a
memkit from before refuses such a body as undecodable, rather than showing an empty content.) Held
twice, every backend stored the text twice (in memory, on disk, in Redis's RAM) and Pinecone counted it
twice against its 40 KB of metadata. Bodies written before keep their content and decode as they are.

Likewise the memory's id and scope, which every record holds beside its body: the body leaves them out
(~70 bytes a memory, 7 MB of memory:// at 100k) and its write id's mark says so; decoding puts the
record's back.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import msgspec

from memkit._time import epoch, from_epoch, new_id, utcnow
from memkit._validation import check_ttl
from memkit.backend import FieldValue, FilterValue, Hit, Record, Scope
from memkit.errors import CorruptDataError
from memkit.layers._keys import digest_of
from memkit.layers._turns import TURN_KEY, Turn, thread_id, turn_key
from memkit.layers.longterm._records import Memory, MemoryKind, RecallHit
from memkit.text import normalize_for_dedupe

__all__ = [
    "SUPERSEDED_BY",
    "decode",
    "dedupe_key",
    "expiry",
    "filters",
    "index_text",
    "is_superseded",
    "memory_id",
    "merge",
    "record_fields",
    "refresh",
    "to_hit",
    "to_record",
    "turn_memories",
]

SUPERSEDED_BY = "superseded_by"
"""The record field of a superseded memory (the id of its successor); current memories have none."""

_encode_memory = msgspec.json.Encoder().encode
_decode_memory = msgspec.json.Decoder(Memory).decode
_encode_text = msgspec.json.Encoder().encode


class _Source(msgspec.Struct):
    source: str | None = None


_decode_source = msgspec.json.Decoder(_Source).decode


@functools.lru_cache(maxsize=8192)  # asked several times per memory on the write path
def dedupe_key(content: str) -> str:
    return hashlib.blake2b(normalize_for_dedupe(content).encode(), digest_size=12).hexdigest()


def memory_id(scope: Scope, content: str, attempt: int = 0) -> str:
    """The id of a deduplicated memory: a digest of its scope and normalised text. Two processes storing the
    same sentence for one user at once write one record (create-if-absent on this id), never two. A memory
    keeps its id when its text changes (an update, a merge), so the id of a text may be held by a memory that
    now says something else: the text then takes the next ``attempt``'s id, as every process would."""
    key = dedupe_key(content)
    if attempt == 0:
        return digest_of(scope.user_id, scope.agent_id, scope.session_id, key)
    return digest_of(scope.user_id, scope.agent_id, scope.session_id, key, str(attempt))


def metadata_fields(metadata: Mapping[str, Any]) -> dict[str, FieldValue | tuple[str, ...]]:
    return {f"meta.{k}": v for k, v in metadata.items() if isinstance(v, str | int | float | bool)}


def turn_memories(
    turns: Sequence[Turn],
    contents: Sequence[str],
    metadata: Sequence[dict[str, Any]],
    context: Sequence[str | None],
    *,
    scope: Scope,
    thread: str,
    first: int,
    importance: float,
) -> list[Memory]:
    memories = []
    for i, (turn, content, meta, before) in enumerate(zip(turns, contents, metadata, context, strict=True)):
        at = turn.at or utcnow()
        memories.append(
            Memory(
                id=new_id(),
                scope=scope,
                kind="turn",
                content=content,
                importance=importance,
                source=turn.speaker,
                created_at=at,
                updated_at=at,
                metadata={**meta, "thread": thread, "position": first + i},
                context=before,
            )
        )
    return memories


def record_fields(memory: Memory) -> dict[str, FieldValue | tuple[str, ...]]:
    fields = {"kind": memory.kind, "dedupe": dedupe_key(memory.content), **metadata_fields(memory.metadata)}
    thread, position = memory.metadata.get("thread"), memory.metadata.get("position")
    if memory.kind == "turn" and isinstance(thread, str) and isinstance(position, int):
        fields[TURN_KEY] = turn_key(thread_id(memory.scope, thread), position)
    if memory.superseded_by is not None:
        fields[SUPERSEDED_BY] = memory.superseded_by
    return fields


def is_superseded(record: Record) -> bool:
    """Read from the record's fields, so a check never decodes the body."""
    return SUPERSEDED_BY in record.fields


def index_text(memory: Memory) -> str:
    return memory.content if memory.context is None else f"{memory.context}\n{memory.content}"


def to_record(memory: Memory, vector: Any, stored: Record | None = None) -> Record:
    """The record of ``memory``; ``stored`` is the record it replaces, whose counters stay beside it."""
    counted = 0 if stored is None else stored.access_count
    in_text = memory.context is None  # the text is the content itself
    body = msgspec.structs.replace(memory, access_count=max(memory.access_count - counted, 0),
                                   **({"content": ""} if in_text else {}))  # fmt: skip
    encoded = _encode_memory(body)
    if in_text:  # the first such key is the memory's own: fields before it are strings, whose quotes are escaped
        encoded = encoded.replace(_NO_CONTENT, b"", 1)
    owner = _owner_keys(memory.id, memory.scope)
    owner_in_record = encoded.startswith(owner)  # always: the struct's first fields are these two
    if owner_in_record:
        encoded = b"{" + encoded[len(owner) :]
    return Record(
        id=memory.id,
        scope=memory.scope,
        body=_with_write_id(encoded, _MARKS[in_text, owner_in_record]),
        text=index_text(memory),
        vector=vector,
        importance=memory.importance,
        timestamp=epoch(memory.updated_at),
        expires_at=None if memory.expires_at is None else epoch(memory.expires_at),
        fields=record_fields(memory),
    )


_NO_CONTENT: Final = b'"content":"",'
"""An empty content as the body's encoder writes it (more keys always follow it: the times)."""
_WRITE_ID_KEY: Final = b',"_w":"'
_MARKS: Final = {(False, False): b"", (True, False): b"t", (False, True): b"o", (True, True): b"u"}
"""The letter (never a hex digit) before a write id's digits, by (content in the record's text, id and scope
the record's). Bodies written before ids and scopes were left out have no mark or ``t``."""
_IN_TEXT: Final = frozenset({b"t", b"u"})
_OWNER_IN_RECORD: Final = frozenset({b"o", b"u"})
_encode_scope = msgspec.json.Encoder().encode


def _owner_keys(memory_id: str, scope: Scope) -> bytes:
    """The start of an encoded memory: its id and scope keys, as the body's encoder writes them."""
    return b'{"id":' + _encode_text(memory_id) + b',"scope":' + _encode_scope(scope) + b","


def _with_write_id(body: bytes, mark: bytes) -> bytes:
    """The body with a key of its own per write (ignored when decoding): compare-and-set reports success
    when the stored body already equals the new one (a retried call), so two writers must never produce
    byte-identical bodies. Without it, processes storing one sentence with one ``created_at`` were each
    told they had created it. ``mark`` (``_MARKS``) goes before the digits."""
    return body[:-1] + _WRITE_ID_KEY + mark + os.urandom(8).hex().encode() + b'"}'


def _mark(body: bytes) -> bytes:
    """The body's mark (``_MARKS``); empty when it has none, or no write id."""
    return body[-19:-18] if body[-26:-19] == _WRITE_ID_KEY else b""


def expiry(now: datetime, ttl: object) -> datetime | None:
    """When a memory made at ``now`` with ``ttl`` expires; the ttl checked by the one rule (``check_ttl``)."""
    delta = check_ttl(ttl, now)
    return None if delta is None else now + delta


def merge(existing: Memory, newer: Memory) -> Memory:
    """A near-duplicate refreshes what is known: newer wording, the higher importance, merged metadata."""
    return msgspec.structs.replace(
        existing,
        content=newer.content,
        importance=max(existing.importance, newer.importance),
        updated_at=newer.updated_at,
        metadata={**existing.metadata, **newer.metadata},
        expires_at=newer.expires_at if existing.expires_at is not None else None,
        context=newer.context or existing.context,
    )


def refresh(existing: Memory, newer: Memory) -> Memory:
    """An exact duplicate stored again: its text is known, and it refreshes the rest: the higher importance,
    merged metadata, the later expiry (none is the latest: a repeat never shortens a memory's life).
    ``existing`` itself when nothing changes."""
    importance = max(existing.importance, newer.importance)
    metadata = {**existing.metadata, **newer.metadata}
    ends = (existing.expires_at, newer.expires_at)
    later = None if None in ends else max(ends)  # type: ignore[type-var]  # no None here
    unchanged = _encode_memory(metadata) == _encode_memory(existing.metadata)  # 1 == True, but not as stored
    if importance == existing.importance and unchanged and later == existing.expires_at:
        return existing
    return msgspec.structs.replace(existing, importance=importance, metadata=metadata, expires_at=later,
                                   updated_at=newer.updated_at)  # fmt: skip


def filters(kinds: Sequence[MemoryKind] | None, metadata: Mapping[str, FilterValue] | None) -> dict[str, FilterValue]:
    wanted: dict[str, FilterValue] = {}
    if kinds is not None:
        if isinstance(kinds, str):
            kinds = [kinds]
        wanted["kind"] = list(kinds)
    for key, value in (metadata or {}).items():
        wanted[f"meta.{key}"] = value
    return wanted


def decode(record: Record) -> Memory:
    body = record.body
    mark = _mark(body)
    if mark in _IN_TEXT:
        if record.text is None:
            raise CorruptDataError(f"stored memory {record.id!r} keeps its content in its text, and has none")
        body = b'{"content":' + _encode_text(record.text) + b"," + body[1:]
    if mark in _OWNER_IN_RECORD:
        body = _owner_keys(record.id, record.scope) + body[1:]
    try:
        memory = _decode_memory(body)
    except msgspec.DecodeError as exc:
        raise CorruptDataError(f"stored memory {record.id!r} cannot be decoded: {exc}") from exc
    if not record.access_count:
        return memory
    last = memory.last_accessed_at
    if record.last_accessed is not None:
        touched = from_epoch(record.last_accessed)
        last = touched if last is None else max(last, touched)
    return msgspec.structs.replace(
        memory, access_count=memory.access_count + record.access_count, last_accessed_at=last
    )


def speaker_of(record: Record) -> str | None:
    """A turn's speaker (its memory's ``source``), read without decoding the rest of the body."""
    try:
        return _decode_source(record.body).source
    except msgspec.DecodeError:
        return None  # an undecodable body is reported where the memory itself is decoded


def to_hit(
    hit: Hit, neighbour: float = 0.0, session: float = 0.0, time: float = 0.0, speaker: float = 0.0
) -> RecallHit:
    scores = hit.scores
    return RecallHit(
        memory=decode(hit.record),
        score=scores.final + neighbour + session + time + speaker,
        neighbour=neighbour,
        session=session,
        time=time,
        speaker=speaker,
        similarity=scores.similarity,
        lexical=scores.lexical,
        recency=scores.recency,
        importance=scores.importance,
    )
