"""Extraction quality on LoCoMo: evidence recall@10 from extracted facts against recall over the raw turns.

    python -m benchmarks._facts --data locomo_dev.json --json out/facts.json [--wording verbatim] [--longmemeval F]

Per conversation, a fresh store: every turn is observed as a finished turn (the speaker's message as the
user's, named, with the previous speaker's message before it as the other side's), the offline extractor
reads it and ``FactWriter`` applies its facts (reconciliation and supersession included); each fact keeps
its turn's ``dia_id``. Then every question is recalled from the facts only (k=10, as of the last session)
and scored as ``benchmarks.locomo`` scores turns: the share of the question's evidence turns among the
top 10 facts' turns. The raw-turn figure comes from ``benchmarks.locomo``'s own evaluation, in the same run,
with the same embedder. Reported side by side as ``facts_vs_turns_r10``, with stored facts per 100 turns.

``--longmemeval PATH`` adds, for LongMemEval (no embedding needed), the share of evidence user turns that
yield at least one fact and facts per 100 user turns, and ``--longmemeval-per-type N`` turn-level recall@10
from facts vs raw user turns over N questions of each type (``benchmarks._facts_lme``): checks that what the
extractor does is not tuned to LoCoMo alone. ``measure()`` is the helper other benchmarks call.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from tqdm import tqdm

from memkit import LongTermConfig, Memkit
from memkit.embedders import Embedder
from memkit.extract import FactWriter, FactWriterConfig, HeuristicConfig, HeuristicFactExtractor, ObservedTurn

from . import _facts_lme
from ._locomo_data import CATEGORIES, Conversation, load, resolve_path
from ._report import print_table, write_json
from .locomo import make_embedder, run_pipeline

__all__ = ["measure"]

K = 10


def _turns(conversation: Conversation) -> list[ObservedTurn]:
    observed: list[ObservedTurn] = []
    previous = None
    for session in conversation.sessions:
        for turn in session.turns:
            before: list[dict[str, Any]] = []
            if previous is not None:
                before = [{"role": "assistant", "name": previous.speaker, "content": previous.text}]
            messages = [*before, {"role": "user", "name": turn.speaker, "content": turn.text}]
            observed.append(ObservedTurn(messages=messages, user_id=conversation.sample_id, at=session.at,
                                         metadata={"dia_id": turn.dia_id}))  # fmt: skip
            previous = turn
    return observed


async def _facts_of(
    conversation: Conversation, writer: FactWriterConfig, extractor: HeuristicFactExtractor, embedder: Embedder, *,
    url: str, tally: Counter[str],
) -> tuple[list[dict[str, Any]], int, float]:  # fmt: skip
    """Per question: category, evidence recall@K from facts, latency; and the facts stored, the write time."""
    async with Memkit(url.replace("{conversation}", conversation.sample_id), embedder=embedder) as mem:
        lt = mem.long_term
        await lt.forget_all(user_id=conversation.sample_id)
        facts = FactWriter(lt, extractor, config=writer)
        started = time.perf_counter()
        for turn in _turns(conversation):
            tally.update(event.action for event in await facts.write(turn))
        write_s = time.perf_counter() - started
        stored = 0
        page = await lt.list(user_id=conversation.sample_id, limit=1000)
        while True:
            stored += sum(m.superseded_by is None for m in page.memories)
            if page.next_cursor is None:
                break
            page = await lt.list(user_id=conversation.sample_id, limit=1000, cursor=page.next_cursor)
        as_of = conversation.sessions[-1].at
        rows = []
        for question in conversation.questions:
            asked = time.perf_counter()
            hits = await lt.recall(question.text, user_id=conversation.sample_id, k=K, as_of=as_of)
            found = {hit.memory.metadata.get("dia_id") for hit in hits}
            evidence = question.evidence
            score = 1.0 if not evidence else sum(e in found for e in evidence) / len(evidence)
            rows.append({"category": question.category, "r": score, "ms": (time.perf_counter() - asked) * 1000})
    return rows, stored, write_s


async def measure(
    conversations: list[Conversation], embedder: Embedder, *, url: str = "memory://",
    config: HeuristicConfig | None = None, writer: FactWriterConfig | None = None, with_turns: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """``facts_vs_turns_r10`` and stored facts per 100 turns, with the per-category figures and timings.
    ``with_turns=False`` skips the raw-turn run (its figures are then NaN): for quick comparisons of extractors."""
    extractor = HeuristicFactExtractor(config)
    if with_turns:
        turns = await run_pipeline(conversations, LongTermConfig(), embedder, url, "raw turns")
    else:
        nan = float("nan")
        turns = {"recall@10": nan, "recall_p50_ms": nan, "by_category": defaultdict(lambda: {"recall@10": nan})}
    rows: list[dict[str, Any]] = []
    tally: Counter[str] = Counter()
    stored = 0
    write_s = 0.0
    for conversation in tqdm(conversations, desc="facts", unit="conversation"):
        got, facts, seconds = await _facts_of(conversation, writer or FactWriterConfig(), extractor, embedder,
                                              url=url, tally=tally)  # fmt: skip
        rows.extend(got)
        stored += facts
        write_s += seconds
    n_turns = sum(c.n_turns for c in conversations)
    grouped: defaultdict[int, list[float]] = defaultdict(list)
    for row in rows:
        grouped[row["category"]].append(row["r"])
    facts_r10 = 100 * float(np.mean([r["r"] for r in rows]))
    names = {c: CATEGORIES.get(c, str(c)) for c in grouped}
    by_category = {names[c]: {"n": len(v), "facts_r10": 100 * float(np.mean(v)),
                              "turns_r10": turns["by_category"][names[c]]["recall@10"]}
                   for c, v in sorted(grouped.items())}  # fmt: skip
    return {
        "facts_vs_turns_r10": {
            "facts": facts_r10,
            "turns": turns["recall@10"],
            "ratio": facts_r10 / turns["recall@10"],
        },
        "facts_per_100_turns": 100 * stored / n_turns,
        "stored_facts": stored,
        "n_turns": n_turns,
        "n_questions": len(rows),
        "events": dict(tally),
        "by_category": by_category,
        "write_ms_per_turn": 1000 * write_s / n_turns,
        "facts_recall_p50_ms": float(np.percentile([r["ms"] for r in rows], 50)),
        "turns_recall_p50_ms": turns["recall_p50_ms"],
        "wording": extractor.config.wording,
        "context": (writer or FactWriterConfig()).context,
    }


async def amain(args: argparse.Namespace) -> None:
    data = args.data or os.environ.get("MEMKIT_LOCOMO")
    conversations = load(resolve_path(data))[: args.limit or None]
    config = HeuristicConfig(wording=args.wording)
    summary = await measure(conversations, make_embedder(args.embedder), url=args.url, config=config,
                            writer=FactWriterConfig(context=args.context), with_turns=not args.facts_only)  # fmt: skip
    versus = summary["facts_vs_turns_r10"]
    print_table([{"source": "facts", "recall@10": versus["facts"], "per 100 turns": summary["facts_per_100_turns"]},
                 {"source": "raw turns", "recall@10": versus["turns"], "per 100 turns": 100.0}],
                ["source", "recall@10", "per 100 turns"])  # fmt: skip
    print_table([{"category": c, **v} for c, v in summary["by_category"].items()],
                ["category", "n", "facts_r10", "turns_r10"])  # fmt: skip
    print("events:", summary["events"], f"write {summary['write_ms_per_turn']:.2f} ms/turn")
    if args.longmemeval:
        items = _facts_lme.load(Path(args.longmemeval))
        summary["longmemeval"] = _facts_lme.reach(items, config)
        if args.longmemeval_per_type:
            found = await _facts_lme.retrieval(items, make_embedder(args.embedder), config=config,
                                               per_type=args.longmemeval_per_type,
                                               writer=FactWriterConfig(context=args.context))  # fmt: skip
            summary["longmemeval"]["retrieval"] = found
        print("LongMemEval:", summary["longmemeval"])
    write_json(args.json_path, summary)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="LoCoMo JSON file (or set MEMKIT_LOCOMO or MEMKIT_LOCOMO_PATH)")
    parser.add_argument("--json", dest="json_path", help="write the results as JSON here")
    parser.add_argument("--url", default="memory://", help="storage URL; '{conversation}' becomes the sample id")
    parser.add_argument("--embedder", choices=["local", "hashing"], default="local")
    parser.add_argument("--wording", choices=["third_person", "verbatim"], default="third_person")
    parser.add_argument(
        "--context",
        choices=["none", "previous", "message"],
        default="message",
        help="what each fact is indexed with besides its words (FactWriterConfig.context)",
    )
    parser.add_argument("--limit", type=int, default=0, help="only the first N conversations")
    parser.add_argument("--facts-only", action="store_true", help="skip the raw-turn run (quick comparisons)")
    parser.add_argument("--longmemeval", help="LongMemEval JSON (.json or .json.gz): the extractor's reach there")
    parser.add_argument(
        "--longmemeval-per-type",
        type=int,
        default=0,
        help="also turn-level recall from facts vs user turns, over N questions of each type",
    )
    anyio.run(amain, parser.parse_args())


if __name__ == "__main__":
    main()
