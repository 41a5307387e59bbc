"""Recall in rounds with access statistics on: does a store slow down as its memories are recalled?

    python -m benchmarks.recall_rounds --json out/recall_rounds.json [--plot out/recall_rounds.png]
                                       [--size 100k] [--rounds 5] [--queries 300] [--backends postgres]

For each backend, on storage of its own: ``--size`` memories of 100 users stored with ``store_many`` (vectors
from ``LookupEmbedder``, so no model is measured), then ``--rounds`` rounds of the same ``--queries`` recalls
(a random stored text of a random user, k=10, the default hybrid score, access tracking on as by default).
Each recall counts its hits, and the counts are written in the background; after each round the benchmark
waits for them to be written. Rows: ``{"backend", "n", "round", "recall_p50_ms", "recall_mean_ms"}``.

On Postgres the counts once went into the records' own rows: each count rewrote a ~2 KB row and, when the
rewrite was not a HOT update, added an entry to every index, and p50 grew round after round (11.7 -> 18.4 ms
over three rounds at 100k). Since schema 4 they go to a counters table beside the records.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from tqdm import tqdm

from ._report import Panel, bar_panels, figures_parser, print_table, write_json
from ._servers import backend_urls
from .ingest import BATCH, LookupEmbedder, corpus, parse_sizes

_FLUSHED_S = 1.5
"""Wait after a round: the access statistics are written 0.5 s after a recall (``AccessTracker``)."""


async def bench_backend(url: str, n: int, rounds: int, queries: int, progress: Any) -> list[dict[str, Any]]:
    from memkit import Memkit, NewMemory

    items, vectors = corpus(n, keep_all=False)
    rows = []
    async with Memkit(url, embedder=LookupEmbedder(vectors)) as mem:
        lt = mem.long_term
        for start in range(0, n, BATCH):
            vectors.draw(start)
            await lt.store_many([NewMemory(content=text, user_id=user) for user, text in items[start : start + BATCH]])
            progress.update(min(BATCH, n - start))
        rng = np.random.default_rng(11)
        asked = [items[int(rng.integers(0, n))] for _ in range(queries)]
        vectors.pin([text for _, text in asked])
        for user, text in asked[:10]:  # compiled and warm before anything is timed
            await lt.recall(text, user_id=user, k=10)
        await anyio.sleep(_FLUSHED_S)
        for at in range(rounds):
            times = []
            for user, text in asked:
                started = time.perf_counter()
                await lt.recall(text, user_id=user, k=10)
                times.append(time.perf_counter() - started)
                progress.update(1)
            await anyio.sleep(_FLUSHED_S)
            rows.append({"n": n, "round": at + 1, "recall_p50_ms": float(np.median(times)) * 1000,
                         "recall_mean_ms": float(np.mean(times)) * 1000})  # fmt: skip
    return rows


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    [n] = parse_sizes(args.size)
    wanted = args.backends.split(",")
    rows: list[dict[str, Any]] = []
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        total = (n + args.rounds * args.queries) * len(wanted)
        progress = stack.enter_context(tqdm(total=total, desc="recall rounds", unit="op"))
        for name in wanted:  # each on a server, file or schema of its own
            where = Path(tmp) / name
            where.mkdir()
            urls = backend_urls([name], stack, where, name="rounds", redis_modules=True)
            found = anyio.run(bench_backend, urls[name], n, args.rounds, args.queries, progress)
            rows += [{"backend": name, **row} for row in found]
    return rows


def plot(path: str, rows: list[dict[str, Any]]) -> None:
    backends = list(dict.fromkeys(row["backend"] for row in rows))
    rounds = sorted({row["round"] for row in rows})
    p50 = {(row["backend"], row["round"]): row["recall_p50_ms"] for row in rows}
    series = {name: [p50.get((name, r), 0.0) for r in rounds] for name in backends}
    labels = [f"round {r}" for r in rounds]
    bar_panels(path, "recall with access statistics on, the same queries in rounds",
               [Panel("recall p50 per round", "ms", labels, series)])  # fmt: skip


def main() -> None:
    parser = figures_parser(__doc__)
    parser.add_argument("--size", default="100k", help="memories stored first, e.g. 100k")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--queries", type=int, default=300, help="recalls per round (the same ones each round)")
    parser.add_argument("--backends", default="postgres", help="comma-separated: memory, sqlite, redis, postgres")
    args = parser.parse_args()
    rows = run(args)
    print_table(rows, ["backend", "n", "round", "recall_p50_ms", "recall_mean_ms"])
    write_json(args.json_path, rows)
    if args.plot:
        plot(args.plot, rows)


if __name__ == "__main__":
    main()
