"""One conversation under a token budget: ``add`` messages, ``to_messages()`` to send.

``add`` writes the message and returns; it never waits for a fold. When the session grows past
``compact_at`` of its budget, a fold starts in the background (one at a time per session in a process):
the summariser runs with no lock held, and its result is applied by compare-and-set only if the turns it
read are still the oldest ones (``_state``). Messages added meanwhile stay, in order. A failing fold
changes nothing: it is logged, passed to ``on_error``, and tried again after a pause that doubles.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

import anyio
import anyio.lowlevel
import anyio.to_thread
import msgspec

from memkit._background import BackgroundTask
from memkit._repr import short_repr
from memkit._time import new_id
from memkit.errors import ConflictError, SummarizerError, ValidationError
from memkit.layers._cas import ATTEMPTS, backoff
from memkit.layers.shortterm._messages import Message, MessageInput, check_tool_order, parse_messages
from memkit.layers.shortterm._render import (
    AnthropicMessages,
    fit_window,
    message_tokens,
    to_anthropic,
    to_openai,
    truncate_text,
)
from memkit.layers.shortterm._state import (
    SESSION_NAMESPACE,
    FoldPlan,
    SessionSnapshot,
    SessionState,
    decode_state,
    encode_state,
    plan_fold,
)
from memkit.tokens import Tokenizer

if TYPE_CHECKING:
    from memkit.layers.shortterm._layer import ShortTermMemory

__all__ = ["ShortTermSession"]

log = logging.getLogger("memkit")

_FIRST_PAUSE_S = 1.0
_LONGEST_PAUSE_S = 300.0


_LARGE_CHARS = 64 * 1024


async def _count(message: Message, tokenizer: Tokenizer) -> int:
    """A message's tokens; a large one counted in a worker thread (a megabyte takes a fifth of a second)."""
    if len(message.content) + sum(len(c.arguments) for c in message.tool_calls) < _LARGE_CHARS:
        return message_tokens(message, tokenizer)
    return await anyio.to_thread.run_sync(message_tokens, message, tokenizer)


class _Moved(Exception):
    """The turns a fold summarised are no longer the oldest: another writer folded first."""


class ShortTermSession:
    """Get one with ``mem.short_term.session("chat-1", user_id="ada")``; the same arguments give the same
    session, in this process and in any other on the same storage."""

    def __init__(self, layer: ShortTermMemory, key: str, label: str) -> None:
        self._layer = layer
        self._key = key
        self._label = label
        self._write_lock = anyio.Lock(fast_acquire=True)
        self._fold_lock = anyio.Lock(fast_acquire=True)
        self._state: SessionState | None = None
        self._raw: bytes | None = None
        self._fold: BackgroundTask | None = None
        self._pause_s = 0.0
        self._retry_at = 0.0

    # -- writing ----------------------------------------------------------------------------------------
    async def add(self, message: MessageInput) -> None:
        """Add one message (OpenAI or Anthropic shape); ``system`` messages are pinned, never folded."""
        await self.add_many([message])

    async def add_many(self, messages: Sequence[MessageInput]) -> None:
        """Add messages in order, all or none (each is checked before anything is written)."""
        config, tokenizer = self._layer.config, self._layer.tokenizer
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
            raise ValidationError(f"add_many takes a list of messages, got {type(messages).__name__}")
        parsed = [m for given in messages for m in parse_messages(given, config.max_message_chars)]
        counted = [msgspec.structs.replace(m, tokens=await _count(m, tokenizer)) for m in parsed]

        def append(state: SessionState) -> SessionState:
            check_tool_order(state.messages, counted)  # against what is stored now, so nothing is half-written
            return state.appended(counted)

        async with self._write_lock:
            await self._write(append)
        self._maybe_fold()

    async def snapshot(self) -> SessionSnapshot:
        """The whole session as a msgspec value (for checkpoints): pinned messages, summary, the rest."""
        state = await self._load()
        return SessionSnapshot(pinned=state.pinned, messages=state.messages, summary=state.summary, folded=state.folded)

    async def restore(self, snapshot: SessionSnapshot) -> None:
        """Make the session exactly ``snapshot`` (what was stored is replaced; every message is checked first)."""
        if not isinstance(snapshot, SessionSnapshot):
            raise ValidationError(f"restore takes a SessionSnapshot, got {type(snapshot).__name__}")
        try:  # msgspec does not check a Struct built in code; a wrong field would make the session unreadable
            snapshot = msgspec.convert(msgspec.to_builtins(snapshot), SessionSnapshot)
            msgspec.msgpack.encode(snapshot.summary)
        except (msgspec.ValidationError, TypeError, UnicodeEncodeError) as exc:
            raise ValidationError(f"the snapshot is not a valid SessionSnapshot: {exc}") from exc
        config, tokenizer = self._layer.config, self._layer.tokenizer
        checked = [
            m
            for given in [*snapshot.pinned, *snapshot.messages]
            for m in parse_messages(given, config.max_message_chars)
        ]
        counted = [
            msgspec.structs.replace(m, tokens=message_tokens(msgspec.structs.replace(m, tokens=0), tokenizer))
            for m in checked
        ]
        check_tool_order([], [m for m in counted if m.role != "system"])
        summary_tokens = tokenizer.count(snapshot.summary)
        restored = SessionState(
            summary=snapshot.summary, summary_tokens=summary_tokens, folded=snapshot.folded, tokens=summary_tokens,
            epoch=new_id(), tokenizer=tokenizer.name,
        ).appended(counted)  # fmt: skip
        async with self._write_lock:
            await self._write(lambda _: msgspec.structs.replace(restored))

    async def clear(self) -> None:
        """Forget the session: messages, summary, everything."""
        async with self._write_lock:
            await self._layer.backend.kv_delete(SESSION_NAMESPACE, self._key)
            self._state, self._raw = None, None

    async def _load(self) -> SessionState:
        raw = await self._layer.backend.kv_get(SESSION_NAMESPACE, self._key)
        tokenizer = self._layer.tokenizer
        self._raw = raw
        if raw is None:  # a new life of the session (never written, cleared, or expired)
            self._state = SessionState(epoch=new_id(), tokenizer=tokenizer.name)
        else:
            self._state = decode_state(raw, self._label, tokenizer)
        return self._state

    async def _write(self, change: Callable[[SessionState], SessionState]) -> SessionState:
        """Apply ``change`` to the stored state by compare-and-set, again on top of any other writer's."""
        backend, ttl = self._layer.backend, self._layer.config.ttl_s
        for attempt in range(ATTEMPTS):
            current = self._state if self._state is not None else await self._load()
            new = change(current)
            new.writer = new_id()
            raw = encode_state(new)
            if await backend.kv_replace(SESSION_NAMESPACE, self._key, raw, expected=self._raw, ttl_s=ttl):
                self._state, self._raw = new, raw
                return new
            await self._load()
            # Lost to another writer: a random, growing pause, or a busy writer in another process that reads
            # its state from cache wins every race against one that must reload first.
            await backoff(attempt)
        raise ConflictError(
            f"the short-term session {self._label} kept changing under concurrent writers; nothing was changed"
        )

    # -- reading ----------------------------------------------------------------------------------------
    @overload
    async def to_messages(self, format: Literal["openai"] = "openai") -> list[dict[str, Any]]: ...
    @overload
    async def to_messages(self, format: Literal["anthropic"]) -> AnthropicMessages: ...

    async def to_messages(
        self, format: Literal["openai", "anthropic"] = "openai"
    ) -> list[dict[str, Any]] | AnthropicMessages:
        """The session within its token budget, ready to send. ``"anthropic"`` gives the messages with the
        system prompt as ``.system``: ``client.messages.create(system=msgs.system, messages=msgs, ...)``."""
        if format not in ("openai", "anthropic"):
            raise ValidationError(f"format must be 'openai' or 'anthropic', got {short_repr(format)}")
        state = await self._load()
        config, tokenizer = self._layer.config, self._layer.tokenizer
        window = fit_window(
            [m.content for m in state.pinned], state.summary, state.messages, config.max_tokens, tokenizer
        )
        return to_openai(window) if format == "openai" else to_anthropic(window)

    async def history(self) -> list[Message]:
        """The messages not folded yet (pinned system messages first), in full."""
        state = await self._load()
        return [*state.pinned, *state.messages]

    async def summary(self) -> str:
        """The rolling summary of what was folded ("" before the first fold)."""
        return (await self._load()).summary

    # -- folding ----------------------------------------------------------------------------------------
    def _plan(self, state: SessionState) -> FoldPlan | None:
        config = self._layer.config
        if state.tokens <= config.compact_at * config.max_tokens:
            return None
        target = int(config.fold_to * config.max_tokens) - config.summary_limit + state.summary_tokens
        return plan_fold(state, keep_last=config.keep_last, target_tokens=target)

    def _maybe_fold(self) -> None:
        """Start a background fold when the session is over its threshold. Only the cheap test here (this
        runs in every add); the fold itself finds what to fold, or that nothing may be folded yet."""
        state, config = self._state, self._layer.config
        if self._fold is not None or state is None or anyio.current_time() < self._retry_at:
            return
        if state.tokens > config.compact_at * config.max_tokens and len(state.messages) > config.keep_last:
            self._fold = BackgroundTask.start(self._fold_in_background)
            self._layer.running.add(self)

    async def _fold_in_background(self) -> None:
        folded = False
        try:
            folded = await self.compact()
            self._pause_s = 0.0
        except Exception as exc:  # reported, never raised into an add
            self._pause_s = min(max(self._pause_s * 2, _FIRST_PAUSE_S), _LONGEST_PAUSE_S)
            self._retry_at = anyio.current_time() + self._pause_s
            self._layer.report(self._label, exc)
        finally:
            self._fold = None
            self._layer.running.discard(self)
        if folded:
            self._maybe_fold()  # more may have arrived while it ran

    async def compact(self) -> bool:
        """Fold now if the session is over ``compact_at`` of its budget; True when something was folded.
        Raises ``SummarizerError`` when the summariser fails (nothing is changed then)."""
        async with self._fold_lock:
            plan = self._plan(await self._load())
            if plan is None:
                return False
            folding = (self._state or SessionState()).messages[: plan.count]
            summary = await self._summarize(plan.previous_summary, folding)
            tokens = self._layer.tokenizer.count(summary)

            def apply(state: SessionState) -> SessionState:
                if (
                    state.epoch != plan.epoch
                    or state.summary != plan.previous_summary
                    or tuple(m.seq for m in state.messages[: plan.count]) != plan.seqs
                ):
                    raise _Moved
                return state.folded_into(plan.count, summary, tokens)

            try:
                async with self._write_lock:
                    await self._write(apply)
            except _Moved:
                return False
            return True

    async def _summarize(self, previous: str, folding: list[Message]) -> str:
        config, layer = self._layer.config, self._layer
        try:
            with anyio.fail_after(config.summary_timeout_s):
                summary = await layer.summarizer.summarize(previous, folding, max_tokens=config.summary_limit,
                                                           tokenizer=layer.tokenizer)  # fmt: skip
        except SummarizerError:
            raise
        except TimeoutError as exc:
            raise SummarizerError(
                f"the summariser took longer than {config.summary_timeout_s} s (summary_timeout_s)"
            ) from exc
        except Exception as exc:
            raise SummarizerError(f"the summariser failed: {type(exc).__name__}: {exc}") from exc
        if not isinstance(summary, str) or not summary.strip():
            raise SummarizerError(
                f"the summariser returned {short_repr(summary)}, not a summary; the turns stay unfolded"
            )
        try:
            msgspec.msgpack.encode(summary)
        except UnicodeEncodeError as exc:
            raise SummarizerError(f"the summary cannot be stored: {exc}") from exc
        # The bound holds whatever summariser runs (LLMSummarizer and ExtractiveSummarizer keep it themselves).
        return truncate_text(summary, config.summary_limit, layer.tokenizer)

    async def wait_idle(self) -> None:
        """Wait until background folding of this session (if any runs) has finished."""
        while self._fold is not None:
            await self._fold.wait()

    async def _stop(self) -> None:
        """Cancel a running fold (at close): nothing is lost, the turns stay unfolded until the next one."""
        if self._fold is not None:
            await self._fold.stop()

    def __repr__(self) -> str:
        return f"ShortTermSession({self._label})"
