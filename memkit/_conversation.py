"""Conversation turns as long-term memories, and recall that uses their neighbours.

A turn is stored as ``Speaker: text`` with the previous turn(s) as its
context: indexed for retrieval (a question often matches the turn before the
answer), never shown as content. Turns of one thread are numbered, so recall
can give a turn part of its neighbours' scores: the turn after a strong match
is often the one that holds the answer. On the LoCoMo dev split this took
recall@10 from 74.7 to 77.5 (see the README).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

import msgspec

from memkit._backend import Backend, Hit, Query
from memkit._records import Scope

__all__ = ["TURN_KEY", "ThreadState", "Turn", "neighbour_rerank", "thread_state_key", "turn_key"]

TURN_KEY: Final = "turn"
"""Record field holding ``thread#position`` for turns."""
THREAD_NAMESPACE: Final = "memkit.threads"


class Turn(msgspec.Struct, frozen=True, kw_only=True):
    """One conversation turn to remember."""

    speaker: str
    text: str
    at: datetime | None = None
    """When it was said (default: now); recency is measured from it."""
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class ThreadState(msgspec.Struct, kw_only=True):
    """Where a thread stands: kept in the backend's key-value face so another process continues it."""

    next_position: int = 0
    recent: list[str] = msgspec.field(default_factory=list)


def thread_state_key(collection: str, scope: Scope, thread: str) -> tuple[str, str]:
    parts = (collection, scope.user_id or "", scope.agent_id or "", thread)
    return THREAD_NAMESPACE, "\x1f".join(parts)


def turn_key(thread: str, position: int) -> str:
    return f"{thread}#{position}"


def _neighbour_keys(key: str) -> tuple[str, str]:
    thread, _, position = key.rpartition("#")
    return turn_key(thread, int(position) - 1), turn_key(thread, int(position) + 1)


async def neighbour_rerank(
    backend: Backend, collection: str, query: Query, k: int, weight: float
) -> list[tuple[Hit, float]]:
    """Top ``k`` of ``score + weight * max(score of the previous turn, of the next turn)``.

    Two store queries: the best candidates, then (filtered to exact turn keys) their missing
    neighbours, so every candidate's neighbours are scored by the store itself.
    """
    candidates = await backend.query(collection, msgspec.structs.replace(query, k=max(2 * k, 20)))
    base = {hit.record.fields[TURN_KEY]: hit.scores.final for hit in candidates if TURN_KEY in hit.record.fields}
    if weight <= 0 or not base:
        return [(hit, 0.0) for hit in candidates[:k]]
    missing = sorted({n for key in base for n in _neighbour_keys(str(key))} - set(base))
    if missing:
        filters = {**query.filters, TURN_KEY: missing}
        extra = await backend.query(collection, msgspec.structs.replace(query, k=len(missing), filters=filters))
        base.update({hit.record.fields[TURN_KEY]: hit.scores.final for hit in extra})
        candidates = candidates + extra
    rescored = []
    for hit in candidates:
        key = hit.record.fields.get(TURN_KEY)
        boost = weight * max((base.get(n, 0.0) for n in _neighbour_keys(str(key))), default=0.0) if key else 0.0
        rescored.append((hit.scores.final + boost, hit, boost))
    rescored.sort(key=lambda item: (-item[0], item[1].record.id))
    return [(hit, boost) for _, hit, boost in rescored[:k]]


def turn_content(turn: Turn) -> str:
    return f"{turn.speaker}: {turn.text}"


def contexts(state: ThreadState, contents: Sequence[str], context_turns: int) -> list[str | None]:
    """The context of each new turn: the ``context_turns`` turns before it, older ones first."""
    history = list(state.recent)
    result: list[str | None] = []
    for content in contents:
        window = history[-context_turns:] if context_turns else []
        result.append("\n".join(window) if window else None)
        history.append(content)
    state.recent = history[-max(context_turns, 1) :]
    return result
