"""Applying extracted facts to long-term memory, one decision at a time, and saying what was done and why.

``FactWriter`` is what a background writer calls with finished turns: it extracts (one model call for a
batch when the extractor can), recalls each fact's most similar current memories of that user, reconciles
(rules, or the model), and adds, updates or supersedes through the long-term layer's public methods. Every
decision comes back as a ``FactEvent`` (and goes to ``on_event``): nothing is stored or dropped silently.
Facts are kept per user (and agent), not per session: what a user said in one conversation is known in the
next; the session id is kept in the memory's metadata.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Literal

import anyio
import msgspec

from memkit.backend import Scope
from memkit.errors import NotFoundError, ScopeError
from memkit.extract._heuristic import HeuristicFactExtractor, message_text
from memkit.extract._protocol import BatchFactExtractor, FactExtractor, Reconciler
from memkit.extract._reconcile import SLOT, SUBJECT, VALUE, HeuristicReconciler, ReconcileConfig
from memkit.extract._records import Decision, Extraction, Fact, FactEvent, ObservedTurn
from memkit.layers._embedding import embed_texts
from memkit.layers.longterm import LongTermMemory, Memory, RecallHit, StoreResult

__all__ = ["FactWriter", "FactWriterConfig"]

log = logging.getLogger("memkit")
_EARLIER = "fact:"
"""A decision's target naming an earlier fact of the same batch ("fact:0"), for a model that reconciles a batch
in one call: it resolves to the memory that fact was written as."""


class _Pending(msgspec.Struct, frozen=True):
    """A fact with the turn and extraction it came from."""

    turn: ObservedTurn
    extraction: Extraction
    fact: Fact


class FactWriterConfig(msgspec.Struct, frozen=True, kw_only=True):
    candidates: int = 5
    """Current memories recalled per fact to reconcile it against."""
    min_importance: float = 0.0
    """Facts estimated below this are ignored (an event says so)."""
    session_scoped: bool = False
    """Keep facts per session instead of per user (they would not be known in the user's next session)."""
    report_skipped: bool = True
    """An "ignore" event for each sentence that yielded no fact (filler, a question, ...), with the reason."""
    reconcile: ReconcileConfig = msgspec.field(default_factory=ReconcileConfig)
    context: Literal["none", "previous", "message"] = "message"
    """What each fact is indexed with, never shown: ``message``, the words around it in the message it came from;
    ``previous``, the end of the message before that one in the turn (often the question it answers, as
    ``add_turns`` indexes a turn with the one before it)."""
    context_chars: int = 300


def _status_event(result: StoreResult, **known: Any) -> FactEvent:
    """The event for what ``store`` did with a fact to add."""
    if result.status == "stored":
        return FactEvent(action="add", memory=result.memory, **known)
    if result.status == "merged":
        reason = f"{known.pop('reason')}; merged into a near-duplicate memory (newer wording kept)"
        return FactEvent(action="update", memory=result.memory, reason=reason, **known)
    if result.status == "duplicate":
        return FactEvent(action="noop", memory=result.memory, reason="already stored, same text", **{
            k: v for k, v in known.items() if k != "reason"})  # fmt: skip
    return FactEvent(action="ignore", reason=f"not stored: {result.reason}",
                     **{k: v for k, v in known.items() if k != "reason"})  # fmt: skip


class FactWriter:
    """Extract facts from finished turns and apply them to ``long_term``; returns (and reports) every decision."""

    def __init__(
        self,
        long_term: LongTermMemory,
        extractor: FactExtractor | None = None,
        *,
        reconciler: Reconciler | None = None,
        config: FactWriterConfig | None = None,
        on_event: Callable[[FactEvent], None] | None = None,
    ) -> None:
        self.long_term = long_term
        self.config = config or FactWriterConfig()
        self.extractor: FactExtractor = extractor or HeuristicFactExtractor()
        if reconciler is None:
            own = self.extractor if isinstance(self.extractor, Reconciler) else None
            reconciler = own or HeuristicReconciler(self.config.reconcile)
        self.reconciler = reconciler
        self.on_event = on_event
        self._locks: dict[Scope, anyio.Lock] = {}

    async def write(self, turn: ObservedTurn) -> list[FactEvent]:
        return await self.write_many([turn])

    async def write_many(self, turns: Sequence[ObservedTurn]) -> list[FactEvent]:
        """Extract from every turn (in one call when the extractor reads batches), then apply each user's facts
        in the order they were said."""
        for turn in turns:
            if not isinstance(turn, ObservedTurn):
                raise TypeError(f"write_many takes ObservedTurn items, got {type(turn).__name__}")
            if turn.user_id is None:
                raise ScopeError("fact extraction needs the turn's user_id (facts are kept per user)")
        if isinstance(self.extractor, BatchFactExtractor) and len(turns) > 1:
            extractions = await self.extractor.extract_many(turns)
        else:
            extractions = [await self.extractor.extract(turn) for turn in turns]
        events: list[FactEvent] = []
        by_scope: dict[Scope, list[_Pending]] = {}
        for turn, extraction in zip(turns, extractions, strict=True):
            scope = self._scope(turn)
            events.extend(self._skipped(scope, extraction))
            by_scope.setdefault(scope, []).extend(_Pending(turn, extraction, fact) for fact in extraction.facts)
        for scope, items in by_scope.items():
            lock = self._locks.setdefault(scope, anyio.Lock())
            async with lock:
                events.extend(await self._apply_scope(scope, items))
        for event in events:
            self._report(event)
        return events

    # -- deciding ---------------------------------------------------------------------------------------------
    async def _apply_scope(self, scope: Scope, items: list[_Pending]) -> list[FactEvent]:
        events: list[FactEvent] = []
        written: dict[int, Memory] = {}
        kept = []
        for item in items:
            fact = item.fact
            if fact.importance >= self.config.min_importance:
                kept.append(item)
                continue
            events.append(
                FactEvent(
                    action="ignore",
                    scope=scope,
                    fact=fact,
                    message_index=fact.message_index,
                    text=fact.text,
                    decided_by=item.extraction.extractor,
                    reason=f"importance {fact.importance} is below {self.config.min_importance}",
                )
            )
        if getattr(self.reconciler, "batched", False):
            # One call for the batch: candidates recalled up front; an earlier fact of the batch is a target too.
            facts = [item.fact for item in kept]
            candidates = [await self._candidates(scope, fact) for fact in facts]
            decisions = _complete(await self.reconciler.reconcile(facts, candidates), facts)
            for at, (item, decision) in enumerate(zip(kept, decisions, strict=True)):
                events.append(await self._apply(scope, item, decision, written=written, at=at))
            return events
        for at, item in enumerate(kept):
            # One fact at a time, recalled after the previous ones were written: a correction later in the
            # batch finds the fact it corrects.
            hits = await self._candidates(scope, item.fact)
            [decision] = _complete(await self.reconciler.reconcile([item.fact], [hits]), [item.fact])
            events.append(await self._apply(scope, item, decision, written=written, at=at))
        return events

    async def _candidates(self, scope: Scope, fact: Fact) -> list[RecallHit]:
        lt, k = self.long_term, self.config.candidates
        hits = await lt.recall(fact.text, user_id=scope.user_id, agent_id=scope.agent_id, session_id=scope.session_id,
                               k=k)  # fmt: skip
        if fact.slot is not None and fact.subject is not None:
            # The same relation, even when worded too differently to rank among the most similar.
            wanted = {SLOT: fact.slot, SUBJECT: fact.subject.casefold()}
            same = await lt.recall(fact.text, user_id=scope.user_id, agent_id=scope.agent_id,
                                   session_id=scope.session_id, k=3, metadata=wanted)  # fmt: skip
            seen = {hit.memory.id for hit in same}
            hits = [*same, *(hit for hit in hits if hit.memory.id not in seen)]
        return await self._by_content(fact, hits)

    async def _by_content(self, fact: Fact, hits: list[RecallHit]) -> list[RecallHit]:
        """Each hit's similarity as that of what the memory says to the fact: one indexed with a context scores
        lower than its words alone would, and the rules (and the model) compare what memories say."""
        if not any(hit.memory.context is not None for hit in hits):
            return hits
        vectors = await embed_texts(self.long_term.embedder, [fact.text, *(hit.memory.content for hit in hits)])
        scores = vectors[1:] @ vectors[0]
        return [msgspec.structs.replace(hit, similarity=float(score)) for hit, score in zip(hits, scores, strict=True)]

    # -- applying -------------------------------------------------------------------------------------------------
    async def _apply(
        self, scope: Scope, item: _Pending, decision: Decision, *, written: dict[int, Memory], at: int
    ) -> FactEvent:
        fact = item.fact
        target = decision.target
        if target is not None and target.startswith(_EARLIER):
            earlier = written.get(int(target[len(_EARLIER) :]))
            target = None if earlier is None else earlier.id
        known: dict[str, Any] = {"scope": scope, "fact": fact, "decided_by": decision.decided_by,
                                 "message_index": fact.message_index, "text": decision.text or fact.text,
                                 "reason": decision.reason}  # fmt: skip
        event: FactEvent | None = None
        if decision.action in ("supersede", "update", "noop") and target is not None:
            try:
                event = await self._change(scope, item, decision.action, target, known)
            except NotFoundError:
                known["reason"] = f"{decision.reason}; the memory it named is gone, so it is added"
        elif decision.action != "add":
            known["reason"] = f"{decision.reason}; no memory named, so it is added"
        if event is None:
            result = await self.long_term.store(known["text"], **self._write_args(scope, item))
            event = _status_event(result, **known)
        if event.memory is not None and event.action != "ignore":
            written[at] = event.memory
        return event

    async def _change(self, scope: Scope, item: _Pending, action: str, target: str, known: dict[str, Any]) -> FactEvent:
        lt = self.long_term
        ids: dict[str, Any] = {"user_id": scope.user_id, "agent_id": scope.agent_id, "session_id": scope.session_id}
        if action == "noop":
            return FactEvent(action="noop", memory=await lt.get(target, **ids), **known)
        args = self._write_args(scope, item)
        if action == "update":
            old = await lt.get(target, **ids)
            new = await lt.update(target, **ids, content=known["text"], kind=args["kind"],
                                  importance=max(old.importance, item.fact.importance),
                                  metadata={**old.metadata, **args["metadata"]})  # fmt: skip
            return FactEvent(action="update", memory=new, previous=old, **known)
        result = await lt.supersede(target, known["text"], **args)
        if result.new.memory is None or result.old.superseded_by is None:
            return _status_event(result.new, **known)
        return FactEvent(action="supersede", memory=result.new.memory, previous=result.old, **known)

    def _write_args(self, scope: Scope, item: _Pending) -> dict[str, Any]:
        turn, fact = item.turn, item.fact
        metadata: dict[str, Any] = {**turn.metadata, "fact_kind": fact.kind, "extracted_by": item.extraction.extractor,
                                    "message_index": fact.message_index}  # fmt: skip
        if turn.session_id is not None and scope.session_id is None:
            metadata["session_id"] = turn.session_id
        if fact.slot is not None and fact.subject is not None:
            metadata.update({SLOT: fact.slot, SUBJECT: fact.subject.casefold()})
            if fact.value is not None:
                metadata[VALUE] = fact.value
        return {"user_id": scope.user_id, "agent_id": scope.agent_id, "session_id": scope.session_id,
                "kind": fact.memory_kind, "importance": fact.importance, "metadata": metadata,
                "created_at": turn.at, "source": f"observed:{item.extraction.extractor}",
                "context": self._context(turn, fact)}  # fmt: skip

    def _context(self, turn: ObservedTurn, fact: Fact) -> str | None:
        """What is indexed with the fact but never shown (``FactWriterConfig.context``), after the relation it
        states in plain words ("the user lives in Porto" for "I moved to Porto": asked where they live, recall
        finds it)."""
        mode, limit, at = self.config.context, self.config.context_chars, fact.message_index
        if mode == "none" or not 0 <= at < len(turn.messages):
            return None
        relation = _relation_words(fact)
        if mode == "previous":
            before = " ".join(message_text(turn.messages[at - 1]).split()) if at > 0 else ""
            words = before if len(before) <= limit else "…" + before[-limit:]  # its end: the question
        else:
            said = " ".join(message_text(turn.messages[at]).split())
            middle = max(said.find(fact.quote[:40]), 0) + len(fact.quote[:40]) // 2
            start = min(max(middle - limit // 2, 0), max(len(said) - limit, 0))
            words = said[start : start + limit]
        return " ".join(part for part in (relation, words) if part) or None

    # -- events ---------------------------------------------------------------------------------------------------
    def _scope(self, turn: ObservedTurn) -> Scope:
        session = turn.session_id if self.config.session_scoped else None
        return Scope(user_id=turn.user_id, agent_id=turn.agent_id, session_id=session)

    def _skipped(self, scope: Scope, extraction: Extraction) -> list[FactEvent]:
        notes = [FactEvent(action="ignore", scope=scope, reason=note, decided_by=extraction.extractor)
                 for note in extraction.notes]  # fmt: skip
        if not self.config.report_skipped:
            return notes
        return notes + [FactEvent(action="ignore", scope=scope, reason=skip.reason, message_index=skip.message_index,
                                  text=skip.text, decided_by=extraction.extractor)
                        for skip in extraction.skipped]  # fmt: skip

    def _report(self, event: FactEvent) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(event)
        except Exception:  # a broken callback must not undo or stop writes already made
            log.exception("memkit: facts: the on_event callback raised; the write itself succeeded")


def _relation_words(fact: Fact) -> str:
    """ "the user lives in Porto", "Bea lives in Lisbon", "the user dislikes sushi": a fact's relation in words."""
    if fact.slot is None or fact.subject is None or fact.value is None:
        return ""
    if fact.slot.startswith("taste:"):
        return f"{fact.subject} {fact.value} {fact.slot.removeprefix('taste:')}."
    verb = {"lives_in": "lives in", "works_at": "works at", "from": "is from", "is_named": "is named",
            "age": "is aged"}.get(fact.slot, fact.slot.replace("_", " "))  # fmt: skip
    return f"{fact.subject} {verb} {fact.value}."


def _complete(decisions: Sequence[Decision], facts: Sequence[Fact]) -> list[Decision]:
    """One decision per fact, in order: a reconciler that skipped a fact (or answered twice) gets it added."""
    chosen: dict[int, Decision] = {}
    for decision in decisions:
        if 0 <= decision.fact < len(facts):
            chosen.setdefault(decision.fact, decision)
    return [chosen.get(i) or Decision(fact=i, action="add", reason="no decision was made for it: added")
            for i in range(len(facts))]  # fmt: skip
