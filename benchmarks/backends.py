"""Backends side by side: bulk ingest, recall latency, and how exact the server rerank is.

    python -m benchmarks.backends --json out/backends.json [--plot out/backends.png] [--data locomo_dev.json]

For each available backend (memory, sqlite, redis, postgres), in one run:

- ingest_per_s: pre-embedded memories (dim 384, 100 users, 8 words each from a Zipf-distributed
  vocabulary of 5,000 pseudo-words) written
  in batches of 1,000 through the backend contract, at 10k and 100k.
- recall_p50_ms / recall_p95_ms: one user's top-10 by the default hybrid score (vector + text),
  query embedding excluded.
- overlap_at_10: on LoCoMo dev embeddings (MiniLM over every turn, random importance, session dates
  as timestamps), the share of the exact in-process hybrid top-10 that the backend returns, with
  the reference design's recency- and importance-heavy weights (0.5 similarity, 0.2 recency, 0.3
  importance), per conversation and across all conversations. Needs --data or MEMKIT_LOCOMO_PATH.

Redis Stack and Postgres come from ``--redis-url`` / ``--postgres-url`` (or MEMKIT_BENCH_REDIS_URL /
MEMKIT_BENCH_POSTGRES_URL); without them they are started from the wheels the dev extra installs.
Pinecone and Weaviate rows appear only when MEMKIT_BENCH_PINECONE_URL / MEMKIT_BENCH_WEAVIATE_URL are set
(a Pinecone index of dimension 384, cosine); nothing starts them.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from tqdm import tqdm

from memkit import open_backend
from memkit.backend import Backend, Query, Record, Scope, Weights

from ._report import Panel, bar_panels, print_table, write_json

DIM = 384
USERS = 100
REFERENCE = Weights(similarity=0.5, lexical=0.0, recency=0.2, importance=0.3)


def vocabulary(size: int = 5_000) -> np.ndarray:
    """Pseudo-words drawn Zipf-like (a few common, most rare), as words are in real notes."""
    rng = np.random.default_rng(99)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return np.array(["".join(rng.choice(letters, int(rng.integers(4, 9)))) for _ in range(size)])


def synthetic_records(n: int, seed: int = 0) -> list[Record]:
    rng = np.random.default_rng(seed)
    vocab = vocabulary()
    weights = 1.0 / np.arange(1, len(vocab) + 1)
    weights /= weights.sum()
    centres = rng.standard_normal((200, DIM)).astype(np.float32)
    vectors = centres[rng.integers(0, 200, n)] + 0.8 * rng.standard_normal((n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    now = time.time()
    words = vocab[rng.choice(len(vocab), size=(n, 8), p=weights)]
    return [
        Record(id=f"m{i:07d}", scope=Scope(user_id=f"user{i % USERS}"), body=b"x" * 64,
               text=" ".join(words[i]), vector=vectors[i],
               importance=float(rng.random()), timestamp=now - float(rng.random()) * 90 * 86400,
               fields={"kind": "fact"})
        for i in range(n)
    ]  # fmt: skip


async def ingest(backend: Backend, collection: str, records: list[Record]) -> float:
    await backend.ensure_collection(collection, DIM)
    started = time.perf_counter()
    for start in range(0, len(records), 1000):
        await backend.upsert(collection, records[start : start + 1000])
    return len(records) / (time.perf_counter() - started)


async def latencies(backend: Backend, collection: str, records: list[Record], n_queries: int) -> list[float]:
    rng = np.random.default_rng(1)
    times = []
    for _ in range(n_queries):
        probe = records[int(rng.integers(0, len(records)))]
        query = Query(scope=probe.scope, vector=probe.vector, text=probe.text, k=10, now=time.time())
        started = time.perf_counter()
        await backend.query(collection, query)
        times.append((time.perf_counter() - started) * 1000)
    return times


async def overlap(
    backend: Backend, exact: Backend, locomo: tuple[list[Record], list[Query]] | None, collection: str
) -> float | None:
    if locomo is None:
        return None
    records, queries = locomo
    for store in (backend, exact):
        await ingest(store, collection, records)
    shares = []
    for query in queries:
        want = {h.record.id for h in await exact.query(collection, query)}
        got = {h.record.id for h in await backend.query(collection, query)}
        shares.append(len(want & got) / max(1, len(want)))
    return float(np.mean(shares))


async def locomo_set(path: str | None) -> tuple[list[Record], list[Query]] | None:
    if not path:
        return None
    from memkit.embedders import LocalEmbedder

    from ._locomo_data import load

    conversations = load(Path(path))
    embedder = LocalEmbedder()
    rng = np.random.default_rng(7)
    records: list[Record] = []
    queries: list[Query] = []
    for conv in tqdm(conversations, desc="embedding LoCoMo", unit="conversation"):
        turns = [(t, s.at.timestamp()) for s in conv.sessions for t in s.turns]
        vectors = await embedder.embed([f"{t.speaker}: {t.text}" for t, _ in turns])
        records += [Record(id=f"{conv.sample_id}:{t.dia_id}", scope=Scope(user_id=conv.sample_id), body=b"",
                           vector=v, importance=float(rng.random()), timestamp=ts)
                    for (t, ts), v in zip(turns, vectors, strict=True)]  # fmt: skip
        as_of = conv.sessions[-1].at.timestamp()
        question_vectors = await embedder.embed([q.text for q in conv.questions[:40]])
        for i, v in enumerate(question_vectors):
            everyone = i % 4 == 0  # a quarter of the queries search every conversation at once
            scope = Scope() if everyone else Scope(user_id=conv.sample_id)
            queries.append(Query(scope=scope, all_scopes=everyone, vector=v, k=10, now=as_of, weights=REFERENCE))
    return records, queries


def server_urls(args: argparse.Namespace, stack: ExitStack, tmp: Path) -> dict[str, str]:
    urls = {"memory": "memory://", "sqlite": f"sqlite:///{tmp / 'bench.db'}"}
    redis_url = args.redis_url or os.environ.get("MEMKIT_BENCH_REDIS_URL")
    postgres_url = args.postgres_url or os.environ.get("MEMKIT_BENCH_POSTGRES_URL")
    try:
        from memkit.testing.servers import postgres_server, redis_server

        urls["redis"] = redis_url or stack.enter_context(redis_server(tmp / "redis", modules=True))
        postgres = postgres_url or stack.enter_context(postgres_server(tmp / "pg"))
        postgres += ("&" if "?" in postgres else "?") + f"schema=b_{uuid.uuid4().hex[:8]}"
        urls["postgres"] = postgres
        urls["postgres-hnsw"] = postgres.replace("schema=b_", "index=hnsw&schema=c_")
        urls["redis-hnsw"] = urls["redis"] + "?index=hnsw"
    except ImportError as exc:
        print(f"servers unavailable ({exc}); install the dev extra or pass --redis-url / --postgres-url")
    for name in ("pinecone", "weaviate"):  # managed services: measured only where their URLs are given
        if url := os.environ.get(f"MEMKIT_BENCH_{name.upper()}_URL"):
            urls[name] = url
    return urls


async def bench_backend(name: str, url: str, sizes: list[int], locomo: Any, progress: tqdm) -> list[dict[str, Any]]:  # type: ignore[type-arg]
    rows = []
    async with open_backend(url) as backend, open_backend("memory://") as exact:
        # Collections named per backend: two configurations may share one server.
        share = await overlap(backend, exact, locomo, f"overlap-{name}")
        for n in sizes:
            records = synthetic_records(n)
            collection = f"bench{n}-{name}"
            rate = await ingest(backend, collection, records)
            times = await latencies(backend, collection, records, 200)
            rows.append({"backend": name, "n": n, "ingest_per_s": rate,
                         "recall_p50_ms": float(np.percentile(times, 50)),
                         "recall_p95_ms": float(np.percentile(times, 95)), "overlap_at_10": share})  # fmt: skip
            progress.update(1)
    return rows


async def amain(args: argparse.Namespace) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    locomo = await locomo_set(args.data or os.environ.get("MEMKIT_LOCOMO_PATH"))
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        urls = server_urls(args, stack, Path(tmp))
        wanted = [b for b in args.backends.split(",") if b in urls]
        rows: list[dict[str, Any]] = []
        with tqdm(total=len(wanted) * len(sizes), desc="backends benchmark", unit="run") as progress:
            for name in wanted:
                rows += await bench_backend(name, urls[name], sizes, locomo, progress)
    print_table(rows, ["backend", "n", "ingest_per_s", "recall_p50_ms", "recall_p95_ms", "overlap_at_10"])
    write_json(args.json_path, rows)
    if args.plot:
        labels = [f"{r['backend']} {r['n']:,}" for r in rows]
        bar_panels(args.plot, "backends: bulk ingest and scoped recall", [
            Panel("bulk ingest", "records / s", labels, {"ingest": [r["ingest_per_s"] for r in rows]}, log=True),
            Panel("recall of one scope's top 10", "ms", labels, {"p50": [r["recall_p50_ms"] for r in rows],
                                                                   "p95": [r["recall_p95_ms"] for r in rows]}),
        ])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", dest="json_path", help="write the rows as JSON here")
    parser.add_argument("--data", help="LoCoMo JSON for overlap_at_10 (or MEMKIT_LOCOMO_PATH)")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--backends", default="memory,sqlite,redis,redis-hnsw,postgres,postgres-hnsw,pinecone,weaviate")
    parser.add_argument("--redis-url")
    parser.add_argument("--postgres-url")
    parser.add_argument("--plot", help="draw the figures as a PNG here (needs matplotlib)")
    anyio.run(amain, parser.parse_args())


if __name__ == "__main__":
    main()
