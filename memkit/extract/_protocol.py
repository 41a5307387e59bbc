"""The protocols fact extraction is built from: an extractor reads turns, a reconciler decides against memory."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from memkit.extract._records import Decision, Extraction, Fact, ObservedTurn
from memkit.layers.longterm import RecallHit

__all__ = ["BatchFactExtractor", "FactExtractor", "Reconciler"]


@runtime_checkable
class FactExtractor(Protocol):
    """Reads a finished turn and says which facts in it are worth remembering (nothing is written)."""

    @property
    def name(self) -> str:
        """Identifies the extractor in events and in the metadata of what it stored ("heuristic", a model id)."""
        ...

    async def extract(self, turn: ObservedTurn) -> Extraction: ...


@runtime_checkable
class BatchFactExtractor(FactExtractor, Protocol):
    """An extractor that reads several turns in one go (a model: one call for a batch)."""

    async def extract_many(self, turns: Sequence[ObservedTurn]) -> list[Extraction]: ...


@runtime_checkable
class Reconciler(Protocol):
    """Decides, for each fact, against the current memories most similar to it: one decision per fact."""

    async def reconcile(self, facts: Sequence[Fact], candidates: Sequence[Sequence[RecallHit]]) -> list[Decision]: ...
