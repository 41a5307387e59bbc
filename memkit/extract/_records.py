"""What fact extraction reads, finds and decides: observed turns, candidate facts, decisions, events."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final, Literal, get_args

import msgspec

from memkit.backend import Scope
from memkit.layers.longterm import Memory

__all__ = [
    "ACTIONS",
    "FACT_KINDS",
    "Action",
    "Decision",
    "Extraction",
    "Fact",
    "FactEvent",
    "FactKind",
    "ObservedTurn",
    "Skipped",
]

FactKind = Literal["preference", "dislike", "fact", "plan", "decision", "remember", "correction"]
"""preference / dislike: what someone likes or does not; fact: about a person and their relations (names,
family, work, home, health, what they have and did); plan / decision: what they will do or chose;
remember: an explicit "remember that ..."; correction: a statement that replaces an earlier one."""
FACT_KINDS: Final[tuple[str, ...]] = get_args(FactKind)

Action = Literal["add", "update", "supersede", "noop"]
ACTIONS: Final[tuple[str, ...]] = get_args(Action)


class ObservedTurn(msgspec.Struct, frozen=True, kw_only=True):
    """A finished turn: OpenAI-shaped messages (user, assistant, tool calls and results) and whose it is."""

    messages: Sequence[Mapping[str, Any]]
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    at: datetime | None = None
    """When it was said (default: now): the facts' ``created_at``, which recency is measured from."""
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    """Copied onto every memory written from this turn (a turn or message id, say)."""

    @property
    def scope(self) -> Scope:
        return Scope(user_id=self.user_id, agent_id=self.agent_id, session_id=self.session_id)


class Fact(msgspec.Struct, frozen=True, kw_only=True):
    """A candidate memory read from one message of a turn."""

    text: str
    """One standalone sentence, in the third person ("The user's sister Bea lives in Porto")."""
    kind: FactKind
    importance: float
    message_index: int
    """Which message of the turn it was read from."""
    memory_kind: str = "fact"
    """The long-term kind it is stored as (``preference``, ``decision``, ``fact``, ...): a correction or a
    "remember that" is stored as the kind of what it states."""
    subject: str | None = None
    """Who it is about, as written (the speaker's name, "the user", or another person's name)."""
    slot: str | None = None
    """What it answers for its subject (``lives_in``, ``works_at``, ``taste:sushi``, ...): a newer fact with the
    same subject and slot and another value replaces the older one when ``functional`` or a correction."""
    value: str | None = None
    functional: bool = False
    """The subject has one value of ``slot`` at a time (a home, an employer, a view of sushi)."""
    quote: str = ""
    """The words it was read from."""


class Skipped(msgspec.Struct, frozen=True, kw_only=True):
    """A message or sentence that yielded no fact, and why (filler, a question, nothing classifiable, ...)."""

    message_index: int
    text: str
    reason: str


class Extraction(msgspec.Struct, frozen=True, kw_only=True):
    """An extractor's reading of one turn. ``prompt``: what a model was sent (None for the heuristic)."""

    facts: list[Fact] = msgspec.field(default_factory=list)
    skipped: list[Skipped] = msgspec.field(default_factory=list)
    extractor: str = "heuristic"
    prompt: list[dict[str, Any]] | None = None
    notes: list[str] = msgspec.field(default_factory=list)
    """What went wrong and what was done instead (a model that failed, a budget that ran out)."""


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """What to do with one fact, against the memories recalled for it."""

    fact: int
    """The fact's position in the list reconciled."""
    action: Action
    target: str | None = None
    """The existing memory updated, superseded or already holding the fact (noop)."""
    text: str | None = None
    """The wording to store (an update's merged text); None: the fact's own."""
    reason: str = ""
    decided_by: str = "heuristic"


class FactEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One decision, as applied: what was added, updated, superseded or ignored, and why.

    ``memory``: the memory written (add, update, supersede) or already holding the fact (noop); ``previous``:
    the memory superseded (now marked ``superseded_by``) or as it was before an update."""

    action: Literal["add", "update", "supersede", "noop", "ignore"]
    reason: str
    scope: Scope
    fact: Fact | None = None
    memory: Memory | None = None
    previous: Memory | None = None
    decided_by: str = "heuristic"
    message_index: int | None = None
    text: str = ""
    """The fact's text, or the words ignored."""
