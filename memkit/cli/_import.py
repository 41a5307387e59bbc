"""``memkit import FILE``: memories from JSON Lines into a store, every line checked, resumable.

Each line is decoded and checked by the rules the library applies (content, scope, importance, metadata,
times, vector) before anything of it is written; a bad line is reported with its number and skipped, and
the others are written in batches, each batch all or nothing (``Backend.upsert``). Memories keep their ids,
so importing a file twice writes each memory once. Vectors are used when the header's model is the
store's embedder, and the memories are embedded again otherwise (or with ``--reembed``). After each batch
the position is saved beside the file: an import stopped half way continues there when run again.

This is a restore, not ``store_many``: near-duplicates are not merged, and memories go in as they were
exported (ids, times, access counts). Writing records directly is what lets 100k pre-embedded memories go
in at the backend's own write rate. On a server, one task reads and checks the next batch (in a worker
thread) while the current one is written; into an embedded store, one after the other (see ``_pipeline``).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, aclosing
from functools import partial
from pathlib import Path
from typing import IO, Any

import anyio.to_thread
from anyio.abc import ObjectSendStream
from tqdm import tqdm  # type: ignore[import-untyped]

from memkit.cli._jsonl import Header, ResumeFile, file_identity
from memkit.cli._lines import BATCH, EMBEDDED_BATCH, Parsed, read_header, read_lines
from memkit.cli._output import CliError, ExitCode, print_json
from memkit.cli._reader import ChildReader, child_reader, use_child
from memkit.cli._store import open_store

__all__ = ["import_file"]

_SHOWN = 50
"""Bad lines printed one by one; the rest are counted (``--json`` lists them all)."""


_SAVED_BAD = 1_000
"""Bad lines kept in the resume file (the rest counted): a resumed import still reports what it skipped."""


class _Report:
    def __init__(self, name: str, progress: tqdm) -> None:
        self.name, self.progress = name, progress
        self.bad: list[tuple[int, str]] = []
        self.unlisted = 0  # bad lines of an interrupted run past those its resume file kept
        self.imported = self.embedded = 0
        self.before = 0  # imported by the interrupted runs this one continues

    @property
    def bad_count(self) -> int:
        return len(self.bad) + self.unlisted

    def add_bad(self, bad: list[tuple[int, str]]) -> None:
        for number, error in bad:
            if len(self.bad) < _SHOWN:
                self.progress.write(f"{self.name}:{number}: {error}", file=sys.stderr)
            self.bad.append((number, error))

    def saved(self) -> dict[str, Any]:
        return {"bad": self.bad[:_SAVED_BAD], "bad_count": self.bad_count}

    def restore(self, saved: dict[str, Any]) -> None:
        """The bad lines an interrupted run found before where this one starts."""
        self.before = int(saved.get("imported", 0))
        kept = [(int(n), str(e)) for n, e in saved.get("bad", [])]
        self.bad = kept + self.bad
        self.unlisted = max(int(saved.get("bad_count", len(kept))) - len(kept), 0)
        if self.bad_count:
            self.progress.write(f"{self.bad_count} bad lines were found before the interruption:", file=sys.stderr)
        for number, error in self.bad[:_SHOWN]:
            self.progress.write(f"{self.name}:{number}: {error}", file=sys.stderr)


async def _write(mem: Any, parsed: Parsed, report: _Report) -> None:
    """Embed what has no usable vector, then write the batch in one upsert."""
    from memkit.layers._embedding import embed_texts
    from memkit.layers.longterm._codec import index_text, to_record

    if parsed.encoded is not None:  # checked, encoded and tokenized by the child reader: SQLite writes them as they are
        await mem.backend.upsert_encoded(mem.long_term.config.collection, parsed.encoded)
        report.imported += parsed.size()
        return
    records = list(parsed.records)
    if parsed.unembedded:
        missing = list(parsed.unembedded.items())
        vectors = await embed_texts(mem.embedder, [index_text(memory) for _, memory in missing])
        for (at, memory), vector in zip(missing, vectors, strict=True):
            records[at] = to_record(memory, vector)
        report.embedded += len(missing)
    if records:
        await mem.backend.upsert(mem.long_term.config.collection, records)
    report.imported += len(records)


async def _batches(handle: IO[bytes], line: int, **options: Any) -> AsyncIterator[Parsed]:
    while True:
        parsed = await anyio.to_thread.run_sync(partial(read_lines, handle, line, **options))
        if not parsed.records and not parsed.bad:
            return
        yield parsed
        line = parsed.line


async def _read(handle: IO[bytes], line: int, send: ObjectSendStream[Parsed], **options: Any) -> None:
    async with send:
        async for parsed in _batches(handle, line, **options):
            await send.send(parsed)


async def _pipeline(handle: IO[bytes], line: int, report: _Report, write: Any, *, ahead: bool,
                    reader: ChildReader | None = None, **options: Any) -> None:  # fmt: skip
    """Batches read and checked, one ahead of ``write`` when ``ahead`` (by ``reader``'s child process when
    given), which sees them in order."""

    async def take(parsed: Parsed) -> None:
        report.add_bad(parsed.bad)
        await write(parsed)
        report.progress.update(parsed.offset - report.progress.n)

    if reader is not None:
        async with aclosing(reader.batches()) as batches:
            async for parsed in batches:
                await take(parsed)
        return
    if not ahead:
        # An embedded store writes in this process: checking lines beside it only fought it for the GIL
        # (SQLite lets go of it for every row it writes, and waited to get it back: 100k lines 8.2k/s read
        # ahead, 8.9k/s one after the other). A server's writes wait on the network instead.
        async for parsed in _batches(handle, line, **options):
            await take(parsed)
        return
    send, receive = anyio.create_memory_object_stream[Parsed](max_buffer_size=1)
    async with anyio.create_task_group() as group, receive:
        group.start_soon(partial(_read, handle, line, send, **options))
        async for parsed in receive:
            await take(parsed)


async def _run(args: argparse.Namespace, handle: IO[bytes], line: int, *, header: Header | None, report: _Report,
               state: ResumeFile | None) -> None:  # fmt: skip
    from memkit.layers.longterm import LongTermConfig

    identity = None if header is None or header.model_id is None else (header.model_id, int(header.dim or 0))
    dim = None if identity is None else identity[1]
    if args.check:  # no store: the rules alone

        async def count(parsed: Parsed) -> None:
            report.imported += len(parsed.records)

        max_chars = LongTermConfig().max_content_chars
        return await _pipeline(handle, line, report, count, ahead=False, dim=dim, max_chars=max_chars,
                               use_vectors=True, size=BATCH)  # fmt: skip
    # Checked by a child process, started before the store opens, when its options prove to be the ones
    # the store calls for (an embedded store whose model is the file's: the common case); else by this one.
    scheme = _scheme(args.url)
    guess = child_options(identity, LongTermConfig().max_content_chars, server=False, reembed=args.reembed,
                          encoded=scheme == "sqlite")  # fmt: skip
    async with AsyncExitStack() as stack:
        reader = None
        if use_child(_left(handle)) and scheme in _EMBEDDED:  # a server's lines are checked here, beside its writes
            reader = await stack.enter_async_context(child_reader(handle.name, handle.tell(), line, guess))
        mem = await stack.enter_async_context(open_store(args.url, embedder=args.embedder, create=True,
                                                         hint=identity))  # fmt: skip
        await _write_all(args, mem, handle, line, report, state=state, identity=identity, reader=reader)


async def _write_all(args: argparse.Namespace, mem: Any, handle: IO[bytes], line: int, report: _Report, *,
                     state: ResumeFile | None, identity: tuple[str, int] | None,
                     reader: ChildReader | None) -> None:  # fmt: skip
    store_identity = (mem.embedder.model_id, mem.embedder.dim)
    if identity is not None and identity != store_identity:
        report.progress.write(f"the file's vectors are {identity[0]!r}, the store's {store_identity[0]!r}: "
                              "embedding every memory again", file=sys.stderr)  # fmt: skip

    async def write(parsed: Parsed) -> None:
        await _write(mem, parsed, report)
        if state is not None:
            position = {
                "offset": parsed.offset,
                "line": parsed.line,
                "imported": report.before + report.imported,
                **report.saved(),
            }
            await anyio.to_thread.run_sync(state.save, position)

    server = mem.backend.capabilities.concurrent_requests
    options = child_options(identity, mem.long_term.config.max_content_chars, server=server, reembed=args.reembed,
                            store=store_identity, encoded=hasattr(mem.backend, "upsert_encoded"))  # fmt: skip
    reading = {name: value for name, value in options.items() if name != "tokens"}  # the child's alone
    # What is alive now (the interpreter, numba, the store) outlives the import: each full collection
    # of the cycle collector walked it for nothing (100k lines into SQLite 13.1-13.5k/s -> 14.3-15.2k/s).
    gc.freeze()
    try:
        await _pipeline(handle, line, report, write, ahead=server,
                        reader=reader if reader is not None and reader.options == options else None,
                        **reading)  # fmt: skip
    finally:
        gc.unfreeze()


def child_options(identity: tuple[str, int] | None, max_chars: int, *, server: bool, reembed: bool,
                  store: tuple[str, int] | None = None, encoded: bool = False) -> dict[str, Any]:  # fmt: skip
    """``read_lines``'s options for a store (``store``: its model; None guesses the file's, before it opens),
    and ``tokens``: whether a child reader tokenizes the texts for the store (``encoded``: it takes encoded rows)."""
    use_vectors = identity is not None and (store is None or identity == store) and not reembed
    return {"dim": None if identity is None else identity[1], "max_chars": max_chars,
            "size": BATCH if server else EMBEDDED_BATCH, "use_vectors": use_vectors,
            "tokens": encoded and use_vectors}  # fmt: skip


_EMBEDDED = ("sqlite", "memory")
"""Schemes whose writes run in this process: only their imports start a child reader (a server's import
started one and dropped it once the store opened, ~0.5 s of the other core's time for nothing)."""


def _scheme(url: str | None) -> str | None:
    """The import's URL scheme, read before the store opens (None for a URL the opening will refuse)."""
    from memkit.cli._store import resolve_url

    try:
        return resolve_url(url).scheme
    except Exception:  # the store's opening reports a bad URL, with its advice
        return None


def _left(handle: IO[bytes]) -> int:
    return os.fstat(handle.fileno()).st_size - handle.tell()


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
    from memkit.cli._store import resolve_url

    path = Path(args.file)
    if not await anyio.Path(path).is_file():
        raise CliError(f"no file {path}", None, ExitCode.BAD_INPUT)
    url = None if args.check else resolve_url(args.url)  # --check opens no store: no configuration to read
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
            if saved is not None:
                report.restore(saved)
            await _run(args, handle, line, header=header, report=report, state=state)
    finally:
        handle.close()
    if state is not None:
        await anyio.to_thread.run_sync(state.remove)
    return _summary(args, report, time.perf_counter() - started, resumed=saved is not None)


def _summary(args: argparse.Namespace, report: _Report, seconds: float, *, resumed: bool) -> int:
    verb = "valid" if args.check else "imported"
    if args.json:
        print_json({verb: report.imported, "embedded": report.embedded, "seconds": seconds, "resumed": resumed,
                    "per_s": report.imported / seconds if seconds else None, "bad_count": report.bad_count,
                    "bad": [{"line": n, "error": e} for n, e in report.bad]})  # fmt: skip
    else:
        embedded = f" ({report.embedded} embedded)" if report.embedded else ""
        print(f"{verb} {report.imported} memories{embedded} in {seconds:.1f} s")
    if report.bad_count:
        hidden = report.bad_count - min(len(report.bad), _SHOWN)
        listed = f"the first {len(report.bad)}" if report.unlisted else "all"
        more = f"; {hidden} more not shown (--json lists {listed})" if hidden > 0 else ""
        print(f"{report.bad_count} bad lines skipped{more}: fix them and import again (memories already "
              "imported are not written twice)", file=sys.stderr)  # fmt: skip
        return ExitCode.BAD_INPUT
    return ExitCode.OK
