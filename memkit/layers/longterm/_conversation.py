"""Conversation turns in long-term memory: appending them, and forgetting every copy of their text.

A turn's text lives in three places: its own record, the context of the next ``context_turns`` turns
(indexed with them), and the thread state's ``recent`` list (the context of turns not yet said).
Forgetting a turn removes it from all three, so it can never come back through recall.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from memkit.backend import Backend, Record, Scope
from memkit.layers._cas import update_kv, update_record
from memkit.layers._turns import (
    THREAD_NAMESPACE,
    TURN_KEY,
    ThreadState,
    contexts,
    thread_id,
    thread_scope,
    thread_state_key,
    thread_state_prefix,
    turn_key,
)
from memkit.layers.longterm._codec import decode, index_text, to_record
from memkit.layers.longterm._records import Memory

__all__ = ["claim_positions", "clip_context", "forget_thread_states", "remove_turn_text"]

_encode_state = msgspec.json.Encoder().encode
_decode_state = msgspec.json.Decoder(ThreadState).decode
Embed = Callable[[builtins.list[str]], Awaitable[Any]]
_WORD = re.compile(r"\S+")


def clip_context(content: str, words: int | None) -> str:
    """The last ``words`` words of a turn, as it serves as the next turns' context (a suffix of the content,
    so it is cut out of a context like the whole content is); the whole turn when ``words`` is None."""
    if words is None:
        return content
    starts = [m.start() for m in _WORD.finditer(content)]
    return content if len(starts) <= words else content[starts[-words] :]


async def claim_positions(
    backend: Backend,
    collection: str,
    scope: Scope,
    thread: str,
    contents: builtins.list[str],
    *,
    context_turns: int,
    context_words: int | None = None,
) -> tuple[int, builtins.list[str | None]]:
    """Claim the next positions of a thread with compare-and-set, so two processes appending to one thread
    never number two turns alike; returns the first position and each turn's context."""
    namespace, key = thread_state_key(collection, scope, thread)

    def claim(raw: bytes | None) -> tuple[bytes, tuple[int, builtins.list[str | None]]]:
        state = _decode_state(raw) if raw else ThreadState()
        first = state.next_position
        context = contexts(state, [clip_context(c, context_words) for c in contents], context_turns)
        state.next_position = first + len(contents)
        return _encode_state(state.stamped()), (first, context)

    return await update_kv(backend, namespace, key, claim)


async def remove_turn_text(
    backend: Backend,
    collection: str,
    turn: Memory,
    context_turns: int,
    embed: Embed,
    *,
    context_words: int | None = None,
) -> None:
    """After ``turn`` was deleted: drop its text from the following turns' context and from its thread (whole, or
    the clip of it that served as context)."""
    texts = list(dict.fromkeys([turn.content, clip_context(turn.content, context_words)]))
    thread, position = turn.metadata.get("thread"), turn.metadata.get("position")
    if not isinstance(thread, str) or not isinstance(position, int):
        return
    tid = thread_id(turn.scope, thread)
    later = [turn_key(tid, position + i) for i in range(1, context_turns + 1)]
    if later:
        page = await backend.scan(collection, turn.scope, filters={TURN_KEY: tuple(later)}, limit=len(later) * 2)
        for record in page.records:
            await _drop_from_context(backend, collection, record, texts, embed)
    namespace, key = thread_state_key(collection, turn.scope, thread)

    def drop(raw: bytes | None) -> tuple[bytes, None]:
        state = _decode_state(raw) if raw else ThreadState()
        state.recent = [text for text in state.recent if text not in texts]
        return _encode_state(state.stamped()), None

    if await backend.kv_get(namespace, key) is not None:
        await update_kv(backend, namespace, key, drop)


async def _drop_from_context(
    backend: Backend, collection: str, record: Record, texts: builtins.list[str], embed: Embed
) -> None:
    async def change(current: Record) -> tuple[Record, None]:
        memory = decode(current)
        # A context is earlier turns' contents joined by newlines, and a content may hold newlines itself:
        # cut the text out whole, not line by line.
        parts = [memory.context or ""]
        for text in texts:  # the whole content first, then its clip
            parts = [piece.strip("\n") for part in parts for piece in part.split(text)]
        updated = msgspec.structs.replace(memory, context="\n".join(p for p in parts if p) or None)
        [vector] = await embed([index_text(updated)])
        return to_record(updated, vector, current), None

    await update_record(backend, collection, record.id, record.scope, change)


async def forget_thread_states(backend: Backend, collection: str, scope: Scope) -> int:
    """Delete the thread state of every thread in ``scope`` (forget_all): positions and recent text."""
    from memkit.backend import scope_matches

    deleted = 0
    cursor = None
    while True:
        page = await backend.kv_scan(THREAD_NAMESPACE, prefix=thread_state_prefix(collection), cursor=cursor)
        for key, _ in page.items:
            found = thread_scope(collection, key)
            if found is not None and scope_matches(found[0], scope):
                deleted += await backend.kv_delete(THREAD_NAMESPACE, key)
        if page.next_cursor is None:
            return deleted
        cursor = page.next_cursor
