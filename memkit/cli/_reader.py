"""Import lines read and checked in a child process, on another core than the writes.

Checking a line (decoding it, the library's rules, building its record) costs about what writing it does,
and in one process both want the GIL: a thread reading ahead only fought SQLite for it. A child process
checks the next lines while this one writes; it sends the records as columns (one array of vectors, lists
of strings and numbers), which pickle about ten times faster than the records themselves (30 -> 3 us a
memory, both ends). It checks at most ``_AHEAD_PARTS`` parts ahead of the writes (``ChildReader``).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from multiprocessing.connection import Connection
from typing import Any, Final, NamedTuple

import anyio.to_thread
import msgspec
import numpy as np

from memkit._validation import _shared_scope
from memkit.backend import Record
from memkit.cli._lines import BATCH, Parsed, joined, read_lines
from memkit.cli._output import CliError, ExitCode
from memkit.layers.longterm import Memory
from memkit.text import tokenize

__all__ = ["CHILD_FROM_BYTES", "ChildReader", "child_reader", "use_child"]

_encode_fields = msgspec.json.Encoder().encode
_decode_fields = msgspec.json.Decoder(dict[str, str | int | float | bool | tuple[str, ...]]).decode

CHILD_FROM_BYTES = 8_000_000
"""A file with less left to read than this is checked in this process: starting a child (an interpreter
importing memkit) takes ~0.5 s, what checking ~15,000 lines takes."""


def use_child(remaining_bytes: int) -> bool:
    """A child checks the lines when there are enough of them and another core to check them on."""
    return remaining_bytes >= CHILD_FROM_BYTES and len(os.sched_getaffinity(0)) > 1


class _Columns(NamedTuple):
    """A batch's records, column by column (every record built by the child has a vector)."""

    at: list[int]
    ids: list[str]
    scopes: list[tuple[str | None, str | None, str | None]]
    bodies: list[bytes]
    texts: list[str | None]
    vectors: np.ndarray | None
    numbers: list[tuple[float, float, float | None]]
    """importance, timestamp, expires_at (the counters of a record built by ``to_record`` are 0 and None)"""
    fields: list[bytes]
    """JSON: a dict per record pickled at ~2 us, and a SQLite store writes them as JSON anyway."""
    tokens: list[str | None] | None
    """Each text's tokens joined by spaces, when the store takes them (``upsert_encoded``: SQLite): tokenizing
    here, on the child's core, takes it off the writing process's."""


class _Batch(NamedTuple):
    columns: _Columns
    size: int
    unembedded: dict[int, Memory]
    bad: list[tuple[int, str]]
    offset: int
    line: int


def _to_columns(records: list[Record | None], *, tokens: bool) -> _Columns:
    built = [r for r in records if r is not None]
    return _Columns(
        [at for at, r in enumerate(records) if r is not None], [r.id for r in built],
        [(r.scope.user_id, r.scope.agent_id, r.scope.session_id) for r in built], [r.body for r in built],
        [r.text for r in built], np.stack([r.vector for r in built]) if built else None,
        [(r.importance, r.timestamp, r.expires_at) for r in built], [_encode_fields(r.fields) for r in built],
        [" ".join(tokenize(r.text)) if r.text else None for r in built] if tokens else None,
    )  # fmt: skip


def _from_columns(columns: _Columns, size: int) -> list[Record | None]:
    records: list[Record | None] = [None] * size
    for i, at in enumerate(columns.at):
        importance, timestamp, expires_at = columns.numbers[i]
        records[at] = Record(id=columns.ids[i], scope=_shared_scope(*columns.scopes[i]), body=columns.bodies[i],
                             text=columns.texts[i], vector=columns.vectors[i] if columns.vectors is not None else None,
                             importance=importance, timestamp=timestamp, expires_at=expires_at,
                             fields=_decode_fields(columns.fields[i]))  # fmt: skip
    return records


def _joined_columns(parts: list[_Columns]) -> _Columns:
    """Consecutive parts' columns as one; ``at`` is left empty: joined columns are written encoded, which
    only a batch whose every record was built is."""

    def cat(name: str) -> list[Any]:
        return [value for part in parts for value in getattr(part, name)]

    vectors = [part.vectors for part in parts if part.vectors is not None]
    return _Columns(at=[], ids=cat("ids"), scopes=cat("scopes"), bodies=cat("bodies"), texts=cat("texts"),
                    vectors=np.concatenate(vectors) if vectors else None, numbers=cat("numbers"),
                    fields=cat("fields"), tokens=cat("tokens"))  # fmt: skip


def _child(path: str, offset: int, line: int, options: dict[str, Any], send: Connection) -> None:
    """The child's work: every batch from ``offset`` to the end of the file, then an empty one (or the error)."""
    reading = {name: value for name, value in options.items() if name != "tokens"}
    tokens = bool(options.get("tokens"))
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            while True:
                parsed = read_lines(handle, line, **reading)
                send.send(_Batch(_to_columns(parsed.records, tokens=tokens), len(parsed.records), parsed.unembedded,
                                 parsed.bad, parsed.offset, parsed.line))  # fmt: skip
                if not parsed.records and not parsed.bad:
                    return
                line = parsed.line
    except BrokenPipeError:
        return  # the parent stopped reading: it failed or was interrupted, and says so itself
    except Exception as exc:  # the parent reports it; a traceback here would only garble its progress bar
        send.send(f"{type(exc).__name__}: {exc}")
    finally:
        send.close()


def _receive(receive: Connection, child: subprocess.Popen[bytes]) -> _Batch | str | None:
    """The child's next batch; None if it ended without a word (killed, out of memory)."""
    while not receive.poll(0.2):
        if child.poll() is not None and not receive.poll(0):
            return None
    try:
        item: _Batch | str = receive.recv()
    except EOFError:
        return None
    return item


def _start_child(
    path: str, offset: int, line: int, options: dict[str, Any]
) -> tuple[subprocess.Popen[bytes], Connection]:
    # A new interpreter running this module, not multiprocessing's spawn: that one imports the parent's
    # main script again in the child, and a script calling the CLI without a __main__ guard would rerun.
    read_end, write_end = os.pipe()
    arguments = json.dumps({"path": path, "offset": offset, "line": line, "options": options, "fd": write_end})
    try:
        child = subprocess.Popen([sys.executable, "-m", "memkit.cli._reader", arguments], pass_fds=(write_end,),
                                 stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)  # the child's end: its closing is how this end learns the child is gone
    return child, Connection(read_end, writable=False)


_AHEAD_PARTS: Final = 10
"""Parts (of ``BATCH`` lines) the child may check ahead of the writes: two writes' worth."""


class ChildReader:
    """The child process checking the lines from ``offset`` with ``options`` (``read_lines``'s), started at
    once: it reads while this process opens the store (a second or so of imports and setup).

    The child sends parts of ``BATCH`` lines, which a thread here takes as they come (the child never waits
    to send); a write takes every part that has arrived, up to ``options["size"]`` lines. So the first write
    starts after one part, not ten, and the last one is short, while a write in the middle is a full batch.
    """

    def __init__(self, path: str, offset: int, line: int, options: dict[str, Any]) -> None:
        self.options = options
        self._size: int = options["size"]
        self._child, self._receive = _start_child(path, offset, line, {**options, "size": BATCH})
        self._parts: queue.Queue[_Batch | str | None] = queue.Queue(maxsize=_AHEAD_PARTS)
        self._closing = threading.Event()
        self._receiver = threading.Thread(target=self._take_parts, name="memkit-import-receiver", daemon=True)
        try:
            self._receiver.start()
        except BaseException:
            self._end_child()
            raise

    @classmethod
    async def start(cls, path: str, offset: int, line: int, options: dict[str, Any]) -> ChildReader:
        return await anyio.to_thread.run_sync(partial(cls, path, offset, line, options))

    def _take_parts(self) -> None:
        """The receiving thread's work: each part into the queue, until the last (or an error, or the end)."""
        while not self._closing.is_set():
            try:
                item: _Batch | str | None = _receive(self._receive, self._child)
            except Exception as exc:  # whatever it is, the import must end saying so, not wait for a part
                item = f"{type(exc).__name__}: {exc}"
            while not self._closing.is_set():
                try:
                    self._parts.put(item, timeout=0.2)
                    break
                except queue.Full:
                    continue
            if not _lines(item):
                return

    async def batches(self) -> AsyncGenerator[Parsed, None]:
        """``read_lines`` batches, as ``Parsed``, to the end of the file."""
        while True:
            items = [await anyio.to_thread.run_sync(self._parts.get)]
            while _lines(items[-1]) and sum(map(_lines, items)) < self._size:
                try:
                    items.append(self._parts.get_nowait())
                except queue.Empty:
                    break
            good = [item for item in items if isinstance(item, _Batch) and _lines(item)]
            if good:
                yield self._joined(good)
            last = items[-1]
            if isinstance(last, _Batch):
                if not _lines(last):
                    return  # the end of the file
                continue
            raise CliError(f"reading the file failed: {last or 'the reading process stopped'}",
                           "run the import again: it continues after the last batch written",
                           ExitCode.FAILED)  # fmt: skip

    def _joined(self, parts: list[_Batch]) -> Parsed:
        """The parts as one ``Parsed``: encoded rows for a store that takes them (when every line of the parts
        had its vector), else records."""
        if not self.options.get("tokens") or any(part.unembedded for part in parts):
            return joined([_parsed(part) for part in parts])
        bad = [line for part in parts for line in part.bad]
        columns = _joined_columns([part.columns for part in parts])
        encoded = None if columns.vectors is None else _encoded(columns)
        return Parsed([], {}, bad, parts[-1].offset, parts[-1].line, encoded=encoded)

    async def aclose(self) -> None:
        self._closing.set()
        await anyio.to_thread.run_sync(self._end_child)

    def _end_child(self) -> None:
        self._closing.set()
        self._child.kill()
        self._child.wait()
        if self._receiver.is_alive():
            self._receiver.join()  # it sees the child gone within 0.2 s
        self._receive.close()
        # A get() the event loop gave up on (Ctrl-C under asyncio cancels even a shielded wait) still blocks
        # a worker thread, which asyncio waits for at exit: wake it. Blocked, it means the queue is empty.
        with contextlib.suppress(queue.Full):
            self._parts.put_nowait(None)


def _lines(item: _Batch | str | None) -> int:
    """A part's lines; 0 for the end of the file, an error, or the child gone."""
    return item.size + len(item.bad) if isinstance(item, _Batch) else 0


def _encoded(columns: _Columns) -> Any:
    from memkit_backends.sqlite import EncodedRows  # only an import into SQLite asks for tokens

    if columns.vectors is None or columns.tokens is None:  # _joined asks only when both are there
        raise RuntimeError("encoded rows need every record's vector and tokens")
    return EncodedRows(columns.ids, columns.scopes, columns.bodies, columns.texts, columns.vectors,
                       columns.numbers, columns.fields, columns.tokens)  # fmt: skip


def _parsed(batch: _Batch) -> Parsed:
    return Parsed(_from_columns(batch.columns, batch.size), batch.unembedded, batch.bad, batch.offset, batch.line)


@asynccontextmanager
async def child_reader(path: str, offset: int, line: int, options: dict[str, Any]) -> AsyncIterator[ChildReader]:
    reader = await ChildReader.start(path, offset, line, options)
    try:
        yield reader
    finally:
        with anyio.CancelScope(shield=True):  # a child left running would read the whole file for nothing
            await reader.aclose()


if __name__ == "__main__":
    # ^C reaches the whole process group: the parent reports it and ends this process; a traceback of
    # its own here would only garble the parent's progress bar.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Checking lines makes no cycles (what it builds is freed as it is sent), so the cycle collector only
    # walked this process's objects for nothing: 4-8% of its time.
    gc.disable()
    # This module's own names, not __main__'s: what the child pickles must unpickle in the parent.
    from memkit.cli import _reader  # noqa: PLW0406 - see above

    _arguments = json.loads(sys.argv[1])
    _reader._child(_arguments["path"], _arguments["offset"], _arguments["line"], _arguments["options"],
                   Connection(_arguments["fd"], readable=False))  # fmt: skip
