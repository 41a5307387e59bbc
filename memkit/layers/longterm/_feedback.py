"""Query-side rules for the lexical signal: conversational filler left out, and pseudo-relevance feedback.

- Filler: a question to a memory names the conversation itself ("what did I mention in our previous chat",
  "remind me"): those words are in every turn's vicinity and in none of the evidence, so they only add noise
  to BM25. They are dropped from the query's text (the dense vector still sees the whole question).
- Feedback (RM3-style): the words the first pass's best turns share, weighted by those turns' scores, are
  added to the query's text; the question's own words are repeated so they keep most of the weight.
"""

from __future__ import annotations

import re
from typing import Final

import msgspec

from memkit.backend import Hit, Query
from memkit.text import STOP_WORDS, tokenize

__all__ = ["FEEDBACK_DOCS", "FILLER", "expanded", "without_filler"]

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
FILLER: Final = frozenset(
    """remind remember recall mention mentioned mentioning told tell telling said say saying chat chats
    chatted conversation conversations discuss discussed discussion talk talked talking previous previously
    earlier ago last time back again ask asked asking wondering wonder know can could""".split()  # noqa: SIM905
)
"""Words about the conversation, not its content (kept when the whole query is made of them)."""
FEEDBACK_DOCS: Final = 3
"""The first pass's turns read for feedback (LoCoMo R@5 fell with 5 or 10: deeper turns are off topic)."""
_QUERY_REPEAT: Final = 3
"""The question's words count three times, each feedback word once (RM3's interpolation of the original query
and the feedback model; twice cost LoCoMo R@5 half a point)."""


def without_filler(text: str) -> str:
    """``text`` without conversational filler; the text itself when nothing else would be left."""
    words = _WORD.findall(text)
    kept = [w for w in words if w.lower() not in FILLER]
    return " ".join(kept) if any(w.lower() not in STOP_WORDS for w in kept) else text


def expanded(query: Query, hits: list[Hit], terms: int) -> Query:
    """``query`` whose text also carries the ``terms`` words the best ``hits`` weigh most (by their score),
    words of the query itself left out; the query unchanged when it has no text or there are no hits.

    Only hits that share a word with the query feed back: a turn ranked first by recency alone is no
    evidence, and its own words added to the query gave it a full text score (asked "peanuts allergy", a
    store of one fact and one turn about a move ranked the move first)."""
    if not query.text or not hits or terms <= 0:
        return query
    own = set(tokenize(query.text))
    weight: dict[str, float] = {}
    surface: dict[str, str] = {}
    for hit in [hit for hit in hits if hit.scores.lexical > 0][:FEEDBACK_DOCS]:
        words = [w for w in _WORD.findall((hit.record.text or "").lower()) if w not in STOP_WORDS]
        stems = tokenize(" ".join(words))
        if not stems:
            continue
        share = max(hit.scores.final, 0.0) / len(stems)
        for word, stem in zip(words, stems, strict=False):
            if stem not in own and not word.isdigit():
                weight[stem] = weight.get(stem, 0.0) + share
                surface.setdefault(stem, word)
    extra = [surface[stem] for stem in sorted(weight, key=lambda s: (-weight[s], s))[:terms]]
    if not extra:
        return query
    text = " ".join([query.text] * _QUERY_REPEAT + extra)
    return msgspec.structs.replace(query, text=text)
