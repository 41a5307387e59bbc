"""``mem.observe()``'s background writer: finished turns queued, what is worth remembering written later.

``observe`` returns as soon as a turn is queued; a task of the event loop (``_background``) takes turns one
at a time and writes what they state: facts into long-term memory (``memkit.extract.FactWriter``: add,
update, supersede or ignore, each decision an event) and relations into the graph. The queue is bounded:
a full queue makes ``observe`` wait for room, or raise ``WriterBusyError`` when asked not to wait; a turn is
never dropped. A failure goes to ``on_error`` and the log, never nowhere. ``flush()`` waits until the
queue is empty (for everyone, or one user: read-after-write); closing the client drains it.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from memkit._background import BackgroundTask
from memkit._repr import short_repr
from memkit._validation import check_text, encodable
from memkit.errors import ContentError, NotOpenError, ValidationError, WriterBusyError
from memkit.layers.shortterm._messages import ROLES

if TYPE_CHECKING:
    from memkit.extract import FactEvent, ObservedTurn
    from memkit.layers.graph import KnowledgeGraph
    from memkit.layers.longterm import LongTermMemory
    from memkit.llm import LLM

__all__ = ["ObserveConfig", "Observer", "check_messages", "turn_writer"]

log = logging.getLogger("memkit")
_MAX_MESSAGES: Final = 1_000


class ObserveConfig(msgspec.Struct, frozen=True, kw_only=True):
    max_pending: int = 1_000
    """Turns queued at most; one more makes ``observe`` wait (or raise with ``wait=False``)."""
    graph: bool = True
    """Also extract relations of the user's messages into the knowledge graph."""
    on_event: Callable[[FactEvent], None] | None = None
    """Called with every decision the writer makes (added, updated, superseded, ignored, and why)."""
    on_error: Callable[[ObservedTurn, Exception], None] | None = None
    """Called with a turn whose writing failed, and the error (also logged)."""

    def __post_init__(self) -> None:
        if isinstance(self.max_pending, bool) or not isinstance(self.max_pending, int) or self.max_pending < 1:
            raise ValidationError("ObserveConfig.max_pending must be an integer >= 1")


def check_messages(messages: object) -> list[dict[str, Any]]:
    """A finished turn: a non-empty list of message dicts (OpenAI or Anthropic shape), each with a role a
    session takes and content that is text, blocks or absent; no NUL in its text (the writer stores facts
    in long-term memory, which refuses it). Blocks a session refuses (images, thinking) are the session's to
    refuse: the writer reads the text. Without these checks a bad turn was queued, then dropped by the
    writer without a word."""
    if isinstance(messages, dict | str) or not isinstance(messages, Sequence) or not messages:
        raise ValidationError("messages must be a non-empty list of message dicts, e.g. [{'role': 'user', ...}]")
    if len(messages) > _MAX_MESSAGES:
        raise ValidationError(f"observe takes at most {_MAX_MESSAGES} messages per turn, got {len(messages)}")
    for at, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ValidationError(f"messages[{at}] must be a dict with a 'role', got {short_repr(message)}")
        if message["role"] not in ROLES:
            raise ContentError(
                f"messages[{at}]'s role must be one of {sorted(ROLES)}, got {short_repr(message['role'])}"
            )
        _check_observed_content(message.get("content"), f"messages[{at}]")
    return [dict(m) for m in messages]


def _check_observed_content(content: object, what: str) -> None:
    texts: list[object] = [content]
    if isinstance(content, list):
        texts = [block.get("text") if isinstance(block, dict) else block for block in content]
    elif content is not None and not isinstance(content, str):
        raise ContentError(f"{what}'s content must be a string or a list of blocks, got {type(content).__name__}")
    if any(isinstance(text, str) and "\x00" in text for text in texts):
        raise ContentError(f"{what} contains a NUL character, which long-term memory (where observed facts go) "
                           "does not store: remove it")  # fmt: skip
    if not all(encodable(text) for text in texts if isinstance(text, str)):  # else the writer dropped the turn
        raise ContentError(f"{what} contains a lone surrogate (text that is not valid Unicode), which "
                           "long-term memory (where observed facts go) does not store: decode it with "
                           "errors='replace'")  # fmt: skip


class Observer:
    """The queue and the task that empties it. ``write(turn)`` does the work and returns its events."""

    def __init__(self, write: Callable[[ObservedTurn], Awaitable[list[FactEvent]]], config: ObserveConfig) -> None:
        self._write = write
        self.config = config
        self._send: MemoryObjectSendStream[ObservedTurn]
        self._receive: MemoryObjectReceiveStream[ObservedTurn]
        # Unbounded: ``max_pending`` is kept by counting places, so a place is taken before a session is
        # written and the turn then queued without waiting (a stream's own bound cannot be reserved).
        self._send, self._receive = anyio.create_memory_object_stream[Any](math.inf)
        self._queued = 0
        self._reserved = 0
        """Places taken by calls still writing their session; with ``_queued`` at most ``max_pending``."""
        self._counts_changed = anyio.Event()
        self._closing = False
        self._pending: Counter[str | None] = Counter()
        self._changed = anyio.Event()
        self._task: BackgroundTask | None = None

    def start(self) -> None:
        self._task = BackgroundTask.start(self._run)

    @property
    def pending(self) -> int:
        return sum(self._pending.values())

    async def reserve(self, *, wait: bool) -> None:
        """A place in the queue for one turn, waited for or refused (``WriterBusyError``) when it is full;
        ``put`` the turn or ``release`` the place after. Refused once the client is closing."""
        while True:
            if self._task is None or self._closing:
                raise NotOpenError("the client is closing, so this observe() was refused; the turn was not "
                                   "queued or written")  # fmt: skip
            if self._queued + self._reserved < self.config.max_pending:
                break
            if not wait:
                raise WriterBusyError(
                    f"the background writer has {self.config.max_pending} turns queued (ObserveConfig.max_pending);"
                    " nothing was queued or written: retry, or call observe(..., wait=True) to wait for room"
                )
            await self._counts_changed.wait()
        self._reserved += 1

    def release(self) -> None:
        """Give back a reserved place that no turn took."""
        self._reserved -= 1
        self._notify_counts()

    def put(self, turn: ObservedTurn) -> None:
        """Queue ``turn`` in its reserved place (never waits). Closing waits for reserved places to be filled,
        so the queue is closed here only when that wait ran past ``close_timeout``."""
        check_text(turn.user_id, "user_id")
        try:
            self._send.send_nowait(turn)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise NotOpenError("the client closed (close_timeout ran out) before this observe() could queue "
                               "its turn; its session, if given, has it") from None  # fmt: skip
        self._reserved -= 1
        self._queued += 1
        self._pending[turn.user_id] += 1
        self._notify_counts()

    def _notify_counts(self) -> None:
        self._counts_changed.set()
        self._counts_changed = anyio.Event()

    async def flush(self, user_id: str | None = None) -> None:
        """Wait until every queued turn (of ``user_id``, when given) has been written."""
        while (self._pending[user_id] if user_id is not None else self.pending) > 0:
            changed = self._changed
            await changed.wait()

    async def aclose(self) -> int:
        """Write what is queued, then stop; returns how many turns were still queued if cancelled meanwhile."""
        if self._task is None:
            return 0
        self._closing = True
        self._notify_counts()  # calls waiting for room are refused
        try:
            while self._reserved:  # calls writing their session: their turns are queued before the queue closes
                await self._counts_changed.wait()
            self._send.close()  # the task ends once the queue is empty
            await self._task.wait()
        finally:
            self._send.close()
            left = self.pending
            await self._task.stop()
            self._task = None
            self._receive.close()
        return left

    async def _run(self) -> None:
        async with self._receive:
            async for turn in self._receive:
                self._queued -= 1  # taken off the queue: its place is free (as a bounded stream's would be)
                self._notify_counts()
                try:
                    events = await self._write(turn)
                except Exception as exc:  # one bad turn must not stop the writer, nor vanish
                    log.exception("memkit: observe: writing a turn of user %r failed", turn.user_id)
                    if self.config.on_error is not None:
                        self._call(self.config.on_error, turn, exc)
                else:
                    if self.config.on_event is not None:
                        for event in events:
                            self._call(self.config.on_event, event)
                finally:
                    self._done(turn.user_id)

    def _done(self, user_id: str | None) -> None:
        self._pending[user_id] -= 1
        if self._pending[user_id] <= 0:
            del self._pending[user_id]
        self._changed.set()
        self._changed = anyio.Event()

    @staticmethod
    def _call(callback: Callable[..., None], *args: Any) -> None:
        try:
            callback(*args)
        except Exception:  # the user's callback failing must not stop the writer
            log.exception("memkit: observe: callback %r failed", callback)


def turn_writer(
    long_term: LongTermMemory, graph: KnowledgeGraph, llm: LLM | None, config: ObserveConfig
) -> Callable[[ObservedTurn], Awaitable[list[FactEvent]]]:
    """What the writer does with a turn: facts into long-term memory (by the client's model when it has one,
    else offline), then the user's messages into the graph (a graph failure is logged; the facts stand)."""
    from memkit.extract import FactWriter, HeuristicFactExtractor, LLMFactExtractor
    from memkit.extract._heuristic import message_text

    extractor = LLMFactExtractor(llm) if llm is not None else HeuristicFactExtractor()
    facts = FactWriter(long_term, extractor)

    async def write(turn: ObservedTurn) -> list[FactEvent]:
        events = await facts.write(turn)
        if config.graph and turn.user_id is not None:
            try:
                for message in turn.messages:
                    text = message_text(message)  # a string, or the text of Anthropic-shaped blocks
                    if message.get("role") == "user" and text.strip():
                        provenance = [f"session:{turn.session_id}"] if turn.session_id else []
                        await graph.ingest(text, user_id=turn.user_id, provenance=provenance)
            except Exception:  # the graph is a second reading of the turn: its failure must not undo the facts
                log.exception("memkit: observe: the graph could not take a turn of user %r", turn.user_id)
        return events

    return write
