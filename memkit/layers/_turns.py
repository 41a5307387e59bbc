"""Conversation turns as long-term memories.

A turn is stored as ``Speaker: text`` with the previous turn(s) as its
context: indexed for retrieval (a question often matches the turn before the
answer), never shown as content. Turns of one thread are numbered, so recall
can give a turn part of its neighbours' scores (see ``memkit.layers.longterm._ranking``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

import msgspec

from memkit.backend import Scope

__all__ = ["TURN_KEY", "ThreadState", "Turn", "contexts", "thread_state_key", "turn_content", "turn_key"]

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
