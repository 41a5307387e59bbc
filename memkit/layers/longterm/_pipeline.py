"""The blended ranking: the store's fused score, keys folded in, then boosts from what surrounds a turn.

    score = fused (its best key's, if higher) + neighbour + session + time + speaker

- neighbour: ``neighbour_weight`` x the best score of the turn just after it in its thread, or of the turn just
  before it times ``neighbour_before`` (LoCoMo's questions often match the turn before the answer, but that
  turn is also indexed as the answer's context, so its lift counts it twice);
- session: ``session_weight`` x the best score of any candidate turn of its thread (the session as a unit:
  turns of a session that holds strong evidence rise together);
- time: ``time_weight`` when the turn was said inside a window of time the query names ("last Saturday",
  "two weeks ago", "in May"), resolved against the recall's ``as_of`` (``_when``);
- speaker: ``speaker_weight`` when the query names the turn's speaker ("What did Caroline say about ...":
  of two turns on the topic, hers is the evidence).

Boosts are computed over the store's best candidates (deeper than ``k`` when any boost is on), so a turn must
first be a candidate to be lifted. With every boost at 0 the ranking is the store's own.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import msgspec

from memkit.backend import Backend, Hit, Query
from memkit.layers._turns import TURN_KEY, turn_key
from memkit.layers.longterm._codec import speaker_of
from memkit.layers.longterm._feedback import FEEDBACK_DOCS, expanded, without_filler
from memkit.layers.longterm._passages import fold_keys
from memkit.text import tokenize

__all__ = ["Boosts", "Ranked", "blend_rank"]


class Boosts(NamedTuple):
    neighbour: float
    session: float
    time: float
    speaker: float


Ranked = list[tuple[Hit, Boosts]]
_NONE = Boosts(0.0, 0.0, 0.0, 0.0)
_WINDOW_DEPTH = 100
"""Candidates read when the query names a time: the turns of that day compete with the whole history."""


def _neighbour_keys(key: str) -> tuple[str, str]:
    thread, _, position = key.rpartition("#")
    return turn_key(thread, int(position) - 1), turn_key(thread, int(position) + 1)


@functools.lru_cache(maxsize=1024)  # a conversation has few speakers, asked for at every recall
def _speaker_words(speaker: str) -> frozenset[str]:
    return frozenset(tokenize(speaker))


def _names_speaker(asked: frozenset[str], speaker: str | None) -> bool:
    return speaker is not None and not asked.isdisjoint(_speaker_words(speaker))


async def blend_rank(
    backend: Backend,
    collection: str,
    query: Query,
    k: int,
    *,
    neighbour_weight: float,
    neighbour_before: float = 1.0,
    session_weight: float,
    time_weight: float,
    speaker_weight: float = 0.0,
    windows: list[tuple[float, float]],
    keys: bool,
    drop_filler: bool = False,
    feedback_terms: int = 0,
) -> Ranked:
    """Top ``k`` by the fused score plus the boosts, each hit with its boosts (the query's text first rid
    of conversational filler and expanded by feedback from a first pass's turns when asked: ``_feedback``; a
    conversation's turns share a topic's words, stored statements need not)."""
    asked = frozenset(tokenize(query.text)) if speaker_weight > 0 and query.text else frozenset()
    if drop_filler and query.text:
        query = msgspec.structs.replace(query, text=without_filler(query.text))
    timed = time_weight > 0 and bool(windows)
    boosted = neighbour_weight > 0 or session_weight > 0 or timed or bool(asked)
    depth = max(2 * k, 20, _WINDOW_DEPTH if timed else 0) if boosted else k
    candidates: list[Hit] | None = None
    if feedback_terms > 0 and query.text:
        # The first pass is asked as deep as the second: when nothing is fed back (no turn among its best
        # hits shares a word with the query, as in a store of statements) it is the answer, and a recall
        # costs one query, not two (9.9 -> 6 ms at 10k memories on sqlite://).
        first = await backend.query(collection, msgspec.structs.replace(query, k=max(depth, FEEDBACK_DOCS)))
        turns = [hit for hit in first[:FEEDBACK_DOCS] if TURN_KEY in hit.record.fields]
        grown = expanded(query, turns, feedback_terms)
        if grown is query:
            candidates = first[:depth]
        query = grown
    deeper = msgspec.structs.replace(query, k=depth)
    if candidates is None:
        candidates = await backend.query(collection, deeper)
    if keys:
        candidates = await fold_keys(backend, collection, deeper, candidates)
    if not boosted:
        return [(hit, _NONE) for hit in candidates[:k]]
    base = {str(hit.record.fields[TURN_KEY]): hit.scores.final for hit in candidates if TURN_KEY in hit.record.fields}
    if neighbour_weight > 0 and base:
        candidates = candidates + await _missing_neighbours(backend, collection, query, base)
    best_in_thread: dict[str, float] = {}
    for key, score in base.items():
        thread = key.rpartition("#")[0]
        best_in_thread[thread] = max(best_in_thread.get(thread, score), score)
    rescored = []
    for hit in candidates:
        turn = hit.record.fields.get(TURN_KEY)
        boosts = _NONE
        if turn is not None:
            turn = str(turn)
            before, after = _neighbour_keys(turn)
            neighbour = max(neighbour_before * base.get(before, 0.0), base.get(after, 0.0))
            session = best_in_thread.get(turn.rpartition("#")[0], 0.0)
            named = bool(asked) and _names_speaker(asked, speaker_of(hit.record))
            boosts = Boosts(neighbour_weight * neighbour, session_weight * session, 0.0, speaker_weight * named)
        if timed and any(start <= hit.record.timestamp < end for start, end in windows):
            boosts = boosts._replace(time=time_weight)
        rescored.append((hit.scores.final + sum(boosts), hit, boosts))
    rescored.sort(key=lambda item: (-item[0], item[1].record.id))
    return [(hit, boosts) for _, hit, boosts in rescored[:k]]


async def _missing_neighbours(backend: Backend, collection: str, query: Query, base: dict[str, float]) -> list[Hit]:
    """The candidates' neighbouring turns that are not candidates themselves, scored by the store (filtered to
    their exact turn keys); their scores join ``base``."""
    missing = sorted({n for key in base for n in _neighbour_keys(key)} - set(base))
    if not missing:
        return []
    filters = {**query.filters, TURN_KEY: missing}
    extra = await backend.query(collection, msgspec.structs.replace(query, k=len(missing), filters=filters))
    base.update({str(hit.record.fields[TURN_KEY]): hit.scores.final for hit in extra})
    return extra
