"""The offline fact extractor: English patterns over what the user said, one sentence at a time.

A sentence becomes a fact when it says something about the speaker (or states a relation between named
people, places and organisations, read by the knowledge graph's patterns) and is not a question, a request to
the assistant, or filler; otherwise it is skipped, and the reason kept. What it cannot classify is left out:
a missing fact costs less than a wrong one. Facts are worded in the third person (``_wording``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

import anyio.to_thread
import msgspec

from memkit.extract import _patterns as p
from memkit.extract._records import Extraction, Fact, FactKind, ObservedTurn, Skipped
from memkit.extract._wording import third_person
from memkit.layers.graph import DEFAULT_FUNCTIONAL, Edge, heuristic_extraction

__all__ = ["HeuristicConfig", "HeuristicFactExtractor", "message_text", "read_slot"]

_ME: Final = "\ue000"
"""The speaker's name given to the graph's patterns: no text can contain it, so its edges are the speaker's."""
_FUNCTIONAL: Final = DEFAULT_FUNCTIONAL | {"from", "grew_up_in", "engaged_to", "studies_at"}
_BASE: Final[dict[str, float]] = {"remember": 0.9, "correction": 0.8, "fact": 0.5, "preference": 0.6,
                                  "dislike": 0.6, "plan": 0.55, "decision": 0.65}  # fmt: skip
_SLOT_IMPORTANCE: Final = {"is_named": 0.8, "allergic_to": 0.85, "married_to": 0.75, "engaged_to": 0.75,
                           "lives_in": 0.7, "works_at": 0.7, "from": 0.65, "studies_at": 0.65, "age": 0.7}  # fmt: skip
_MEMORY_KIND: Final = {"preference": "preference", "dislike": "preference", "plan": "plan", "decision": "decision"}
_IMPLICIT: Final = (("been ", "I've "), ("just ", "I "), ("finally ", "I "), ("recently ", "I "))
_TRAILING: Final = re.compile(r"(?:\s+(?:anymore|any more|these days|now|again|either|too|as well|at all))+$",
                              re.IGNORECASE)  # fmt: skip
_AGE: Final = re.compile(r"(?<![\w'-])I(?:'m| am) (?P<age>\d{1,3})\b(?! (?:minutes|hours|days|weeks|months|miles|km))")


class HeuristicConfig(msgspec.Struct, frozen=True, kw_only=True):
    roles: tuple[str, ...] = ("user",)
    """Whose messages are read: what the user says about themselves (an assistant's words are not the user's)."""
    user_name: str | None = None
    """How facts name the speaker when a message has no ``name`` (default "the user")."""
    assistant_name: str = "the assistant"
    """Who "you" is, when the turn names no other speaker."""
    wording: Literal["third_person", "verbatim"] = "third_person"
    """``verbatim``: the speaker's own sentence, as ``Name: sentence`` (kept to measure against)."""
    max_fact_chars: int = 500
    max_facts_per_turn: int = 20
    min_content_words: int = 1
    """Words besides pronouns, auxiliaries and everyday verbs a fact needs ("I loved it" has none)."""
    offload_chars: int = 4_000
    """A turn with more text than this is read in a worker thread, not on the event loop."""


class _Statement(msgspec.Struct, frozen=True):
    kind: FactKind
    span: tuple[int, int]
    subject: str | None = None
    slot: str | None = None
    value: str | None = None
    functional: bool = False


def message_text(message: Mapping[str, Any]) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part.get("text") for part in content if isinstance(part, Mapping) and part.get("type") == "text"]
        return "\n".join(part for part in parts if isinstance(part, str))
    return ""


class HeuristicFactExtractor:
    """Offline, English: preferences and dislikes, names and relations, plans and decisions, "remember that"
    requests and corrections, each with a kind and an importance estimate."""

    name = "heuristic"

    def __init__(self, config: HeuristicConfig | None = None) -> None:
        self.config = config or HeuristicConfig()

    async def extract(self, turn: ObservedTurn) -> Extraction:
        size = sum(len(message_text(m)) for m in turn.messages)
        if size > self.config.offload_chars:
            return await anyio.to_thread.run_sync(self.read, turn)
        return self.read(turn)

    def read(self, turn: ObservedTurn) -> Extraction:
        """The same reading, synchronously (it never waits for anything)."""
        listener = next((str(m["name"]) for m in turn.messages
                         if m.get("role") not in self.config.roles and isinstance(m.get("name"), str)),
                        self.config.assistant_name)  # fmt: skip
        facts: list[Fact] = []
        skipped: list[Skipped] = []
        for index, message in enumerate(turn.messages):
            text = message_text(message)
            if message.get("role") not in self.config.roles or not text.strip():
                continue
            if p.is_filler(text):
                skipped.append(Skipped(message_index=index, text=text[:200], reason="filler"))
                continue
            speaker = message.get("name") if isinstance(message.get("name"), str) else None
            subject = speaker or self.config.user_name or "the user"
            for sentence in p.SENTENCES.split(text.replace("\u2019", "'")):
                for clause in p.CLAUSES.split(sentence.strip()):
                    found = self._sentence(clause.strip(), index, subject, listener)
                    if isinstance(found, Fact):
                        facts.append(found)
                    elif found is not None:
                        skipped.append(found)
        unique = list({fact.text.casefold(): fact for fact in reversed(facts)}.values())[::-1]
        return Extraction(facts=unique[: self.config.max_facts_per_turn], skipped=skipped, extractor=self.name)

    def _sentence(self, sentence: str, index: int, subject: str, listener: str) -> Fact | Skipped | None:
        if not sentence:
            return None
        skip = _skipper(index, sentence)
        body = _unaddressed(p.LEAD.sub("", sentence).strip(), listener)
        if not body or p.is_filler(body):
            return skip("filler")
        marker: FactKind | None = None
        if (said := p.REMEMBER.match(body)) and said.group("rest").strip():
            marker, body = "remember", said.group("rest").strip()
        elif said := p.CORRECTION.match(body):
            marker, body = "correction", p.LEAD.sub("", said.group("rest") or said.group("meant")).strip()
            if not body or p.is_filler(body):
                return skip("filler")
        if p.QUESTION.search(body) or p.REQUEST.search(body):
            return skip("a question or a request")
        hedge = p.HEDGE.match(body)
        body = body[hedge.end() :] if hedge else body
        body = _with_subject(body)
        statement = _statement(body, speaker_key=subject)
        if statement is None and marker is not None and p.ANCHOR.search(body):
            statement = _Statement(kind="fact", span=(0, 0))
        if statement is None and marker == "remember" and len(p.content_words(body)) >= 2:
            statement = _Statement(kind="fact", span=(0, 0), subject=None)  # "remember the door code is 4411"
        if statement is None:
            return skip("nothing classifiable")
        start, end = statement.span
        words = p.content_words(body[:start] + " " + body[end:]) + p.content_words(body[start:end], triggers=False)
        if len(words) < self.config.min_content_words:
            return skip("nothing specific (no content words)")
        if marker is None and p.CHANGE.search(body):
            marker = "correction"
        return self._fact(body, index, (subject, listener), statement, marker=marker, hedged=hedge is not None)

    def _fact(
        self, body: str, index: int, people: tuple[str, str], statement: _Statement, *, marker: FactKind | None,
        hedged: bool,
    ) -> Fact:  # fmt: skip
        subject, listener = people
        if self.config.wording == "verbatim":
            text = f"{subject[:1].upper()}{subject[1:]}: {body}"
        else:
            text = third_person(body, subject, listener)
        text = _clip(text, self.config.max_fact_chars)
        inner = statement.kind
        importance = _importance(body, inner, statement.slot, hedged=hedged)
        if marker is not None:
            importance = max(_BASE[marker], min(1.0, importance + 0.1))
        return Fact(text=text, kind=marker or inner, importance=round(importance, 2), message_index=index,
                    memory_kind=_MEMORY_KIND.get(inner, "fact"), subject=statement.subject, slot=statement.slot,
                    value=statement.value, functional=statement.functional, quote=body)  # fmt: skip


def _skipper(index: int, sentence: str) -> Callable[[str], Skipped]:
    return lambda reason: Skipped(message_index=index, text=sentence[:200], reason=reason)


def _unaddressed(body: str, listener: str) -> str:
    """``body`` without the listener's name in front ("Caroline, since we last chatted" -> "since we ...")."""
    named = p.VOCATIVE.match(body)
    if named and listener.casefold().startswith(named.group("name").casefold()):
        return p.LEAD.sub("", body[named.end() :])
    return body


def _with_subject(body: str) -> str:
    """ "Gonna continue my edu" -> "I'm gonna continue my edu": chat drops the subject."""
    if not p.IMPLICIT_SUBJECT.match(body):
        return body
    low = body.casefold()
    for start, subject in _IMPLICIT:
        if low.startswith(start):
            return subject + body
    return "I'm " + body[:1].lower() + body[1:]


def _statement(body: str, *, speaker_key: str) -> _Statement | None:
    """What kind of statement ``body`` is, with the relation it states (its slot) when one is readable."""
    edge = _primary_edge(body)
    slot = _slot(edge, speaker_key) if edge is not None else None
    for kind, pattern in (("dislike", p.DISLIKE), ("preference", p.PREFERENCE), ("decision", p.DECISION),
                          ("plan", p.PLAN), ("fact", p.FACT), ("fact", p.EVENT), ("fact", p.HABIT)):  # fmt: skip
        if (match := pattern.search(body)) is None:
            continue
        if kind in ("plan", "decision") or slot is None:
            return _Statement(kind=kind, span=match.span())  # type: ignore[arg-type]
        break
    if slot is not None:
        return slot
    if age := _AGE.search(body):
        return _Statement(kind="fact", span=age.span(), subject=speaker_key, slot="age", value=age.group("age"),
                          functional=True)  # fmt: skip
    return None


def _primary_edge(body: str) -> Edge | None:
    """The relation a sentence is mostly about: one a subject has a single value of (home, employer), else
    the first the graph's patterns read."""
    extraction = heuristic_extraction(body, speaker=_ME)
    edges = extraction.edges
    named = [n for n in extraction.nodes if n.name == _ME and n.aliases]
    if named:
        edges = [Edge(source=_ME, relation="is_named", target=named[0].aliases[0]), *edges]
    if not edges:
        return None
    return next((e for e in edges if e.functional or e.relation in _FUNCTIONAL), edges[0])


def _slot(edge: Edge, speaker_key: str) -> _Statement:
    subject = speaker_key if edge.source == _ME else edge.source
    relation, target = edge.relation, edge.target
    kind: FactKind = "fact"
    if relation in ("likes", "dislikes"):
        kind = "preference" if relation == "likes" else "dislike"
        thing = _TRAILING.sub("", target).casefold()
        return _Statement(kind=kind, span=(0, 0), subject=subject, slot=f"taste:{thing}", value=relation,
                          functional=True)  # fmt: skip
    if relation.startswith("favorite_"):
        kind = "preference"
    functional = bool(edge.functional) or relation in _FUNCTIONAL
    return _Statement(kind=kind, span=(0, 0), subject=subject, slot=relation, value=target, functional=functional)


def _importance(body: str, kind: str, slot: str | None, *, hedged: bool) -> float:
    base = _BASE[kind]
    if slot is not None:
        base = max(base, _SLOT_IMPORTANCE.get(slot.split(":")[0], 0.0), 0.7 if slot.startswith("has_") else 0.0)
    if p.INTENSE.search(body):
        base += 0.1
    if hedged or p.HEDGED.search(body):
        base -= 0.15
    if kind in ("plan", "decision", "fact") and p.TIME.search(body):
        base += 0.05
    return min(1.0, max(0.05, base))


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0]
    return cut + "…"


def read_slot(text: str, subject: str = "the user") -> tuple[str | None, str | None, str | None, bool]:
    """(subject, slot, value, functional) of a stored memory's text in the third person ("The user lives in
    Paris"), for memories stored without extraction's metadata; all None when no relation is readable."""
    first = re.sub(r"^(?:" + re.escape(subject) + r"|the user)'s\b", "My", text.strip(), flags=re.IGNORECASE)
    first = re.sub(r"^(?:" + re.escape(subject) + r"|the user)\b", "I", first, flags=re.IGNORECASE)
    statement = _statement(first, speaker_key=subject)
    if statement is None or statement.slot is None:
        return None, None, None, False
    return statement.subject, statement.slot, statement.value, statement.functional
