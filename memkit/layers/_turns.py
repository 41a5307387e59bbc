"""Conversation turns, shared by the layers that keep a dialogue (long-term now, short-term next).

A turn is stored as ``Speaker: text`` with the previous turn(s) as its context: indexed for retrieval
(a question often matches the turn before the answer), never shown as content. Turns of one thread are
numbered, so recall can give a turn part of its neighbours' scores
(``memkit.layers.longterm._ranking``).

Threads are numbered per scope and thread name: the same thread name in two sessions of one user is
two threads (the session is part of the key), so their numbering and context never mix.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

import msgspec

from memkit._time import new_id
from memkit._validation import check_moment, check_text
from memkit.backend import Scope
from memkit.errors import ContentError, ValidationError
from memkit.layers._keys import key_of, parse_key

__all__ = [
    "THREAD_NAMESPACE",
    "TURN_KEY",
    "ThreadState",
    "Turn",
    "check_turn",
    "contexts",
    "thread_id",
    "thread_state_key",
    "thread_scope",
    "thread_state_prefix",
    "turn_content",
    "turn_key",
]

TURN_KEY: Final = "turn"
"""Record field holding ``<thread id>#<position>`` for turns."""
THREAD_NAMESPACE: Final = "memkit.threads"


class Turn(msgspec.Struct, frozen=True, kw_only=True):
    """One conversation turn to remember."""

    speaker: str
    text: str
    at: datetime | None = None
    """When it was said (default: now); recency is measured from it."""
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


def check_turn(turn: Turn) -> None:
    """A turn's own fields (its ``Speaker: text`` content is checked as content by the layer): msgspec does
    not check types when a Turn is built, and ``Turn(speaker="Sam", text=None)`` once stored "Sam: None"."""
    check_text(turn.speaker, "Turn.speaker")
    if not isinstance(turn.text, str):
        raise ContentError(f"Turn.text must be a string, got {type(turn.text).__name__}")
    if not turn.text.strip():
        raise ContentError("Turn.text is empty")
    if turn.at is not None:
        check_moment(turn.at, "Turn.at")
    if turn.metadata is not None and not isinstance(turn.metadata, dict):
        raise ValidationError(f"Turn.metadata must be a dict, got {type(turn.metadata).__name__}")


class ThreadState(msgspec.Struct, kw_only=True):
    """Where a thread stands: kept in the backend's key-value face so another process continues it."""

    next_position: int = 0
    recent: list[str] = msgspec.field(default_factory=list)
    """The last turns' contents, the context of the next turn; emptied of a turn when it is forgotten."""
    writer: str = ""
    """Unique per write: two appenders that computed the same state never both win its compare-and-set."""

    def stamped(self) -> ThreadState:
        self.writer = new_id()
        return self


def thread_id(scope: Scope, thread: str) -> str:
    """A thread's identity inside a collection: its scope and name, injectively."""
    return key_of(scope.user_id, scope.agent_id, scope.session_id, thread)


def thread_state_key(collection: str, scope: Scope, thread: str) -> tuple[str, str]:
    return THREAD_NAMESPACE, key_of(collection) + "|" + thread_id(scope, thread)


def thread_state_prefix(collection: str) -> str:
    return key_of(collection) + "|"


def thread_scope(collection: str, key: str) -> tuple[Scope, str] | None:
    """The scope and thread name of a thread-state key of ``collection`` (None for another's)."""
    prefix = thread_state_prefix(collection)
    if not key.startswith(prefix):
        return None
    try:
        user, agent, session, thread = parse_key(key[len(prefix) :])
    except ValueError:
        return None
    return Scope(user_id=user, agent_id=agent, session_id=session), thread or ""


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
