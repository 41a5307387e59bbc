"""Turn and session recall on LongMemEval through memkit's public long-term memory API.

    python -m benchmarks.longmemeval --data longmemeval_s_dev.json.gz --json out/lme.json [--plot out/lme.png]
        [--compare | --levers NAMES] [--limit N] [--embed-cache DIR]

For each question: a fresh store scoped to it (user_id = the question id), its sessions' user turns added in
session order (``add_turns``, one thread per session, the session's date as ``at``, metadata carrying the
session id, the turn's index in its session and ``has_answer``), then the question recalled (k=50) as of the
question's date. Only the public API and the data file are used: no tuning per question, no answers.

Metrics, as in the LongMemEval paper (no LLM): recall_all@k is 1 if every evidence unit is in the top k, else
0; recall_any@k likewise with "any". Turn level: the evidence is the user turns with ``has_answer``; questions
with none (their evidence is in assistant turns) are skipped and counted. Session level: the evidence is the
``answer_session_ids``; sessions are ranked by their best turn, i.e. in order of their first turn in the top
50 turns (a session with no turn there is not ranked). Abstention questions (``_abs``) have no evidence and
are skipped by both, and counted.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from typing import Any

import anyio
import msgspec
import numpy as np
from tqdm import tqdm

from memkit import LongTermConfig, Memkit, Turn, Weights
from memkit.embedders import Embedder

from ._embed_cache import warm_cache
from ._lme_data import Item, load, resolve_path
from ._lme_levers import selected
from ._report import print_table, write_json
from .locomo import cached_embedder

KS = (5, 10, 50)
DEPTH = max(KS)
COMPARE: dict[str, dict[str, Any]] = {
    "dense only": {"weights": Weights(similarity=1.0, lexical=0.0, recency=0.0, importance=0.0),
                   "neighbour_weight": 0.0},
    "BM25 only": {"weights": Weights(similarity=0.0, lexical=1.0, recency=0.0, importance=0.0),
                  "neighbour_weight": 0.0},
    "no neighbour boost": {"neighbour_weight": 0.0},
    "no indexed context": {"context_turns": 0},
}  # fmt: skip
"""Each changes the default pipeline in one respect (the levers' on/off variants are added by ``variants``)."""


def variants(base: LongTermConfig) -> dict[str, dict[str, Any]]:
    """COMPARE, plus each lever of the pipeline flipped from its default (so both benchmarks share them)."""
    from ._lme_levers import lever_variants

    return {**COMPARE, **lever_variants(base)}


async def ingest(mem: Memkit, item: Item) -> int:
    for session in item.sessions:
        turns = [Turn(speaker="user", text=t.text, at=session.at,
                      metadata={"session": session.session_id, "turn": t.index, "has_answer": t.has_answer})
                 for t in session.turns]  # fmt: skip
        if turns:
            await mem.long_term.add_turns(turns, user_id=item.question_id, thread=session.session_id)
    return item.n_turns


def _scores(found: list[Any], evidence: set[Any]) -> dict[str, float]:
    row: dict[str, float] = {}
    for k in KS:
        top = set(found[:k])
        row[f"all@{k}"] = float(evidence <= top)
        row[f"any@{k}"] = float(bool(evidence & top))
    return row


async def evaluate(item: Item, config: LongTermConfig, embedder: Embedder) -> dict[str, Any]:
    async with Memkit("memory://", embedder=embedder, long_term=config) as mem:
        started = time.perf_counter()
        turns = await ingest(mem, item)
        ingest_s = time.perf_counter() - started
        started = time.perf_counter()
        hits = await mem.long_term.recall(item.question, user_id=item.question_id, k=DEPTH, as_of=item.at)
        latency_ms = (time.perf_counter() - started) * 1000
    found = [(h.memory.metadata["session"], h.memory.metadata["turn"]) for h in hits]
    sessions = list(dict.fromkeys(session for session, _ in found))  # ranked by their best turn
    row: dict[str, Any] = {"type": item.question_type, "latency_ms": latency_ms, "ingest_s": ingest_s,
                           "turns": turns, "turn": None, "session": None, "abstention": item.abstention}  # fmt: skip
    if item.abstention:
        return row
    if item.evidence_turns:
        row["turn"] = _scores(found, item.evidence_turns)
    if item.answer_sessions:
        row["session"] = _scores(sessions, set(item.answer_sessions))
    return row


def _means(rows: list[dict[str, float]], prefix: str) -> dict[str, float]:
    return {f"{prefix}_{m}": float(np.mean([r[m] for r in rows])) for m in rows[0]} if rows else {}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    latencies = np.array([r["latency_ms"] for r in rows])
    by_type: dict[str, Any] = {}
    grouped = defaultdict(list)
    for row in rows:
        grouped[row["type"]].append(row)
    for kind, group in sorted(grouped.items()):
        turn_rows = [r["turn"] for r in group if r["turn"]]
        by_type[kind] = {"n": len(group), "n_turn": len(turn_rows), **_means(turn_rows, "turn"),
                         **_means([r["session"] for r in group if r["session"]], "session")}  # fmt: skip
    turn_rows = [r["turn"] for r in rows if r["turn"]]
    ingest_s = sum(r["ingest_s"] for r in rows)
    return {
        **_means(turn_rows, "turn"),
        **_means([r["session"] for r in rows if r["session"]], "session"),
        "by_type": by_type,
        "n_questions": len(rows),
        "n_turn_questions": len(turn_rows),
        "skipped_no_user_turn_evidence": sum(1 for r in rows if r["turn"] is None),
        "abstention_skipped": sum(1 for r in rows if r["abstention"]),
        "ingest_turns_per_s": sum(r["turns"] for r in rows) / ingest_s if ingest_s else 0.0,
        "recall_p50_ms": float(np.percentile(latencies, 50)),
        "recall_p95_ms": float(np.percentile(latencies, 95)),
    }


async def run_pipeline(items: list[Item], config: LongTermConfig, embedder: Embedder, label: str) -> dict[str, Any]:
    rows = [await evaluate(item, config, embedder) for item in tqdm(items, desc=label[:40], unit="q")]
    return summarise(rows)


def plot(summary: dict[str, Any], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install 'memkit[plot]'); skipping the plot")
        return
    names = ["overall", *summary["by_type"]]
    groups = [summary, *summary["by_type"].values()]
    metrics = ["turn_all@5", "turn_all@10", "session_all@5", "session_all@10"]
    fig, ax = plt.subplots(figsize=(11, 4))
    width = 0.2
    for i, metric in enumerate(metrics):
        ax.bar(np.arange(len(names)) + (i - 1.5) * width, [g.get(metric, 0.0) for g in groups], width, label=metric)
    ax.set_xticks(np.arange(len(names)), names, rotation=15, fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("recall_all")
    ax.set_title(f"memkit on LongMemEval ({summary['n_questions']} questions), default offline pipeline")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


COLUMNS = ["pipeline", "turn_all@5", "turn_all@10", "turn_all@50", "turn_any@5", "turn_any@10", "session_all@5",
           "session_all@10", "session_any@5", "recall_p50_ms", "recall_p95_ms", "ingest_turns_per_s"]  # fmt: skip


async def run_all(
    items: list[Item], embedder: Embedder, compare: bool, levers: str | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    base = LongTermConfig()
    summary = await run_pipeline(items, base, embedder, "default pipeline")
    rows = [{**summary, "pipeline": "default"}]
    summary["pipeline"] = {"embedder": embedder.model_id, **msgspec.to_builtins(base)}
    if compare or levers is not None:
        summary["variants"] = []
        for name, overrides in selected(variants(base), levers).items():
            config = msgspec.structs.replace(base, **overrides)
            variant = await run_pipeline(items, config, embedder, name)
            rows.append({**variant, "pipeline": name})
            variant["pipeline"] = msgspec.to_builtins(config)
            summary["variants"].append({"name": name, **variant})
    return summary, rows


async def amain(args: argparse.Namespace) -> None:
    items = load(resolve_path(args.data))[: args.limit or None]
    embedder, disk = cached_embedder(args.embedder, args.embed_cache)
    if disk is not None:  # a dry run finds the texts, embedded at once longest first; the real run reads them
        await warm_cache(disk, lambda recorder: run_all(items, recorder, args.compare, args.levers))
    summary, rows = await run_all(items, embedder, args.compare, args.levers)
    print_table(rows, COLUMNS)
    print_table([{"type": t, **v} for t, v in summary["by_type"].items()],
                ["type", "n", "n_turn", "turn_all@5", "turn_all@10", "turn_any@10", "session_all@5",
                 "session_all@10"])  # fmt: skip
    print(f"{summary['n_questions']} questions; turn metrics over {summary['n_turn_questions']} "
          f"({summary['skipped_no_user_turn_evidence']} skipped: no user-turn evidence, of them "
          f"{summary['abstention_skipped']} abstention)")  # fmt: skip
    write_json(args.json_path, summary)
    if args.plot:
        plot(summary, args.plot)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="LongMemEval .json or .json.gz (or set MEMKIT_LONGMEMEVAL_PATH)")
    parser.add_argument("--json", dest="json_path", help="write the results as JSON here")
    parser.add_argument("--plot", help="write a PNG of recall by question type here")
    parser.add_argument("--embedder", choices=["local", "hashing"], default="local")
    parser.add_argument("--embed-cache", help="directory of a persistent embedding cache (re-runs skip the model)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N questions")
    parser.add_argument("--compare", action="store_true", help="also run the ablations")
    parser.add_argument(
        "--levers",
        help="only the ablations whose names contain one of these comma-separated "
        "parts (e.g. 'feedback,BM25'): a cheap check of one lever",
    )
    anyio.run(amain, parser.parse_args())


if __name__ == "__main__":
    main()
