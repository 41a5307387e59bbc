"""Checking import lines: each decoded and held to the library's rules, in batches, off the event loop.

Only ``memkit import`` loads this module, so it imports the library's internals at the top: a batch of
2,000 lines runs these functions 2,000 times, and an import inside them cost a lookup each time.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import IO, Any, NamedTuple

import msgspec

from memkit._validation import check_content, check_importance, check_metadata, check_moment, check_text
from memkit.backend import Record, Scope
from memkit.cli._jsonl import FORMAT_VERSION, Header, Line, raw_vector, unit_rows
from memkit.cli._output import CliError, ExitCode
from memkit.errors import ScopeError, ValidationError
from memkit.layers.longterm import Memory
from memkit.layers.longterm._codec import memory_id, to_record

__all__ = ["BATCH", "EMBEDDED_BATCH", "Parsed", "joined", "read_batch", "read_header", "read_lines"]

BATCH = 2_000
EMBEDDED_BATCH = 10_000
"""Lines a batch holds when an embedded store writes them: memories with random ids land all over the
id index, so a commit rewrites most of its pages whatever the batch's size; 10,000 rows a commit instead
of 2,000 cut SQLite's own time from ~30 to ~22 us a row at 100k (bare ``sqlite3``, the same rows). They
are still checked ``BATCH`` at a time (``read_lines``): checking 10,000 at once was 20% slower a line."""
_decode_line = msgspec.json.Decoder(Line).decode
_decode_header = msgspec.json.Decoder(Header).decode


class Parsed(NamedTuple):
    records: list[Record | None]
    """The good lines' records, in order; None where the memory has no usable vector (it is embedded first)."""
    unembedded: dict[int, Memory]
    """The memories of those None records, by position."""
    bad: list[tuple[int, str]]
    offset: int
    line: int
    encoded: Any = None
    """The good lines as a SQLite store's ``EncodedRows`` instead of ``records`` (which is then empty): the
    child reader builds them for a store with ``upsert_encoded``."""

    def size(self) -> int:
        """The good lines."""
        return len(self.encoded.ids) if self.encoded is not None else len(self.records)


def _moment(value: datetime | None, what: str) -> datetime | None:
    return None if value is None else check_moment(value, what)


_MAX_COUNT = 2**63 - 1
"""The largest count every store keeps as an integer (SQLite INTEGER, Postgres BIGINT)."""


def _memory(line: Line, now: datetime, max_chars: int) -> Memory:
    """The line as a Memory, checked by the library's own rules (they raise the library's errors)."""
    if line.user_id is None and line.agent_id is None:
        raise ValueError("a memory needs a user_id or an agent_id")
    for name, value in (("user_id", line.user_id), ("agent_id", line.agent_id), ("session_id", line.session_id)):
        if value is not None:
            check_text(value, name)
    scope = Scope(user_id=line.user_id, agent_id=line.agent_id, session_id=line.session_id)
    content = check_content(line.content, max_chars)
    created = _moment(line.created_at, "created_at") or now
    if not 0 <= line.access_count <= _MAX_COUNT:
        raise ValueError(f"access_count must be between 0 and {_MAX_COUNT}, got {line.access_count}")
    if line.superseded_at is not None and line.superseded_by is None:
        raise ValueError("superseded_at needs superseded_by (the id of the memory that replaced this one)")
    return Memory(
        id=memory_id(scope, content) if line.id is None else check_text(line.id, "id"),
        scope=scope, kind=check_text(line.kind, "kind"), content=content,
        importance=check_importance(line.importance),
        source=None if line.source is None else check_text(line.source, "source"),
        created_at=created, updated_at=_moment(line.updated_at, "updated_at") or created,
        expires_at=_moment(line.expires_at, "expires_at"),
        last_accessed_at=_moment(line.last_accessed_at, "last_accessed_at"),
        access_count=line.access_count, metadata=check_metadata(line.metadata),
        context=None if line.context is None else check_content(line.context, max_chars, "context"),
        superseded_by=None if line.superseded_by is None else check_text(line.superseded_by, "superseded_by"),
        superseded_at=_moment(line.superseded_at, "superseded_at"),
    )  # fmt: skip


def _parse(raw: bytes, dim: int | None, now: datetime, max_chars: int) -> tuple[Memory, Any]:
    try:
        line = _decode_line(raw)
        memory = _memory(line, now, max_chars)
        vector = None if line.vector is None or dim is None else raw_vector(line.vector, dim)
    except (msgspec.DecodeError, ValidationError, ScopeError, ValueError) as exc:  # msgspec's type errors too
        raise ValueError(str(exc)) from None
    return memory, vector


def read_lines(handle: IO[bytes], line: int, *, size: int, **options: Any) -> Parsed:
    """Up to ``size`` lines from where ``handle`` is, read and checked ``BATCH`` at a time (``read_batch``)."""
    parts = [read_batch(handle, line, **options)]
    lines = len(parts[0].records) + len(parts[0].bad)
    while lines < size and len(parts[-1].records) + len(parts[-1].bad) == BATCH:  # a short one ended the file
        parts.append(read_batch(handle, parts[-1].line, **options))
        lines += len(parts[-1].records) + len(parts[-1].bad)
    return joined(parts)


def joined(parts: list[Parsed]) -> Parsed:
    """Consecutive batches as one (positions of the unembedded shifted to the joined records)."""
    if len(parts) == 1:
        return parts[0]
    records: list[Record | None] = []
    unembedded: dict[int, Memory] = {}
    for part in parts:
        unembedded.update((len(records) + at, memory) for at, memory in part.unembedded.items())
        records += part.records
    return Parsed(records, unembedded, [b for p in parts for b in p.bad], parts[-1].offset, parts[-1].line)


def read_batch(handle: IO[bytes], line: int, *, dim: int | None, max_chars: int, use_vectors: bool) -> Parsed:
    """Up to ``BATCH`` lines from where ``handle`` is, each decoded and checked (run in a worker thread).
    ``use_vectors``: the lines' vectors are the store's model's, so their records are built here."""
    now = datetime.now(UTC)
    found: list[tuple[int, Memory, Any]] = []
    bad: list[tuple[int, str]] = []
    while len(found) + len(bad) < BATCH:
        raw = handle.readline()
        if not raw:
            break
        line += 1
        if not raw.strip():
            continue
        try:
            found.append((line, *_parse(raw, dim, now, max_chars)))
        except ValueError as exc:
            bad.append((line, str(exc)))
    good, vectors = _checked_vectors(found, bad, use_vectors)
    records = [None if v is None else to_record(m, v) for m, v in zip(good, vectors, strict=True)]
    unembedded = {at: memory for at, (memory, record) in enumerate(zip(good, records, strict=True)) if record is None}
    return Parsed(records, unembedded, sorted(bad), handle.tell(), line)


def _checked_vectors(
    found: list[tuple[int, Memory, Any]], bad: list[tuple[int, str]], use_vectors: bool
) -> tuple[list[Memory], list[Any]]:
    """The memories whose vectors pass (unit rows, checked for the whole batch at once), and their vectors."""
    if not use_vectors:
        return [m for _, m, _ in found], [None] * len(found)
    given = [at for at, (_, _, v) in enumerate(found) if v is not None]
    rows, problems = unit_rows([found[at][2] for at in given])
    vectors: list[Any] = [None] * len(found)
    dropped: set[int] = set()
    for at, row, problem in zip(given, rows, problems, strict=True):
        if problem is None:
            vectors[at] = row
        else:
            bad.append((found[at][0], problem))
            dropped.add(at)
    keep = [at for at in range(len(found)) if at not in dropped]
    return [found[at][1] for at in keep], [vectors[at] for at in keep]


def read_header(handle: IO[bytes]) -> Header | None:
    """The header when the first line is one (the handle is then past it), else None (and rewound)."""
    first = handle.readline()
    try:
        header = _decode_header(first)
    except msgspec.DecodeError:
        handle.seek(0)
        return None
    if header.memkit_export != FORMAT_VERSION:
        raise CliError(f"the file is in export format {header.memkit_export}; this memkit reads format "
                       f"{FORMAT_VERSION}", "export it again with this version", ExitCode.BAD_INPUT)  # fmt: skip
    if (header.model_id is None) != (header.dim is None) or (header.dim is not None and header.dim < 1):
        raise CliError("the header names a model without a positive dim (or a dim without a model)", None,
                       ExitCode.BAD_INPUT)  # fmt: skip
    return header
