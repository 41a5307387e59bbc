"""The long-term layer's records: memories and recall hits.

Records are frozen msgspec Structs: cheap to build, encoded by encoders made
once, and evolvable (new fields get defaults, so old stored data still decodes).
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Final, Literal

import msgspec

from memkit._encodable import encodable
from memkit._time import utcnow
from memkit.backend import Scope, Weights
from memkit.errors import ValidationError

__all__ = [
    "KINDS",
    "LongTermConfig",
    "Memory",
    "MemoryKind",
    "MemoryPage",
    "RecallHit",
    "StoreResult",
    "SupersedeResult",
]

MemoryKind = str
"""One of ``KINDS`` or any custom string."""

KINDS: Final = ("fact", "preference", "decision", "knowledge", "task")


class Memory(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One long-term memory: a fact, preference, decision or piece of knowledge."""

    id: str
    scope: Scope
    kind: MemoryKind
    content: str
    importance: float = 0.5
    source: str | None = None
    created_at: datetime = msgspec.field(default_factory=utcnow)
    updated_at: datetime = msgspec.field(default_factory=utcnow)
    last_accessed_at: datetime | None = None
    access_count: int = 0
    expires_at: datetime | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    context: str | None = None
    """Neighbouring text (e.g. the previous conversation turn) indexed for recall, not shown as content."""
    superseded_by: str | None = None
    """The id of the memory that replaced this one (``supersede``): kept as history, left out of recall
    unless ``include_superseded=True``."""
    superseded_at: datetime | None = None


class RecallHit(msgspec.Struct, frozen=True, kw_only=True):
    """A recalled memory with the per-signal scores that explain its rank."""

    memory: Memory
    score: float
    similarity: float
    lexical: float
    recency: float
    importance: float
    neighbour: float = 0.0
    """Boost from the best neighbouring conversation turn (0 for memories that are not turns)."""
    session: float = 0.0
    """Boost from the best candidate turn of the same thread (``LongTermConfig.session_weight``)."""
    time: float = 0.0
    """Boost for a turn said inside a window of time the query names (``LongTermConfig.time_weight``)."""
    speaker: float = 0.0
    """Boost for a turn whose speaker the query names (``LongTermConfig.speaker_weight``)."""


class LongTermConfig(msgspec.Struct, frozen=True, kw_only=True):
    collection: str = "long_term"
    min_importance: float = 0.0
    """The importance gate: memories below it are not stored (the caller gets status "rejected")."""
    max_content_chars: int = 8_000
    """The longest memory ``store`` takes (a longer one is refused: a memory is a statement, not a document).
    Conversation turns are not limited by it: ``add_turns`` stores a long turn whole, indexed as passages."""
    dedupe: bool = True
    """False: no duplicate or near-duplicate checks, every stored memory is a new one (with an id of its own)."""
    merge_threshold: float = 0.92
    """Cosine similarity at or above which a new memory updates an existing one in the same scope."""
    default_k: int = 5
    max_k: int = 200
    min_score: float | None = None
    """Relevance threshold: hits scoring below it are dropped."""
    weights: Weights = msgspec.field(default_factory=Weights)
    """Defaults chosen on the LoCoMo dev split; see the README's "Retrieval quality"."""
    half_life_days: float = 30.0
    track_access: bool = True
    fusion: Literal["blend", "rrf"] = "blend"
    """How similarity and lexical scores combine: weighted blend (measured best) or rank fusion."""
    neighbour_weight: float = 0.5
    """Share of the best neighbouring turn's score a conversation turn gets (0 turns this off)."""
    neighbour_before: float = 0.75
    """How much of the turn just before counts toward that boost, against the turn just after it (1.0): the
    turn before is indexed with the turn as its context already. 0.75 measured on LoCoMo and LongMemEval dev
    (README)."""
    context_turns: int = 1
    """How many previous turns ``add_turns`` indexes with each turn as its context."""
    context_words: int | None = None
    """The last words of each previous turn kept as context (None: whole turns): a question ends the turn
    before its answer, and a long previous turn drowns the turn's own words."""
    passage_words: int | None = None
    """Words per passage of a turn longer than the embedder's window (each passage is a key of the turn, scored
    beside it; the turn is returned once, with its best score). None: from the embedder's ``window``, else 150."""
    session_weight: float = 0.0
    """Share of the best candidate turn of its thread a turn gets (sessions as units; 0 turns this off)."""
    time_weight: float = 0.1
    """Boost for turns said inside a window of time the query names ("last Saturday", "in May"), resolved
    against recall's ``as_of`` (0 turns this off). 0.1 measured on LoCoMo and LongMemEval dev (README)."""
    speaker_weight: float = 0.05
    """Boost for turns whose speaker the query names ("What did Caroline say about ..."; 0 turns this off).
    0.05 measured on LoCoMo and LongMemEval dev (README)."""
    drop_filler: bool = False
    """Leave words about the conversation itself ("mentioned", "previous chat", "remind") out of the query's
    lexical text (the dense signal still reads the whole question)."""
    feedback_terms: int = 10
    """Pseudo-relevance feedback for the lexical signal: this many words from a first pass's best 3 turns added
    to the query's text, the question's words weighing 3x (0: off). 10 measured on LoCoMo and LongMemEval dev
    (README): the words a question leaves out but its evidence shares (a session's topic) rank that session."""
    fact_keys: bool = True
    """Index the facts the offline extractor reads in each turn as extra keys of the turn (they lend it their
    similarity): on LoCoMo and LongMemEval dev both, better recall (README)."""

    def __post_init__(self) -> None:
        _check_config(self)


class StoreResult(msgspec.Struct, frozen=True, kw_only=True):
    status: Literal["stored", "merged", "duplicate", "rejected"]
    memory: Memory | None
    reason: str | None = None


class SupersedeResult(msgspec.Struct, frozen=True, kw_only=True):
    """What ``supersede`` did: how the new memory was stored, and the old memory as it is now (marked
    ``superseded_by`` the new one, or unchanged when nothing replaced it: the same text, or rejected)."""

    new: StoreResult
    old: Memory


class MemoryPage(msgspec.Struct, frozen=True, kw_only=True):
    memories: list[Memory]
    next_cursor: str | None


_MAX_K_LIMIT = 10_000
_MAX_HALF_LIFE_DAYS = 1_000_000
"""About 2,700 years: longer means no recency at all, and ``1e308`` days overflowed to an infinite half-life."""


def _check_config(config: LongTermConfig) -> None:
    """Every setting checked when the config is built, so a bad one fails here, not at the first recall."""

    def require(ok: bool, what: str) -> None:
        if not ok:
            raise ValidationError(f"LongTermConfig: {what}")

    def finite(value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        try:
            return math.isfinite(value)
        except OverflowError:  # an int too large for a float
            return False

    def integer(value: object, low: int, high: int) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high

    collection = config.collection
    require(isinstance(collection, str) and 0 < len(collection) <= 512 and "\x00" not in collection
            and encodable(collection), "collection must be a non-empty string of at most 512 characters, "
            "without NUL, valid Unicode")  # fmt: skip
    require(finite(config.min_importance) and 0 <= config.min_importance <= 1, "min_importance must be in 0..1")
    require(integer(config.max_content_chars, 1, 1_000_000), "max_content_chars must be an integer in 1..1,000,000")
    require(isinstance(config.dedupe, bool), "dedupe must be True or False")
    require(finite(config.merge_threshold) and 0 < config.merge_threshold <= 1, "merge_threshold must be in (0, 1]")
    require(integer(config.max_k, 1, _MAX_K_LIMIT), f"max_k must be an integer in 1..{_MAX_K_LIMIT}")
    require(integer(config.default_k, 1, config.max_k if integer(config.max_k, 1, _MAX_K_LIMIT) else 1),
            "default_k must be an integer in 1..max_k")  # fmt: skip
    require(config.min_score is None or finite(config.min_score), "min_score must be a finite number or None")
    require(finite(config.half_life_days) and 0 < config.half_life_days <= _MAX_HALF_LIFE_DAYS,
            f"half_life_days must be a number in (0, {_MAX_HALF_LIFE_DAYS:,}]")  # fmt: skip
    require(isinstance(config.track_access, bool), "track_access must be True or False")
    require(finite(config.neighbour_weight) and config.neighbour_weight >= 0, "neighbour_weight must be >= 0")
    require(finite(config.neighbour_before) and 0 <= config.neighbour_before <= 1, "neighbour_before must be in 0..1")
    require(integer(config.context_turns, 0, 20), "context_turns must be an integer in 0..20")
    require(config.context_words is None or integer(config.context_words, 1, 100_000),
            "context_words must be None or an integer in 1..100,000")  # fmt: skip
    require(config.passage_words is None or integer(config.passage_words, 16, 100_000),
            "passage_words must be None or an integer in 16..100,000")  # fmt: skip
    require(finite(config.session_weight) and config.session_weight >= 0, "session_weight must be >= 0")
    require(finite(config.time_weight) and config.time_weight >= 0, "time_weight must be >= 0")
    require(finite(config.speaker_weight) and config.speaker_weight >= 0, "speaker_weight must be >= 0")
    require(isinstance(config.fact_keys, bool), "fact_keys must be True or False")
    require(isinstance(config.drop_filler, bool), "drop_filler must be True or False")
    require(integer(config.feedback_terms, 0, 100), "feedback_terms must be an integer in 0..100")
    require(isinstance(config.fusion, str) and config.fusion in ("blend", "rrf"), "fusion must be 'blend' or 'rrf'")
    require(isinstance(config.weights, Weights), "weights must be a memkit.Weights")
