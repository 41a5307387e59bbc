"""The local embedder's runtimes side by side: torch (sentence-transformers), ONNX Runtime, ONNX int8.

    python -m benchmarks.embedder --json out/embedder.json [--plot out/embedder.png] [--runtimes torch,onnx]

Same packaged all-MiniLM-L6-v2 weights, same process, one runtime after the other (run it under the shared
lock so nothing else competes for the cores):

- ``load_s``: first load, including building the ONNX graph when it is not cached yet (once per user).
- ``short_b8_per_s`` / ``short_b64_per_s``: texts/s for 20-word texts in calls of 8 (a session's turns through
  ``add_turns``) and 64 (``store_many``, the embedder's batch).
- ``long_b8_per_s`` / ``long_b64_per_s``: the same for 300-word texts (past the 256-word-piece window: cut).
- ``lme_per_s``: LongMemEval_S user turns (the dev split, when found), calls of 64.
- ``query_p50_ms`` / ``query_p95_ms``: one 12-word question per call, the way recall embeds a query.
- ``parity_min`` / ``parity_mean``: cosine to torch's vectors over every text above.

Every call goes through ``await LocalEmbedder.embed`` (worker thread included), with no embedding cache.
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from tqdm import tqdm

from ._report import figures_parser, machine_info, print_table, write_json

_VOCABULARY = (
    "the of and to in is you that it he was for on are as with his they at be this have from or one had by "
    "word but not what all were we when your can said there use an each which she do how their if will up "
    "other about out many then them these so some her would make like him into time has look two more write "
    "go see number no way could people my than first water been call who its now find long down day did get "
    "come made may part trip sister dinner garden recipe doctor meeting concert paint guitar budget flight "
    "weekend coffee project novel museum hiking camera puppy Lisbon Kyoto café naïve résumé 東京 🎉"
)
_WORDS = _VOCABULARY.split()
_LME = Path(__file__).resolve().parent.parent.parent / "shared/data/longmemeval/longmemeval_s_dev.json.gz"
COLUMNS = ["runtime", "load_s", "short_b8_per_s", "short_b64_per_s", "long_b8_per_s", "long_b64_per_s",
           "lme_per_s", "query_p50_ms", "query_p95_ms", "parity_min", "parity_mean"]  # fmt: skip


def texts(count: int, words: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(_WORDS, size=words)) + f" ({seed}-{i})." for i in range(count)]


def lme_turns(path: Path, count: int) -> list[str]:
    if count <= 0 or not path.is_file():
        return []
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as file:
        questions = json.load(file)
    seen = dict.fromkeys(
        turn["content"] for q in questions for session in q["haystack_sessions"] for turn in session
        if turn["role"] == "user"
    )  # fmt: skip
    return list(seen)[:count]


async def rate(embedder: Any, items: list[str], batch: int) -> tuple[float, np.ndarray]:
    start, out = time.perf_counter(), []
    for at in range(0, len(items), batch):
        out.append(await embedder.embed(items[at : at + batch]))
    return len(items) / (time.perf_counter() - start), np.concatenate(out)


async def bench_runtime(runtime: str, sets: dict[str, list[str]], queries: list[str], progress: Any) -> dict[str, Any]:
    from memkit.embedders import LocalEmbedder

    embedder = LocalEmbedder(runtime=runtime)  # type: ignore[arg-type]
    start = time.perf_counter()
    await embedder.load()
    row: dict[str, Any] = {"runtime": runtime, "load_s": time.perf_counter() - start}
    await embedder.embed(sets["short"][:16])  # warm-up: first-call allocations are not throughput
    vectors = {}
    for name, items, batch in [("short_b8", sets["short"], 8), ("short_b64", sets["short"], 64),
                               ("long_b8", sets["long"], 8), ("long_b64", sets["long"], 64),
                               ("lme", sets["lme"], 64)]:  # fmt: skip
        if items:
            row[f"{name}_per_s"], vectors[name] = await rate(embedder, items, batch)
        progress.update(1)
    latencies, answers = [], []
    for query in queries:
        begin = time.perf_counter()
        answers.append(await embedder.embed([query]))
        latencies.append((time.perf_counter() - begin) * 1e3)
    progress.update(1)
    row["query_p50_ms"], row["query_p95_ms"] = (float(np.percentile(latencies, p)) for p in (50, 95))
    vectors["query"] = np.concatenate(answers)
    row["_vectors"] = np.concatenate([vectors[k] for k in sorted(vectors) if k != "short_b8"])
    row["threads"] = embedder.threads
    return row


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    runtimes = [r for r in args.runtimes.split(",") if r]
    sets = {"short": texts(args.short, 20, 1), "long": texts(args.long, 300, 2), "lme": lme_turns(args.lme, args.turns)}
    queries = texts(args.queries, 12, 3)
    rows = []
    with tqdm(total=len(runtimes) * 6, desc="embedder benchmark", unit="step") as progress:
        for runtime in runtimes:
            progress.set_postfix_str(runtime)
            rows.append(await bench_runtime(runtime, sets, queries, progress))
    reference = next((r["_vectors"] for r in rows if r["runtime"] == "torch"), None)
    for row in rows:
        vectors = row.pop("_vectors")
        if reference is not None and row["runtime"] != "torch":
            cosines = (vectors * reference).sum(axis=1)
            row["parity_min"], row["parity_mean"] = float(cosines.min()), float(cosines.mean())
    return {"machine": machine_info(), "texts": {k: len(v) for k, v in sets.items()}, "queries": len(queries),
            "rows": rows}  # fmt: skip


def plot(path: str, rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = [k for k in ("short_b8", "short_b64", "long_b8", "long_b64", "lme") if f"{k}_per_s" in rows[0]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(rows)
    for i, row in enumerate(rows):
        xs = np.arange(len(kinds)) + i * width
        left.bar(xs, [row.get(f"{k}_per_s", 0) for k in kinds], width, label=row["runtime"])
    left.set_xticks(np.arange(len(kinds)) + width * (len(rows) - 1) / 2, kinds)
    left.set_ylabel("texts/s")
    left.set_yscale("log")
    left.set_title("throughput (2 cores)")
    left.legend()
    names = [r["runtime"] for r in rows]
    right.bar(names, [r["query_p50_ms"] for r in rows], label="p50")
    right.scatter(names, [r["query_p95_ms"] for r in rows], color="black", label="p95", zorder=3)
    right.set_ylabel("ms")
    right.set_title("one query's embedding")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main() -> None:
    parser = figures_parser(__doc__)
    parser.add_argument("--runtimes", default="torch,onnx,onnx-int8", help="comma-separated; torch is the reference")
    parser.add_argument("--short", type=int, default=512, help="20-word texts")
    parser.add_argument("--long", type=int, default=64, help="300-word texts")
    parser.add_argument("--turns", type=int, default=1024, help="LongMemEval user turns (0: none)")
    parser.add_argument("--lme", type=Path, default=_LME, help="LongMemEval JSON (.json or .json.gz)")
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    figures = anyio.run(amain, args)
    print_table(figures["rows"], COLUMNS)
    write_json(args.json_path, figures)
    if args.plot:
        plot(args.plot, figures["rows"])


if __name__ == "__main__":
    main()
