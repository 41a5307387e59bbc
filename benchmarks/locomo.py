"""Evidence recall on LoCoMo through memkit's public long-term memory API.

    python -m benchmarks.locomo --data locomo_dev.json --json out/locomo.json [--plot out/locomo.png]

For each conversation: a fresh store scoped to it (user_id = the sample id),
every turn added in order as ``Speaker: text`` (plus the shared image's
caption) with its session's date, then every question recalled with the
default pipeline "as of" the last session's date. The metric is the LoCoMo
paper's: per question, the share of its evidence dia_ids in the top k (a
question without evidence counts 1), averaged over questions. Only the public
API and the data file are used: no tuning per question, no answers.

``--compare`` also runs the reference design's weights, single-signal
pipelines and each retrieval lever flipped (``benchmarks._lme_levers``, shared
with the LongMemEval benchmark) in the same run (embeddings are cached, so
they cost little). ``--embed-cache DIR`` keeps the model's vectors on disk
across runs (``benchmarks._embed_cache``): figures unchanged, re-runs fast.
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
from memkit.embedders import CachedEmbedder, Embedder, HashingEmbedder, LocalEmbedder

from ._embed_cache import DiskCachedEmbedder, warm_cache
from ._lme_levers import lever_variants, selected
from ._locomo_data import CATEGORIES, Conversation, load, resolve_path
from ._report import print_table, write_json

KS = (5, 10, 25)
COMPARE: dict[str, dict[str, Any]] = {
    "reference design weights (0.5 sim, 0.2 rec, 0.3 imp)": {
        "weights": Weights(similarity=0.5, lexical=0.0, recency=0.2, importance=0.3), "neighbour_weight": 0.0},
    "rank fusion (RRF) instead of blending": {"fusion": "rrf"},
    "dense only": {"weights": Weights(similarity=1.0, lexical=0.0, recency=0.0, importance=0.0),
                   "neighbour_weight": 0.0},
    "BM25 only": {"weights": Weights(similarity=0.0, lexical=1.0, recency=0.0, importance=0.0),
                  "neighbour_weight": 0.0},
    "no neighbour boost": {"neighbour_weight": 0.0},
    "no indexed context": {"context_turns": 0},
    "recency 0": {"weights": Weights(similarity=0.5, lexical=0.5, recency=0.0, importance=0.1)},
    "recency 0.1": {"weights": Weights(similarity=0.5, lexical=0.5, recency=0.1, importance=0.1)},
    "recency 0.2": {"weights": Weights(similarity=0.5, lexical=0.5, recency=0.2, importance=0.1)},
}  # fmt: skip
"""Each changes the default pipeline in one respect. Their latencies exclude query embedding:
the questions' vectors are cached by the time they run."""


async def ingest(mem: Memkit, conversation: Conversation) -> None:
    for session in conversation.sessions:
        turns = [Turn(speaker=t.speaker, text=t.text, at=session.at, metadata={"dia_id": t.dia_id})
                 for t in session.turns]  # fmt: skip
        await mem.long_term.add_turns(turns, user_id=conversation.sample_id, thread="dialogue")


async def evaluate(
    conversation: Conversation,
    config: LongTermConfig,
    embedder: Embedder,
    url: str,
    progress: tqdm,  # type: ignore[type-arg]
) -> tuple[list[dict[str, Any]], float]:
    async with Memkit(url.replace("{conversation}", conversation.sample_id), embedder=embedder,
                      long_term=config) as mem:  # fmt: skip
        await mem.long_term.forget_all(user_id=conversation.sample_id)  # a fresh store, even in a reused file
        started = time.perf_counter()
        await ingest(mem, conversation)
        ingest_s = time.perf_counter() - started
        as_of = conversation.sessions[-1].at
        results = []
        for question in conversation.questions:
            started = time.perf_counter()
            hits = await mem.long_term.recall(question.text, user_id=conversation.sample_id, k=max(KS), as_of=as_of)
            latency_ms = (time.perf_counter() - started) * 1000
            found = [hit.memory.metadata.get("dia_id") for hit in hits]
            row: dict[str, Any] = {"category": question.category, "latency_ms": latency_ms}
            for k in KS:
                top = set(found[:k])
                evidence = question.evidence
                row[k] = 1.0 if not evidence else sum(e in top for e in evidence) / len(evidence)
            results.append(row)
            progress.update(1)
    return results, ingest_s


def summarise(results: list[dict[str, Any]], ingest_s: float) -> dict[str, Any]:
    latencies = np.array([r["latency_ms"] for r in results])
    by_category: dict[str, Any] = {}
    grouped = defaultdict(list)
    for row in results:
        grouped[row["category"]].append(row)
    for category, rows in sorted(grouped.items()):
        by_category[CATEGORIES.get(category, str(category))] = {
            "n": len(rows),
            **{f"recall@{k}": 100 * float(np.mean([r[k] for r in rows])) for k in KS},
        }
    return {
        **{f"recall@{k}": 100 * float(np.mean([r[k] for r in results])) for k in KS},
        "by_category": by_category,
        "n_questions": len(results),
        "ingest_s": ingest_s,
        "recall_p50_ms": float(np.percentile(latencies, 50)),
        "recall_p95_ms": float(np.percentile(latencies, 95)),
    }


async def run_pipeline(
    conversations: list[Conversation], config: LongTermConfig, embedder: Embedder, url: str, label: str
) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    ingest_s = 0.0
    total = sum(len(c.questions) for c in conversations)
    with tqdm(total=total, desc=label[:40], unit="q") as progress:
        for conversation in conversations:
            rows, seconds = await evaluate(conversation, config, embedder, url, progress)
            results.extend(rows)
            ingest_s += seconds
    return summarise(results, ingest_s)


def plot(summary: dict[str, Any], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install 'memkit[plot]'); skipping the plot")
        return
    names = ["overall", *summary["by_category"]]
    values = {k: [summary[f"recall@{k}"]] + [c[f"recall@{k}"] for c in summary["by_category"].values()] for k in KS}
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.25
    for i, k in enumerate(KS):
        ax.bar(np.arange(len(names)) + (i - 1) * width, values[k], width, label=f"recall@{k}")
    ax.set_xticks(np.arange(len(names)), names)
    ax.set_ylim(0, 100)
    ax.set_ylabel("evidence recall (%)")
    ax.set_title(f"memkit on LoCoMo ({summary['n_questions']} questions), default offline pipeline")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def make_embedder(name: str) -> Embedder:
    return CachedEmbedder(HashingEmbedder() if name == "hashing" else LocalEmbedder(), max_entries=1_000_000)


def cached_embedder(name: str, cache_dir: str | None) -> tuple[Embedder, DiskCachedEmbedder | None]:
    """The benchmark's embedder, kept on disk in ``cache_dir`` when given (the disk cache returned too)."""
    if not cache_dir:
        return make_embedder(name), None
    disk = DiskCachedEmbedder(HashingEmbedder() if name == "hashing" else LocalEmbedder(), cache_dir)
    return CachedEmbedder(disk, max_entries=1_000_000), disk


async def run_all(
    conversations: list[Conversation], embedder: Embedder, url: str, compare: bool, levers: str | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    base = LongTermConfig()
    summary = await run_pipeline(conversations, base, embedder, url, "default pipeline")
    rows = [{**summary, "pipeline": "default"}]
    summary["pipeline"] = {"url": url, "embedder": embedder.model_id, **msgspec.to_builtins(base)}
    if compare or levers is not None:
        summary["variants"] = []
        for name, overrides in selected({**COMPARE, **lever_variants(base)}, levers).items():
            config = msgspec.structs.replace(base, **overrides)
            variant = await run_pipeline(conversations, config, embedder, url, name)
            rows.append({**variant, "pipeline": name})
            variant["pipeline"] = msgspec.to_builtins(config)
            summary["variants"].append({"name": name, **variant})
    return summary, rows


async def amain(args: argparse.Namespace) -> None:
    conversations = load(resolve_path(args.data))[: args.limit or None]
    embedder, disk = cached_embedder(args.embedder, args.embed_cache)
    if disk is not None:  # a dry run (in memory) finds the texts, embedded at once longest first
        await warm_cache(
            disk, lambda recorder: run_all(conversations, recorder, "memory://", args.compare, args.levers)
        )
    summary, rows = await run_all(conversations, embedder, args.url, args.compare, args.levers)
    print_table(rows, ["pipeline", "recall@5", "recall@10", "recall@25", "ingest_s", "recall_p50_ms", "recall_p95_ms"])
    print_table([{"category": c, **v} for c, v in summary["by_category"].items()],
                ["category", "n", "recall@5", "recall@10", "recall@25"])  # fmt: skip
    write_json(args.json_path, summary)
    if args.plot:
        plot(summary, args.plot)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="LoCoMo JSON file (or set MEMKIT_LOCOMO_PATH)")
    parser.add_argument("--json", dest="json_path", help="write the results as JSON here")
    parser.add_argument("--plot", help="write a PNG of recall by category here")
    parser.add_argument("--url", default="memory://",
                        help="storage URL; '{conversation}' in it is replaced by the sample id "
                             "(e.g. sqlite:////tmp/locomo-{conversation}.db)")  # fmt: skip
    parser.add_argument("--embedder", choices=["local", "hashing"], default="local")
    parser.add_argument("--embed-cache", help="directory of a persistent embedding cache (re-runs skip the model)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N conversations")
    parser.add_argument("--compare", action="store_true", help="also run the comparison pipelines")
    parser.add_argument(
        "--levers",
        help="only the comparison pipelines whose names contain one of these "
        "comma-separated parts (e.g. 'speaker,recency')",
    )
    anyio.run(amain, parser.parse_args())


if __name__ == "__main__":
    main()
