"""Episodes <-> backend records: what is indexed, what is filterable, and how instructive an episode is.

The indexed text (vector and words alike) is the trigger and the lessons: a new situation is compared with
the situations of the past and with what they taught. ``owner`` is an exact key of the user and agent, for
retention: a scope in a query matches more widely (``Scope(user_id="u")`` also matches ``u``'s records with
an agent), and ``keep_last`` must count one owner's episodes, no one else's.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Final

import msgspec

from memkit._time import epoch
from memkit.backend import Fields, Hit, Record, Scope
from memkit.errors import CorruptDataError
from memkit.layers._keys import key_of
from memkit.layers.episodic._records import Episode, EpisodeHit, LessonsSource, Outcome

__all__ = ["decode", "importance_of", "index_text", "owner_key", "owner_of", "to_hit", "to_record"]

OWNER_FIELD: Final = "owner"
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(Episode).decode

_OUTCOME_BASE: Final[dict[Outcome, float]] = {"success": 0.3, "partial": 0.5, "failure": 0.6}
"""What went wrong teaches more than what went right: a failure starts higher than a success."""
_LESSON_BONUS: Final[dict[LessonsSource, float]] = {"caller": 0.25, "model": 0.25, "heuristic": 0.15}
"""Lessons someone (or a model) wrote count more than the heuristic's restatement of an error."""
_FEEDBACK_BONUS: Final = 0.05


def importance_of(episode: Episode) -> float:
    """How instructive ``episode`` is, in 0..1, unless the caller said: a failure with lessons > a failure
    without > a partial > a success with lessons > a plain success."""
    if episode.importance is not None:
        return episode.importance
    score = _OUTCOME_BASE[episode.outcome]
    if episode.lessons and episode.lessons_source is not None:
        score += _LESSON_BONUS[episode.lessons_source]
    if episode.feedback:
        score += _FEEDBACK_BONUS
    return min(score, 1.0)


def index_text(episode: Episode) -> str:
    return "\n".join([episode.trigger, *episode.lessons])


def owner_of(scope: Scope) -> Scope:
    """The retention group of a scope: its user and agent (the sessions of one user are counted together)."""
    return Scope(user_id=scope.user_id, agent_id=scope.agent_id)


def owner_key(scope: Scope) -> str:
    return key_of(scope.user_id, scope.agent_id)


def _fields(episode: Episode, scope: Scope) -> Fields:
    fields: Fields = {"outcome": episode.outcome, OWNER_FIELD: owner_key(scope)}
    if episode.tags:
        fields["tags"] = tuple(episode.tags)
    return fields


def to_record(episode: Episode, vector: Any, ttl: timedelta | None) -> Record:
    """The record of a finished, checked episode (its id, scope and times set by the layer)."""
    if episode.id is None or episode.scope is None or episode.ended_at is None:
        raise ValueError("memkit bug: an episode reached storage without its id, scope or end time")
    ended = episode.ended_at
    try:
        expires_at = None if ttl is None else epoch(ended + ttl)
    except OverflowError:  # past the year 9999: as good as never
        expires_at = None
    return Record(
        id=episode.id,
        scope=episode.scope,
        body=_encode(episode),
        text=index_text(episode),
        vector=vector,
        importance=importance_of(episode),
        timestamp=epoch(ended),
        expires_at=expires_at,
        fields=_fields(episode, episode.scope),
    )


def decode(record: Record) -> Episode:
    try:
        return _decode(record.body)
    except msgspec.DecodeError as exc:
        raise CorruptDataError(f"stored episode {record.id!r} cannot be decoded: {exc}") from exc


def to_hit(hit: Hit) -> EpisodeHit:
    scores = hit.scores
    return EpisodeHit(episode=decode(hit.record), score=scores.final, similarity=scores.similarity,
                      lexical=scores.lexical, recency=scores.recency, importance=scores.importance)  # fmt: skip
