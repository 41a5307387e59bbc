"""The checkpoint layer: save an agent's whole state after each turn, load it after a crash.

Storage, in the key-value face (namespace ``memkit.checkpoints``), per thread (``key_of(user, agent, thread)``)::

    <thread>||cp:<checkpoint id>   one blob per checkpoint (``_format``), written once, never changed
    <thread>||index                the thread's history: every listed checkpoint's id, parent, time, size,
                                   format and metadata, oldest first; changed only by compare-and-set

A save writes its blob first, then appends to the index by compare-and-set. A crash before the index
write leaves an orphan blob that nothing lists (``load`` and ``list`` never see it; ``prune`` deletes it
once it is ``orphan_grace_s`` old); a crash after it leaves a complete checkpoint. Either way the previous
checkpoint still loads. Two clients saving to one thread both land: the loser of the compare-and-set
reads the winner's index and appends on top of it (its parent, by default, becomes the winner's).
"""

from __future__ import annotations

import builtins
import logging
import math
import secrets
import time
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar, cast

import anyio.to_thread
import msgspec

from memkit._time import from_epoch
from memkit._validation import MAX_ID_CHARS, check_decode_type, check_int, check_metadata, check_owner, check_text
from memkit.backend import Backend
from memkit.errors import (
    BackendError,
    ConflictError,
    CorruptDataError,
    NotFoundError,
    NotOpenError,
    ScopeError,
    ValidationError,
)
from memkit.layers._cas import update_kv
from memkit.layers._keys import key_of
from memkit.layers.checkpoints._agent import AgentState, capture, resume
from memkit.layers.checkpoints._config import CheckpointConfig, CheckpointInfo
from memkit.layers.checkpoints._format import Compression, Sealer, Serializer, decode_value, encode_value
from memkit.layers.shortterm import ShortTermSession
from memkit.layers.working import TaskState

__all__ = ["NAMESPACE", "Checkpoints"]

log = logging.getLogger("memkit")
T = TypeVar("T")
NAMESPACE = "memkit.checkpoints"
_INDEX_VERSION = 1
_OFF_LOOP_BYTES = 1 << 20
"""Sealing or opening a larger blob (hashing, compression, encryption: all release the GIL) runs in a thread."""
_MISSING: Any = object()


_LAST_MOMENT = 253_402_300_799.0
"""9999-12-31T23:59:59Z: later times cannot be a datetime."""


class _Entry(msgspec.Struct, kw_only=True, omit_defaults=True):
    id: str
    created_at: float
    size_bytes: int
    serializer: str
    parent_id: str | None = None
    compression: str | None = None
    encrypted: bool = False
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class _Index(msgspec.Struct, kw_only=True):
    version: int = _INDEX_VERSION
    entries: list[_Entry] = msgspec.field(default_factory=list)
    """Oldest first: the order the saves reached the index."""


_encode_index = msgspec.msgpack.Encoder().encode
_decode_index = msgspec.msgpack.Decoder(_Index).decode


class _Thread(msgspec.Struct, frozen=True):
    prefix: str
    label: str

    @property
    def index_key(self) -> str:
        return self.prefix + "index"

    @property
    def blob_prefix(self) -> str:
        return self.prefix + "cp:"

    def location(self, checkpoint_id: str) -> bytes:
        """What a blob's encryption is bound to: it decrypts only where it was saved."""
        return f"{NAMESPACE}\x00{self.blob_prefix}{checkpoint_id}".encode()


def _new_checkpoint_id() -> str:
    """Microseconds since the epoch (14 hex digits: ids sort by time, and ``prune`` reads an orphan's age
    from its id without loading it), then 40 random bits."""
    return f"{time.time_ns() // 1000:014x}{secrets.token_hex(5)}"


def _id_seconds(checkpoint_id: str) -> float | None:
    try:
        return int(checkpoint_id[:14], 16) / 1e6
    except ValueError:
        return None


def _info(entry: _Entry) -> CheckpointInfo:
    return CheckpointInfo(
        id=entry.id, parent_id=entry.parent_id, created_at=from_epoch(entry.created_at), size_bytes=entry.size_bytes,
        serializer=cast(Serializer, entry.serializer), compression=cast("Compression | None", entry.compression),
        encrypted=entry.encrypted,
        metadata=entry.metadata,
    )  # fmt: skip


class Checkpoints:
    """``mem.checkpoints``: ``save(thread_id, state)`` after each turn, ``load(thread_id)`` to resume."""

    name = "checkpoints"
    needs = frozenset({"kv"})

    def __init__(self, backend: Backend, config: CheckpointConfig | None = None) -> None:
        if config is not None and not isinstance(config, CheckpointConfig):
            raise ValidationError(f"checkpoints must be a CheckpointConfig or None, got {type(config).__name__}")
        self.backend = backend
        self.config = config or CheckpointConfig()
        self._sealer = Sealer(
            compression=self.config.resolved_compression, min_compress_bytes=self.config.min_compress_bytes,
            key=self.config.encryption_key, max_bytes=self.config.max_bytes,
        )  # fmt: skip

    async def setup(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    # -- the agent's state ------------------------------------------------------------------------------
    async def capture(
        self,
        session: ShortTermSession | None = None,
        task: TaskState | None = None,
        state: object = None,
        turn: int = 0,
    ) -> AgentState:
        """The conversation, the task state and your own ``state`` as one ``AgentState`` to ``save``."""
        return await capture(session, task, state, turn)

    async def resume(
        self, agent_state: AgentState, session: ShortTermSession | None = None, task: TaskState | None = None
    ) -> None:
        """Restore ``session`` and ``task`` from a loaded ``AgentState``."""
        await resume(agent_state, session, task)

    # -- saving -----------------------------------------------------------------------------------------
    async def save(
        self,
        thread_id: str,
        state: object,
        *,
        metadata: dict[str, Any] | None = None,
        parent_id: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> str:
        """Save ``state`` (an ``AgentState`` or any value msgspec encodes) as the thread's newest checkpoint;
        returns its id. ``parent_id`` (default: the thread's latest) must be listed in the thread."""
        thread = _thread(thread_id, user_id, agent_id)
        meta = check_metadata(metadata)
        if parent_id is not None:
            check_text(parent_id, "parent_id")
            await self._listed(thread, parent_id)  # fails before anything is written
        raw = encode_value(state, self.config.serializer)
        if len(raw) > self.config.max_bytes:
            raise ValidationError(f"the state is {len(raw)} bytes encoded; the limit is {self.config.max_bytes} "
                                  "(CheckpointConfig.max_bytes)")  # fmt: skip
        checkpoint_id = _new_checkpoint_id()
        seal = partial(self._sealer.seal, raw, self.config.serializer, agent_state=isinstance(state, AgentState),
                       location=thread.location(checkpoint_id))  # fmt: skip
        header, blob = await anyio.to_thread.run_sync(seal) if len(raw) > _OFF_LOOP_BYTES else seal()
        entry = _Entry(id=checkpoint_id, created_at=time.time(), size_bytes=len(blob), serializer=header.serializer,
                       compression=header.compression, encrypted=header.encrypted, metadata=meta)  # fmt: skip
        await self.backend.kv_set(NAMESPACE, thread.blob_prefix + checkpoint_id, blob)
        try:
            dropped = await update_kv(
                self.backend, NAMESPACE, thread.index_key, self._appending(thread, entry, parent_id)
            )
        except (NotFoundError, ConflictError, CorruptDataError):
            await self._forget(thread, [checkpoint_id])  # the blob of a save that did not land
            raise
        await self._forget(thread, dropped)
        return checkpoint_id

    def _appending(
        self, thread: _Thread, entry: _Entry, parent_id: str | None
    ) -> Callable[[bytes | None], tuple[bytes, builtins.list[str]]]:
        """The index change of a save: append ``entry`` (its parent the latest unless given), then apply
        ``keep_last``; the result is the ids dropped, whose blobs are deleted after the write."""

        def change(current: bytes | None) -> tuple[bytes, builtins.list[str]]:
            index = _read_index(current, thread)
            if parent_id is not None and all(e.id != parent_id for e in index.entries):
                raise NotFoundError(f"checkpoint {parent_id!r} is not in thread {thread.label} (pruned meanwhile?)")
            parent = parent_id if parent_id is not None else (index.entries[-1].id if index.entries else None)
            entries = [*index.entries, msgspec.structs.replace(entry, parent_id=parent)]
            keep = self.config.keep_last
            dropped = entries[:-keep] if keep is not None and len(entries) > keep else []
            kept = entries[len(dropped) :]
            return _encode_index(_Index(entries=kept)), [e.id for e in dropped]

        return change

    # -- loading ----------------------------------------------------------------------------------------
    async def load(
        self,
        thread_id: str,
        checkpoint_id: str | None = None,
        *,
        type: type[T] | Any = Any,
        default: Any = _MISSING,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> T | Any:
        """The thread's latest checkpoint (or ``checkpoint_id``), decoded as ``type`` when given (a Struct, a
        dataclass...; an ``AgentState`` loads as one by default). With nothing to load: ``default`` when
        given, else NotFoundError. A checkpoint that cannot be decoded raises SerializationError."""
        thread = _thread(thread_id, user_id, agent_id)
        if checkpoint_id is not None:
            check_text(checkpoint_id, "checkpoint_id")
        check_decode_type(type)  # before the read: msgspec's TypeError came after it
        found = await self._fetch(thread, checkpoint_id)
        if found is None:
            if default is not _MISSING:
                return default
            what = "no checkpoint" if checkpoint_id is None else f"no checkpoint {checkpoint_id!r}"
            raise NotFoundError(f"thread {thread.label} has {what}")
        checkpoint_id, blob = found
        opening = partial(self._sealer.open, blob, location=thread.location(checkpoint_id),
                          accept_plaintext=self.config.accept_plaintext)  # fmt: skip
        header, raw = await anyio.to_thread.run_sync(opening) if len(blob) > _OFF_LOOP_BYTES else opening()
        as_type = AgentState if type is Any and header.agent_state else type
        return decode_value(raw, header.serializer, as_type)

    async def _fetch(self, thread: _Thread, checkpoint_id: str | None) -> tuple[str, bytes] | None:
        """The id and blob to load; None when the thread does not list it. A blob pruned between reading
        the index and reading it is looked for again (the latest is then a newer one)."""
        for _ in range(5):
            index = await self._index(thread)
            wanted = checkpoint_id if checkpoint_id is not None else (index.entries[-1].id if index.entries else None)
            if wanted is None or all(e.id != wanted for e in index.entries):
                return None
            blob = await self.backend.kv_get(NAMESPACE, thread.blob_prefix + wanted)
            if blob is not None:
                return wanted, blob
        raise CorruptDataError(f"checkpoint {wanted!r} of thread {thread.label} is listed but its data is gone")

    async def _index(self, thread: _Thread) -> _Index:
        return _read_index(await self.backend.kv_get(NAMESPACE, thread.index_key), thread)

    async def _listed(self, thread: _Thread, checkpoint_id: str) -> None:
        if all(e.id != checkpoint_id for e in (await self._index(thread)).entries):
            raise NotFoundError(f"thread {thread.label} has no checkpoint {checkpoint_id!r}")

    # -- forgetting -------------------------------------------------------------------------------------
    async def prune(
        self, thread_id: str, keep_last: int, *, user_id: str | None = None, agent_id: str | None = None
    ) -> int:
        """Keep the newest ``keep_last`` checkpoints of the thread (0: none); returns how many listed ones
        were deleted. Also deletes orphan blobs (of saves that died) older than ``orphan_grace_s``."""
        thread = _thread(thread_id, user_id, agent_id)
        keep = check_int(keep_last, "keep_last", 0, 2**62)
        dropped: builtins.list[str] = []
        if len((await self._index(thread)).entries) > keep:

            def change(current: bytes | None) -> tuple[bytes, builtins.list[str]]:
                entries = _read_index(current, thread).entries
                cut = max(len(entries) - keep, 0)
                return _encode_index(_Index(entries=entries[cut:])), [e.id for e in entries[:cut]]

            dropped = await update_kv(self.backend, NAMESPACE, thread.index_key, change)
        await self._forget(thread, dropped)
        await self._sweep_orphans(thread)
        return len(dropped)

    async def delete(self, thread_id: str, *, user_id: str | None = None, agent_id: str | None = None) -> int:
        """Forget the whole thread; returns how many checkpoints it listed (an index that cannot be read is
        replaced, and every checkpoint of the thread deleted: how many).

        The index is emptied by compare-and-set and only the blobs it listed are deleted, then orphans older
        than ``orphan_grace_s``: a blind delete of every key let a save in flight re-create an index listing
        a blob already gone (its latest checkpoint then never loaded). A younger orphan may be such a save's;
        the next ``prune`` or ``delete`` sweeps it once it is old enough."""
        thread = _thread(thread_id, user_id, agent_id)
        wiped = 0
        try:
            await self._index(thread)
        except CorruptDataError:  # what the error says to do: every blob goes, before the index (no save can
            wiped = int(await self.backend.kv_delete_prefix(NAMESPACE, thread.blob_prefix))  # land while unreadable)
        damaged = False

        def empty(current: bytes | None) -> tuple[bytes, builtins.list[str]]:
            nonlocal damaged
            try:
                listed = [e.id for e in _read_index(current, thread).entries]
            except CorruptDataError:  # what the error says to do: no save can land on it, so every blob goes
                damaged, listed = True, []
            return _encode_index(_Index(entries=[])), listed

        dropped = await update_kv(self.backend, NAMESPACE, thread.index_key, empty)
        if damaged:
            return wiped
        await self._forget(thread, dropped)
        await self._sweep_orphans(thread)
        return len(dropped)

    async def _forget(self, thread: _Thread, ids: builtins.list[str]) -> None:
        """Delete blobs no index lists any more. The save or prune that dropped them has landed, so a failure
        here is logged, not raised: the blobs are orphans ``prune`` deletes later."""
        for checkpoint_id in ids:
            try:
                await self.backend.kv_delete(NAMESPACE, thread.blob_prefix + checkpoint_id)
            except (BackendError, NotOpenError) as exc:  # closed meanwhile: prune deletes it later
                log.warning(
                    "memkit: checkpoint %s of thread %s stays as an orphan: %s", checkpoint_id, thread.label, exc
                )

    async def _sweep_orphans(self, thread: _Thread) -> None:
        """Delete blobs no index lists, saved more than ``orphan_grace_s`` ago. The index is read after the
        scan, so a blob whose save lands meanwhile is either listed or too young to be judged."""
        cutoff = time.time() - self.config.orphan_grace_s
        old: builtins.list[str] = []
        cursor: str | None = None
        while True:
            page = await self.backend.kv_scan(NAMESPACE, prefix=thread.blob_prefix, limit=16, cursor=cursor)
            for key, _ in page.items:
                checkpoint_id = key[len(thread.blob_prefix) :]
                saved = _id_seconds(checkpoint_id)
                if saved is not None and saved <= cutoff:
                    old.append(checkpoint_id)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        if old:
            listed = {e.id for e in (await self._index(thread)).entries}
            await self._forget(thread, [c for c in old if c not in listed])

    # -- reading the history (last: ``list`` would shadow the builtin in the annotations below it) ------
    async def list(
        self, thread_id: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> builtins.list[CheckpointInfo]:
        """The thread's checkpoints, newest first (an unknown thread has none)."""
        thread = _thread(thread_id, user_id, agent_id)
        return [_info(entry) for entry in reversed((await self._index(thread)).entries)]


def _thread(thread_id: str, user_id: str | None, agent_id: str | None) -> _Thread:
    """The thread's keys; ids checked like every scope id (a user's threads are never another's)."""
    thread_id = check_text(thread_id, "thread_id", MAX_ID_CHARS, error=ScopeError)
    user_id, agent_id = check_owner(user_id, agent_id)
    label = " ".join([repr(thread_id)] + [f"{k}={v!r}" for k, v in (("user_id", user_id), ("agent_id", agent_id)) if v])
    return _Thread(key_of(user_id, agent_id, thread_id) + "||", label)


def _read_index(raw: bytes | None, thread: _Thread) -> _Index:
    if raw is None:
        return _Index()
    try:
        index = _decode_index(raw)
    except msgspec.DecodeError as exc:
        raise CorruptDataError(f"the checkpoint index of thread {thread.label} cannot be read ({exc}); nothing was "
                               "changed; delete() the thread to start it again") from exc  # fmt: skip
    if index.version > _INDEX_VERSION:
        raise CorruptDataError(f"the checkpoint index of thread {thread.label} was written by a newer memkit "
                               f"(index format {index.version}); upgrade memkit")  # fmt: skip
    for entry in index.entries:  # decodable but damaged (the index has no checksum): never a raw ValueError later
        if not (math.isfinite(entry.created_at) and 0 <= entry.created_at < _LAST_MOMENT and entry.size_bytes >= 0):
            raise CorruptDataError(f"the checkpoint index of thread {thread.label} is damaged (entry {entry.id!r}); "
                                   "nothing was changed; delete() the thread to start it again")  # fmt: skip
    return index
