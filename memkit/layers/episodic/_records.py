"""The episodic layer's records: episodes (what an agent did, how it went, what it learned) and hits.

Frozen msgspec Structs, like every memkit record: encoders are built once, and new fields get defaults
so episodes stored by an older memkit still decode.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any, Final, Literal

import msgspec

from memkit.backend import Scope, Weights
from memkit.errors import ValidationError

__all__ = [
    "OUTCOMES",
    "Action",
    "Episode",
    "EpisodeHit",
    "EpisodePage",
    "EpisodicConfig",
    "LessonsSource",
    "Outcome",
]

Outcome = Literal["success", "failure", "partial"]
OUTCOMES: Final = ("success", "failure", "partial")
LessonsSource = Literal["caller", "model", "heuristic"]


class Action(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One tool call the agent made during an episode."""

    tool: str
    arguments: Any = msgspec.field(default_factory=dict)
    """Anything msgspec encodes; stored (and returned by ``get``) as its JSON form."""
    result: str | None = None
    """A short summary of what the tool returned (not the whole payload: it is stored with every episode)."""
    ok: bool = True
    latency_s: float | None = None
    error: str | None = None


class Episode(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A finished task: the situation that triggered it, the actions taken, the outcome and its lessons.

    ``id``, ``scope`` and ``lessons_source`` are set by ``record()`` (an episode passed in has none);
    ``started_at`` / ``ended_at`` default to the moment it is recorded, and ``importance`` to how instructive
    the episode is (see ``EpisodicMemory``). ``get()`` returns the episode with all of them filled in.
    """

    trigger: str
    outcome: Outcome
    actions: list[Action] = msgspec.field(default_factory=list)
    feedback: str | None = None
    lessons: list[str] = msgspec.field(default_factory=list)
    started_at: datetime | None = None
    ended_at: datetime | None = None
    tags: list[str] = msgspec.field(default_factory=list)
    importance: float | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    id: str | None = None
    scope: Scope | None = None
    lessons_source: LessonsSource | None = None
    """Who wrote the lessons: the caller, the model, or the heuristic (None: there are none)."""


class EpisodeHit(msgspec.Struct, frozen=True, kw_only=True):
    """A similar past episode with the per-signal scores that explain its rank."""

    episode: Episode
    score: float
    similarity: float
    lexical: float
    recency: float
    importance: float


class EpisodePage(msgspec.Struct, frozen=True, kw_only=True):
    episodes: list[Episode]
    next_cursor: str | None


class EpisodicConfig(msgspec.Struct, frozen=True, kw_only=True):
    collection: str = "episodic"
    keep_last: int | None = None
    """Retention: the most episodes kept per user and agent (sessions counted together); recording one more
    deletes the oldest (by ``ended_at``). None keeps them all. Below the limit a record pays one ``count``;
    at it, a newest-first scan of ``keep_last`` records (measured at 1,000: ~3 ms on memory://, ~5 ms on
    sqlite://, against 0.15 and 1 ms without retention)."""
    ttl: timedelta | None = None
    """Retention: an episode expires this long after it ended (never found again; ``sweep_expired`` deletes)."""
    weights: Weights = msgspec.field(
        default_factory=lambda: Weights(similarity=0.5, lexical=0.5, recency=0.05, importance=0.15)
    )
    """Long-term's blend with more weight on importance: between two similar situations, the instructive
    episode (a failure with lessons) should come first."""
    half_life_days: float = 90.0
    """Experience ages slower than conversation: a lesson from last quarter still applies."""
    default_k: int = 5
    max_k: int = 100
    min_score: float | None = None
    max_trigger_chars: int = 4_000
    max_text_chars: int = 2_000
    """Longest feedback, lesson, action result or error message."""
    max_actions: int = 200
    max_lessons: int = 5
    """Most lessons the model or the heuristic derives for one episode."""
    lesson_max_tokens: int = 400
    """Bound on the model's answer when it derives lessons."""
    llm_timeout_s: float = 30.0
    """Longest wait for the model's lessons; past it the episode is recorded without them."""

    def __post_init__(self) -> None:
        _check_config(self)


def _check_config(config: EpisodicConfig) -> None:
    """Every setting checked when the config is built, so a bad one fails here, not at the first record."""

    def require(ok: bool, what: str) -> None:
        if not ok:
            raise ValidationError(f"EpisodicConfig: {what}")

    def integer(value: object, low: int, high: int) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high

    def finite(value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        try:
            return math.isfinite(value)
        except OverflowError:  # an int too large for a float
            return False

    def positive(value: object, high: float) -> bool:
        return finite(value) and 0 < value <= high  # type: ignore[operator]  # finite: a real number

    name = config.collection
    require(isinstance(name, str) and 0 < len(name) <= 512 and "\x00" not in name and name.isprintable(),
            "collection must be a printable, non-empty string of at most 512 characters")  # fmt: skip
    require(config.keep_last is None or integer(config.keep_last, 1, 10_000_000),
            "keep_last must be None or an integer in 1..10,000,000")  # fmt: skip
    ttl = config.ttl
    require(ttl is None or (isinstance(ttl, timedelta) and timedelta(0) < ttl <= timedelta(days=3_650_000)),
            "ttl must be None or a positive timedelta")  # fmt: skip
    require(isinstance(config.weights, Weights), "weights must be a memkit.Weights")
    require(positive(config.half_life_days, 1_000_000), "half_life_days must be a number in (0, 1,000,000]")
    require(integer(config.max_k, 1, 10_000), "max_k must be an integer in 1..10,000")
    require(integer(config.default_k, 1, config.max_k if integer(config.max_k, 1, 10_000) else 1),
            "default_k must be an integer in 1..max_k")  # fmt: skip
    require(config.min_score is None or finite(config.min_score), "min_score must be a finite number or None")
    for field, high in (("max_trigger_chars", 100_000), ("max_text_chars", 100_000), ("max_actions", 10_000),
                        ("max_lessons", 100), ("lesson_max_tokens", 100_000)):  # fmt: skip
        require(integer(getattr(config, field), 1, high), f"{field} must be an integer in 1..{high:,}")
    require(positive(config.llm_timeout_s, 3_600), "llm_timeout_s must be a number of seconds in (0, 3600]")
