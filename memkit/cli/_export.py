"""``memkit export FILE``: a store's long-term memories as JSON Lines, one user's or everyone's.

Memories are read in pages by the store's keyset cursor (each visited once even while others are written);
after each page the file is flushed and the position saved beside it, so an export stopped half way
continues where it stopped when run again (the file is cut back to the last saved page first).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import IO, Any

import anyio.to_thread
import msgspec
from tqdm import tqdm  # type: ignore[import-untyped]

from memkit.cli._jsonl import FORMAT_VERSION, Header, Line, ResumeFile, vector_bytes
from memkit.cli._output import CliError, ExitCode, print_json
from memkit.cli._store import open_store

__all__ = ["export"]

PAGE = 1_000
_encode = msgspec.json.Encoder().encode


def to_line(record: Any, vectors: bool) -> Line:
    from memkit.layers.longterm._codec import decode

    memory = decode(record)
    scope = memory.scope
    return Line(
        id=memory.id, user_id=scope.user_id, agent_id=scope.agent_id, session_id=scope.session_id,
        kind=memory.kind, content=memory.content, importance=memory.importance, source=memory.source,
        created_at=memory.created_at, updated_at=memory.updated_at, expires_at=memory.expires_at,
        last_accessed_at=memory.last_accessed_at, access_count=memory.access_count, metadata=memory.metadata,
        context=memory.context, superseded_by=memory.superseded_by, superseded_at=memory.superseded_at,
        vector=vector_bytes(record.vector) if vectors and record.vector is not None else None,
    )  # fmt: skip


def _lines(records: list[Any], vectors: bool) -> bytes:
    return b"".join(_encode(to_line(r, vectors)) + b"\n" for r in records)


def _write(handle: IO[bytes], data: bytes) -> None:
    handle.write(data)
    handle.flush()


async def _pages(mem: Any, args: argparse.Namespace, handle: IO[bytes], *, state: ResumeFile | None,
                 position: dict[str, Any], progress: tqdm) -> None:  # fmt: skip
    from memkit.backend import Scope

    scope = Scope(user_id=args.user_id)
    collection = mem.long_term.config.collection
    now = time.time()
    while True:
        page = await mem.backend.scan(collection, scope, limit=PAGE, cursor=position["cursor"], now=now,
                                      all_scopes=args.user_id is None)  # fmt: skip
        data = await anyio.to_thread.run_sync(_lines, page.records, args.vectors)
        await anyio.to_thread.run_sync(_write, handle, data)
        position["bytes"] += len(data)
        position["count"] += len(page.records)
        position["cursor"] = page.next_cursor
        progress.update(len(page.records))
        if page.next_cursor is None:
            return
        if state is not None:
            await anyio.to_thread.run_sync(state.save, position)


def _open(path: Path, saved: dict[str, Any] | None, to_stdout: bool) -> IO[bytes]:
    """The file to write, cut back to the last saved page when resuming."""
    if to_stdout:
        return sys.stdout.buffer
    try:
        handle = path.open("wb" if saved is None else "r+b")
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror or exc}", "choose a file in a folder you can write to "
                       "(or - for standard output)", ExitCode.UNREACHABLE) from exc  # fmt: skip
    if saved is None:
        return handle
    handle.truncate(int(saved["bytes"]))  # what was written after the last saved page goes
    handle.seek(int(saved["bytes"]))
    return handle


async def _prepare(mem: Any, args: argparse.Namespace, path: Path) -> tuple[ResumeFile | None, dict[str, Any] | None]:
    """The resume file and the position it holds; refuses to overwrite a file that is not a stopped export."""
    if args.file == "-":
        return None, None
    identity = {"file": str(await anyio.Path(path).resolve()), "url": str(mem.url), "user_id": args.user_id,
                "vectors": args.vectors}  # fmt: skip
    state = ResumeFile(Path(args.state or f"{path}.memkit-export"), identity)
    saved = None if args.restart else await anyio.to_thread.run_sync(state.load)
    if saved is None and await anyio.Path(path).exists() and not args.force:
        raise CliError(f"{path} exists", "pass --force to overwrite it", ExitCode.BAD_INPUT)
    if saved is not None:
        print(f"resuming {path} after {saved['count']} memories; --restart starts over", file=sys.stderr)
    return state, saved


async def export(args: argparse.Namespace) -> int:
    from memkit.backend import Scope

    to_stdout = args.file == "-"
    path = Path(args.file)
    started = time.perf_counter()
    async with open_store(args.url, embedder=args.embedder) as mem:
        state, saved = await _prepare(mem, args, path)
        collection = mem.long_term.config.collection
        total = await mem.backend.count(collection, Scope(user_id=args.user_id), now=time.time(),
                                        all_scopes=args.user_id is None)  # fmt: skip
        header = Header(memkit_export=FORMAT_VERSION, collection=collection)
        if args.vectors:
            header = msgspec.structs.replace(header, model_id=mem.embedder.model_id, dim=mem.embedder.dim)
        position: dict[str, Any] = saved or {"cursor": None, "bytes": 0, "count": 0}
        handle = await anyio.to_thread.run_sync(_open, path, saved, to_stdout)
        try:
            if saved is None:
                data = _encode(header) + b"\n"
                await anyio.to_thread.run_sync(_write, handle, data)
                position["bytes"] = len(data)
            with tqdm(total=total, initial=position["count"], unit="memory", desc="exporting",
                      disable=args.no_progress or None) as progress:  # fmt: skip
                await _pages(mem, args, handle, state=state, position=position, progress=progress)
        finally:
            if not to_stdout:
                handle.close()
    if state is not None:
        await anyio.to_thread.run_sync(state.remove)
    seconds = time.perf_counter() - started
    if args.json and not to_stdout:
        print_json({"exported": position["count"], "file": str(path), "vectors": args.vectors, "seconds": seconds})
    elif not to_stdout:
        print(f"exported {position['count']} memories to {path} in {seconds:.1f} s")
    return ExitCode.OK
