"""Deciding what a fact does to memory, by rules: add it, supersede what it replaces, or note it is known.

The rules, in order, against the current memories most similar to the fact:

1. the same text (up to case, spacing and punctuation) is stored: NOOP;
2. a memory states the same relation of the same subject (its slot, from extraction's metadata or read back
   from its text): the same value is a NOOP; another value is SUPERSEDED when the relation holds one value at a
   time (home, employer, a view of sushi) or the fact is a correction, else the fact is ADDED beside it (a
   second sister);
3. a correction with no readable relation supersedes the most similar memory of the same kind when its
   cosine similarity reaches ``correction_similarity``;
4. anything else is ADDED (the long-term layer still merges near-duplicates: reported as an update).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from memkit.extract._heuristic import read_slot
from memkit.extract._records import Decision, Fact
from memkit.layers.longterm import Memory, RecallHit
from memkit.layers.longterm._codec import dedupe_key

__all__ = ["HeuristicReconciler", "ReconcileConfig", "memory_slot"]

SLOT: Final = "fact_slot"
SUBJECT: Final = "fact_subject"
VALUE: Final = "fact_value"


class ReconcileConfig(msgspec.Struct, frozen=True, kw_only=True):
    correction_similarity: float = 0.75
    """A correction with no readable relation replaces the most similar memory of its kind at or above this
    cosine similarity. Measured with the packaged MiniLM model (tests/extract/test_thresholds.py): corrections
    of the same statement scored 0.79-0.98, corrections of another statement 0.08-0.57."""


def memory_slot(memory: Memory) -> tuple[str | None, str | None, str | None]:
    """(subject, slot, value) of a stored memory: extraction's metadata, else read back from its text."""
    meta = memory.metadata
    slot = meta.get(SLOT)
    if isinstance(slot, str):
        subject, value = meta.get(SUBJECT), meta.get(VALUE)
        return (subject if isinstance(subject, str) else None, slot, value if isinstance(value, str) else None)
    subject, slot, value, _ = read_slot(memory.content)
    return subject, slot, value


def _same(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and a.casefold() == b.casefold()


class HeuristicReconciler:
    name = "heuristic"

    def __init__(self, config: ReconcileConfig | None = None) -> None:
        self.config = config or ReconcileConfig()

    async def reconcile(self, facts: Sequence[Fact], candidates: Sequence[Sequence[RecallHit]]) -> list[Decision]:
        return [self.decide(i, fact, hits) for i, (fact, hits) in enumerate(zip(facts, candidates, strict=True))]

    def decide(self, index: int, fact: Fact, hits: Sequence[RecallHit]) -> Decision:
        key = dedupe_key(fact.text)
        for hit in hits:
            if dedupe_key(hit.memory.content) == key:
                return Decision(fact=index, action="noop", target=hit.memory.id, reason="already stored, same text")
        if fact.slot is not None:
            decided = self._by_slot(index, fact, hits)
            if decided is not None:
                return decided
        if fact.kind == "correction":
            same_kind = [h for h in hits if h.memory.kind == fact.memory_kind]
            best = max(same_kind, key=lambda h: h.similarity, default=None)
            if best is not None and best.similarity >= self.config.correction_similarity:
                return Decision(fact=index, action="supersede", target=best.memory.id,
                                reason=f"a correction of the most similar {fact.memory_kind} "
                                       f"(similarity {best.similarity:.2f})")  # fmt: skip
            return Decision(fact=index, action="add", reason="a correction, but nothing similar enough to correct")
        return Decision(fact=index, action="add", reason=f"new {fact.kind}")

    def _by_slot(self, index: int, fact: Fact, hits: Sequence[RecallHit]) -> Decision | None:
        for hit in hits:
            subject, slot, value = memory_slot(hit.memory)
            if slot != fact.slot or not _same(subject, fact.subject):
                continue
            what = f"{fact.subject}'s {fact.slot}"
            if _same(value, fact.value):
                return Decision(fact=index, action="noop", target=hit.memory.id,
                                reason=f"already known: {what} is {value}")  # fmt: skip
            if fact.functional or fact.kind == "correction":
                why = "a correction" if fact.kind == "correction" else "one value at a time"
                return Decision(fact=index, action="supersede", target=hit.memory.id,
                                reason=f"{what} was {value}, now {fact.value} ({why})")  # fmt: skip
        return None
