"""``memkit import FILE``: memories from JSON Lines into a store, every line checked, resumable.

Each line is decoded and checked by the rules the library applies (content, scope, importance, metadata,
times, vector) before anything of it is written; a bad line is reported with its number and skipped, and
the others are written in batches, each batch all or nothing (``Backend.upsert``). Memories keep their ids,
so importing a file twice writes each memory once. Vectors are used when the header's model is the
store's embedder, and the memories are embedded again otherwise (or with ``--reembed``). After each batch
the position is saved beside the file: an import stopped half way continues there when run again.

This is a restore, not ``store_many``: near-duplicates are not merged, and memories go in as they were
exported (ids, times, access counts). Writing records directly is what lets 100k pre-embedded memories go
in at the backend's own write rate.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, NamedTuple

import anyio.to_thread
import msgspec
from tqdm import tqdm  # type: ignore[import-untyped]

from memkit.cli._jsonl import FORMAT_VERSION, Header, Line, ResumeFile, file_identity, vector_of
from memkit.cli._output import CliError, ExitCode, print_json
from memkit.cli._store import open_store

__all__ = ["import_file"]

BATCH = 2_000
_SHOWN = 50
"""Bad lines printed one by one; the rest are counted (``--json`` lists them all)."""
_decode_line = msgspec.json.Decoder(Line).decode
_decode_header = msgspec.json.Decoder(Header).decode


class Parsed(NamedTuple):
    items: list[tuple[Any, Any]]
    """(Memory, unit vector or None) of each good line."""
    bad: list[tuple[int, str]]
    offset: int
    line: int


def _memory(line: Line, now: datetime, max_chars: int) -> Any:
    """The line as a Memory, checked by the library's own rules (they raise the library's errors)."""
    from memkit._validation import check_content, check_importance, check_metadata, check_moment, check_text
    from memkit.backend import Scope
    from memkit.layers.longterm import Memory
    from memkit.layers.longterm._codec import memory_id

    if line.user_id is None and line.agent_id is None:
        raise ValueError("a memory needs a user_id or an agent_id")
    for name in ("user_id", "agent_id", "session_id"):
        if getattr(line, name) is not None:
            check_text(getattr(line, name), name)
    scope = Scope(user_id=line.user_id, agent_id=line.agent_id, session_id=line.session_id)
    content = check_content(line.content, max_chars)
    created = now if line.created_at is None else check_moment(line.created_at, "created_at")
    if line.access_count < 0:
        raise ValueError(f"access_count must be >= 0, got {line.access_count}")
    return Memory(
        id=memory_id(scope, content) if line.id is None else check_text(line.id, "id"),
        scope=scope, kind=check_text(line.kind, "kind"), content=content,
        importance=check_importance(line.importance),
        source=None if line.source is None else check_text(line.source, "source"),
        created_at=created,
        updated_at=created if line.updated_at is None else check_moment(line.updated_at, "updated_at"),
        expires_at=None if line.expires_at is None else check_moment(line.expires_at, "expires_at"),
        last_accessed_at=None if line.last_accessed_at is None else check_moment(line.last_accessed_at,
                                                                                  "last_accessed_at"),
        access_count=line.access_count, metadata=check_metadata(line.metadata),
        context=None if line.context is None else check_content(line.context, max_chars, "context"),
    )  # fmt: skip


def _parse(raw: bytes, dim: int | None, now: datetime, max_chars: int) -> tuple[Any, Any]:
    from memkit.errors import ScopeError, ValidationError

    try:
        line = _decode_line(raw)
        memory = _memory(line, now, max_chars)
        vector = None if line.vector is None or dim is None else vector_of(line.vector, dim)
    except (msgspec.DecodeError, ValidationError, ScopeError, ValueError) as exc:  # msgspec's type errors too
        raise ValueError(str(exc)) from None
    return memory, vector


def read_batch(handle: IO[bytes], line: int, dim: int | None, max_chars: int) -> Parsed:
    """Up to ``BATCH`` lines from where ``handle`` is, each decoded and checked (run in a worker thread)."""
    now = datetime.now(UTC)
    items: list[tuple[Any, Any]] = []
    bad: list[tuple[int, str]] = []
    while len(items) + len(bad) < BATCH:
        raw = handle.readline()
        if not raw:
            break
        line += 1
        if not raw.strip():
            continue
        try:
            items.append(_parse(raw, dim, now, max_chars))
        except ValueError as exc:
            bad.append((line, str(exc)))
    return Parsed(items, bad, handle.tell(), line)


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


class _Report:
    def __init__(self, name: str, progress: tqdm) -> None:
        self.name, self.progress = name, progress
        self.bad: list[tuple[int, str]] = []
        self.imported = self.embedded = 0

    def add_bad(self, bad: list[tuple[int, str]]) -> None:
        for number, error in bad:
            if len(self.bad) < _SHOWN:
                self.progress.write(f"{self.name}:{number}: {error}", file=sys.stderr)
            self.bad.append((number, error))


async def _write(mem: Any, parsed: Parsed, trusted: bool, report: _Report) -> None:
    """Embed what has no usable vector, then write the batch in one upsert."""
    from memkit.layers._embedding import embed_texts
    from memkit.layers.longterm._codec import index_text, to_record

    items = parsed.items
    missing = [at for at, (_, vector) in enumerate(items) if vector is None or not trusted]
    if missing:
        vectors = await embed_texts(mem.embedder, [index_text(items[at][0]) for at in missing])
        for at, vector in zip(missing, vectors, strict=True):
            items[at] = (items[at][0], vector)
        report.embedded += len(missing)
    records = await anyio.to_thread.run_sync(lambda: [to_record(m, v) for m, v in items])
    if records:
        await mem.backend.upsert(mem.long_term.config.collection, records)
    report.imported += len(records)


async def _loop(handle: IO[bytes], line: int, *, dim: int | None, max_chars: int, report: _Report,
                write: Callable[[Parsed], Awaitable[None]]) -> None:  # fmt: skip
    while True:
        parsed = await anyio.to_thread.run_sync(read_batch, handle, line, dim, max_chars)
        report.add_bad(parsed.bad)
        if not parsed.items and not parsed.bad:
            return
        await write(parsed)
        report.progress.update(parsed.offset - report.progress.n)
        line = parsed.line


async def _run(args: argparse.Namespace, handle: IO[bytes], line: int, *, header: Header | None, report: _Report,
               state: ResumeFile | None) -> None:  # fmt: skip
    from memkit.layers.longterm import LongTermConfig

    identity = None if header is None or header.model_id is None else (header.model_id, int(header.dim or 0))
    dim = None if identity is None else identity[1]
    if args.check:  # no store: the rules alone

        async def count(parsed: Parsed) -> None:
            report.imported += len(parsed.items)

        return await _loop(handle, line, dim=dim, max_chars=LongTermConfig().max_content_chars, report=report,
                           write=count)  # fmt: skip
    async with open_store(args.url, embedder=args.embedder, create=True, hint=identity) as mem:
        store_identity = (mem.embedder.model_id, mem.embedder.dim)
        trusted = identity == store_identity and not args.reembed
        if identity is not None and identity != store_identity:
            report.progress.write(f"the file's vectors are {identity[0]!r}, the store's {store_identity[0]!r}: "
                                  "embedding every memory again", file=sys.stderr)  # fmt: skip

        async def write(parsed: Parsed) -> None:
            await _write(mem, parsed, trusted, report)
            if state is not None:
                position = {"offset": parsed.offset, "line": parsed.line, "imported": report.imported}
                await anyio.to_thread.run_sync(state.save, position)

        await _loop(handle, line, dim=dim, max_chars=mem.long_term.config.max_content_chars, report=report,
                    write=write)  # fmt: skip


def _start(path: Path, saved: dict[str, Any] | None) -> tuple[IO[bytes], Header | None, int, int]:
    """The file open at where to read from: its handle, header, line number and size."""
    handle = path.open("rb")
    try:
        header = read_header(handle)
        line = 1 if header is not None else 0
        if saved is not None:
            handle.seek(int(saved["offset"]))
            line = int(saved["line"])
        return handle, header, line, path.stat().st_size
    except BaseException:
        handle.close()
        raise


async def import_file(args: argparse.Namespace) -> int:
    from memkit._url import StorageURL
    from memkit.cli._store import resolve_url

    path = Path(args.file)
    if not await anyio.Path(path).is_file():
        raise CliError(f"no file {path}", None, ExitCode.BAD_INPUT)
    url = StorageURL(resolve_url(args.url))
    identity = {**await anyio.to_thread.run_sync(file_identity, path), "url": str(url)}
    state = None if args.check else ResumeFile(Path(args.state or f"{path}.memkit-import"), identity)
    saved = None if state is None or args.restart else await anyio.to_thread.run_sync(state.load)
    started = time.perf_counter()
    handle, header, line, size = await anyio.to_thread.run_sync(_start, path, saved)
    try:
        if saved is not None:
            print(f"resuming {path} at line {line + 1} ({saved['imported']} imported before); --restart starts "
                  "over", file=sys.stderr)  # fmt: skip
        with tqdm(total=size, initial=handle.tell(), unit="B", unit_scale=True, disable=args.no_progress or None,
                  desc="checking" if args.check else "importing") as progress:  # fmt: skip
            report = _Report(str(path), progress)
            await _run(args, handle, line, header=header, report=report, state=state)
    finally:
        handle.close()
    if state is not None:
        state.remove()
    return _summary(args, report, time.perf_counter() - started, resumed=saved is not None)


def _summary(args: argparse.Namespace, report: _Report, seconds: float, *, resumed: bool) -> int:
    verb = "valid" if args.check else "imported"
    if args.json:
        print_json({verb: report.imported, "embedded": report.embedded, "seconds": seconds, "resumed": resumed,
                    "per_s": report.imported / seconds if seconds else None,
                    "bad": [{"line": n, "error": e} for n, e in report.bad]})  # fmt: skip
    else:
        embedded = f" ({report.embedded} embedded)" if report.embedded else ""
        print(f"{verb} {report.imported} memories{embedded} in {seconds:.1f} s")
    if report.bad:
        hidden = len(report.bad) - _SHOWN
        more = f"; {hidden} more not shown (--json lists all)" if hidden > 0 else ""
        print(f"{len(report.bad)} bad lines skipped{more}: fix them and import again (memories already "
              "imported are not written twice)", file=sys.stderr)  # fmt: skip
        return ExitCode.BAD_INPUT
    return ExitCode.OK
