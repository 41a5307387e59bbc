"""Extraction on LongMemEval (the generalisation check for ``benchmarks._facts``): reach, and turn-level recall.

``reach``: the share of evidence user turns (``has_answer``) that yield at least one fact, and facts per 100
user turns; no store, no embedding. ``retrieval``: for the first ``n`` questions of each type, a fresh store per
question; the raw-turn side stores every user turn (``add_turns``, one thread per session), the fact side
observes every user turn (with the assistant message before it) through ``FactWriter``; each question is
recalled (k=10, as of its date) from each side, and a side scores recall_any@10 / recall_all@10: whether any /
every evidence user turn is among the turns of the top 10 (the paper's turn-level metric). Questions with no
user-turn evidence are left out, and counted.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from memkit import Memkit, Turn
from memkit.embedders import Embedder
from memkit.extract import FactWriter, FactWriterConfig, HeuristicConfig, HeuristicFactExtractor, ObservedTurn

__all__ = ["load", "reach", "retrieval"]

K = 10


def load(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".gz":
        with gzip.open(path) as file:
            return list(json.loads(file.read()))
    return list(json.loads(path.read_text()))


def _date(text: str) -> datetime:
    """ "2023/05/30 (Tue) 23:40" -> that moment, UTC."""
    day, _, rest = text.partition(" (")
    return datetime.strptime(day + rest.rpartition(")")[2], "%Y/%m/%d %H:%M").replace(tzinfo=UTC)


def _user_turns(item: dict[str, Any]) -> list[tuple[str, datetime, str | None, dict[str, Any]]]:
    """(turn key, session date, the assistant message before it, the user message) for every user turn."""
    found = []
    for sid, date, session in zip(item["haystack_session_ids"], item["haystack_dates"], item["haystack_sessions"],
                                  strict=True):  # fmt: skip
        for at, message in enumerate(session):
            if message["role"] == "user":
                before = session[at - 1]["content"] if at and session[at - 1]["role"] == "assistant" else None
                found.append((f"{sid}:{at}", _date(date), before, message))
    return found


def reach(items: list[dict[str, Any]], config: HeuristicConfig | None = None) -> dict[str, Any]:
    extractor = HeuristicFactExtractor(config)
    turns = facts = evidence = reached = 0
    for item in items:
        for _, _, before, message in _user_turns(item):
            context = [] if before is None else [{"role": "assistant", "content": before}]
            found = extractor.read(ObservedTurn(messages=[*context, message], user_id="u")).facts
            turns += 1
            facts += len(found)
            if message.get("has_answer"):
                evidence += 1
                reached += bool(found)
    return {"evidence_turns_with_a_fact": 100 * reached / max(evidence, 1), "evidence_turns": evidence,
            "facts_per_100_user_turns": 100 * facts / max(turns, 1), "user_turns": turns}  # fmt: skip


def _score(found: list[str], evidence: set[str]) -> tuple[float, float]:
    top = set(found[:K])
    return float(bool(top & evidence)), float(evidence <= top)


async def _question(
    item: dict[str, Any], embedder: Embedder, writer: FactWriterConfig, extractor: HeuristicFactExtractor
) -> dict[str, Any]:
    turns = _user_turns(item)
    evidence = {key for key, _, _, message in turns if message.get("has_answer")}
    as_of = _date(item["question_date"])
    row: dict[str, Any] = {"type": item["question_type"]}
    async with Memkit("memory://", embedder=embedder) as mem:
        lt = mem.long_term
        by_session: defaultdict[str, list[Turn]] = defaultdict(list)
        for key, date, _, message in turns:
            by_session[key.rsplit(":", 1)[0]].append(Turn(speaker="user", text=message["content"][:7_000], at=date,
                                                          metadata={"turn": key}))  # fmt: skip
        for session, said in by_session.items():
            await lt.add_turns(said, user_id="raw", thread=session)
        hits = await lt.recall(item["question"], user_id="raw", k=K, as_of=as_of)
        row["turns_any"], row["turns_all"] = _score([h.memory.metadata["turn"] for h in hits], evidence)
        facts = FactWriter(lt, extractor, config=writer)
        for key, date, before, message in turns:
            context = [] if before is None else [{"role": "assistant", "content": before}]
            await facts.write(ObservedTurn(messages=[*context, message], user_id="facts", at=date,
                                           metadata={"turn": key}))  # fmt: skip
        hits = await lt.recall(item["question"], user_id="facts", k=K, as_of=as_of)
        row["facts_any"], row["facts_all"] = _score([h.memory.metadata["turn"] for h in hits], evidence)
    return row


async def retrieval(
    items: list[dict[str, Any]], embedder: Embedder, *, per_type: int, writer: FactWriterConfig | None = None,
    config: HeuristicConfig | None = None,
) -> dict[str, Any]:  # fmt: skip
    """recall_any@10 and recall_all@10, from facts and from raw user turns, over ``per_type`` questions a type."""
    chosen: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
    skipped = 0
    for item in items:
        if not any(m.get("has_answer") for s in item["haystack_sessions"] for m in s if m["role"] == "user"):
            skipped += 1
        elif len(chosen[item["question_type"]]) < per_type:
            chosen[item["question_type"]].append(item)
    extractor = HeuristicFactExtractor(config)
    questions = [item for group in chosen.values() for item in group]
    rows = [await _question(item, embedder, writer or FactWriterConfig(), extractor)
            for item in tqdm(questions, desc="LongMemEval", unit="q")]  # fmt: skip
    summary: dict[str, Any] = {key: 100 * float(np.mean([r[key] for r in rows]))
                               for key in ("facts_any", "turns_any", "facts_all", "turns_all")}  # fmt: skip
    return {**summary, "n_questions": len(rows), "without_user_turn_evidence": skipped}
