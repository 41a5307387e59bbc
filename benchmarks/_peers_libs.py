"""The peer libraries in the peers benchmark, each through its public API with the workload's vectors.

Every system writes the notes with its bulk call in batches of 1,000, then its one-at-a-time call for the
last ones (up to ``--one-by-one`` notes, on a ``--store-seconds`` budget; the rate is extrapolated from those
written, and the rest go in by the bulk call so every system searches the same n notes). Mem0 has no bulk
call: ``add()`` is timed on the last notes and the others are written straight into its vector store
(``Memory.vector_store.insert``, with the payload ``add()`` writes), as ``add()`` alone would take hours.
"""

from __future__ import annotations

import argparse
import hashlib
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tqdm import tqdm  # type: ignore[import-untyped, unused-ignore]

from ._peers_data import DIM, QUERY_USER, K, Workload, figures, timed_queries

__all__ = ["run_chroma_memory", "run_chroma_persistent", "run_langgraph", "run_mem0_faiss", "run_mem0_qdrant"]

BATCH = 1_000
Bulk = Callable[[range], None]


def _index(text: str) -> int:
    return int(text.split(":", 1)[0].removeprefix("note "))


def _ingest(work: Workload, bulk: Bulk, one: Callable[[int], None], args: argparse.Namespace,
            batch: int = BATCH) -> dict[str, Any]:  # fmt: skip
    n = work.n
    split = n - min(args.one_by_one, n // 10)
    with tqdm(total=n, desc=f"ingest {n}", unit="note", leave=False) as progress:
        begun = started = time.perf_counter()
        for start in range(0, split, batch):
            bulk(range(start, min(split, start + batch)))
            progress.update(min(split, start + batch) - start)
        bulk_s = time.perf_counter() - started
        started, at = time.perf_counter(), split
        while at < n and time.perf_counter() - started < args.store_seconds:
            one(at)
            at += 1
            progress.update(1)
        one_s, one_n = time.perf_counter() - started, at - split
        if at < n:
            bulk(range(at, n))
            progress.update(n - at)
    return {"bulk_per_s": split / bulk_s, "store_per_s": one_n / one_s if one_n else None, "store_n": one_n,
            "store_extrapolated": one_n < n, "ingest_wall_s": time.perf_counter() - begun}  # fmt: skip


def _measure(work: Workload, search: Callable[[int], list[int]]) -> dict[str, Any]:
    with tqdm(total=len(work.query_texts), desc="queries", unit="query", leave=False) as progress:
        times, found = timed_queries(search, len(work.query_texts), progress)
    return figures(work, times, found)


# -- LangGraph --------------------------------------------------------------------------------------------
def run_langgraph(work: Workload, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    """InMemoryStore with its vector index; a namespace per user, searched by that prefix. The embed
    function returns lists of floats, as the index's contract (and every LangChain embedder) has it."""
    from langgraph.store.base import PutOp  # type: ignore[import-not-found, unused-ignore]
    from langgraph.store.memory import InMemoryStore  # type: ignore[import-not-found, unused-ignore]

    lookup = work.lookup()
    store = InMemoryStore(index={"dims": DIM, "embed": lambda texts: [lookup[t].tolist() for t in texts],
                                 "fields": ["text"]})  # fmt: skip

    def bulk(rows: range) -> None:
        store.batch([PutOp(("memories", work.users[i]), f"n{i}", {"text": work.texts[i]}) for i in rows])

    def one(i: int) -> None:
        store.put(("memories", work.users[i]), f"n{i}", {"text": work.texts[i]})

    def search(j: int) -> list[int]:
        items = store.search(("memories", QUERY_USER), query=work.query_texts[j], limit=K)
        return [int(item.key[1:]) for item in items]

    row = _ingest(work, bulk, one, args)
    row |= {"ingest_per_s": row["bulk_per_s"], "ingest_api": "batch(PutOp x 1,000); store_per_s: put()"}
    return row | _measure(work, search)


# -- Chroma -----------------------------------------------------------------------------------------------
def _chroma(client: Any, work: Workload, args: argparse.Namespace) -> dict[str, Any]:
    collection = client.create_collection("bench", configuration={"hnsw": {"space": "cosine"}},
                                          embedding_function=None)  # fmt: skip

    def bulk(rows: range) -> None:
        collection.add(ids=[f"n{i}" for i in rows], embeddings=work.vectors[rows.start : rows.stop],
                       documents=[work.texts[i] for i in rows],
                       metadatas=[{"user": work.users[i]} for i in rows])  # fmt: skip

    def search(j: int) -> list[int]:
        found = collection.query(query_embeddings=work.query_vectors[j : j + 1], n_results=K,
                                 where={"user": QUERY_USER}, include=[])  # fmt: skip
        return [int(i[1:]) for i in found["ids"][0]]

    row = _ingest(work, bulk, lambda i: bulk(range(i, i + 1)), args)
    row |= {"ingest_per_s": row["bulk_per_s"], "ingest_api": "add(1,000 at once); store_per_s: add(one)"}
    return row | _measure(work, search)


def run_chroma_memory(work: Workload, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    import chromadb  # type: ignore[import-not-found, unused-ignore]

    return _chroma(chromadb.EphemeralClient(), work, args)


def run_chroma_persistent(work: Workload, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    import chromadb  # type: ignore[import-not-found, unused-ignore]

    return _chroma(chromadb.PersistentClient(path=str(tmp / "chroma")), work, args)


# -- Mem0 -------------------------------------------------------------------------------------------------
def _mem0(vector_store: dict[str, Any], work: Workload, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Memory with a local vector store, ``infer=False`` (no LLM runs), and an embedder that returns the
    workload's vectors set on it (the OpenAI embedder it is built with never runs, so needs no key)."""
    import os

    os.environ.setdefault("OPENAI_API_KEY", "unused-offline")
    from mem0 import Memory  # type: ignore[import-not-found, unused-ignore]
    from mem0.embeddings.base import EmbeddingBase  # type: ignore[import-not-found, unused-ignore]

    lookup = work.lookup()

    class FixedVectors(EmbeddingBase):  # type: ignore[misc]
        def __init__(self) -> None:
            pass  # no model, no config: the vectors are the workload's

        def embed(self, text: str, memory_action: str | None = None) -> list[float]:
            return [float(x) for x in lookup[text]]

    memory = Memory.from_config({"vector_store": vector_store, "history_db_path": str(tmp / "history.db"),
                                 "embedder": {"provider": "openai", "config": {"embedding_dims": DIM}}})  # fmt: skip
    memory.embedding_model = FixedVectors()
    lemmatize = _mem0_lemmatizer()

    def bulk(rows: range) -> None:
        now = datetime.now(UTC).isoformat()
        payloads = [{"user_id": work.users[i], "role": "user", "data": work.texts[i], "created_at": now,
                     "updated_at": now, "hash": hashlib.md5(work.texts[i].encode()).hexdigest(),
                     "text_lemmatized": lemmatize(work.texts[i])} for i in rows]  # fmt: skip
        memory.vector_store.insert(vectors=[work.vectors[i].tolist() for i in rows], payloads=payloads,
                                   ids=[str(uuid.uuid4()) for _ in rows])  # fmt: skip

    def one(i: int) -> None:
        memory.add(work.texts[i], user_id=work.users[i], infer=False)

    def search(j: int) -> list[int]:
        # threshold=0: every one of the top-10 back, however weak (the default, 0.1, drops the weak ones)
        found = memory.search(work.query_texts[j], filters={"user_id": QUERY_USER}, top_k=K, threshold=0.0)
        return [_index(hit["memory"]) for hit in found["results"]]

    row = _ingest(work, bulk, one, args, batch=10_000)  # FAISS rewrites its files on every insert call
    row |= {"ingest_per_s": row["store_per_s"], "bulk_fill_per_s": row.pop("bulk_per_s"),
            "ingest_api": "add(infer=False), one by one; the rest via vector_store.insert"}  # fmt: skip
    return row | _measure(work, search)


def _mem0_lemmatizer() -> Callable[[str], str]:
    try:
        from mem0.utils.lemmatization import lemmatize_for_bm25  # type: ignore[import-not-found, unused-ignore]

        return lemmatize_for_bm25  # type: ignore[no-any-return]
    except ImportError:
        return lambda text: text.lower()


def run_mem0_faiss(work: Workload, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    store = {"provider": "faiss", "config": {"collection_name": "bench", "path": str(tmp / "faiss"),
                                             "distance_strategy": "cosine", "embedding_model_dims": DIM}}  # fmt: skip
    return _mem0(store, work, tmp, args)


def run_mem0_qdrant(work: Workload, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    from qdrant_client import QdrantClient  # type: ignore[import-not-found, unused-ignore]

    client = QdrantClient(location=":memory:")  # Qdrant's local mode, in memory: no server
    store = {"provider": "qdrant", "config": {"collection_name": "bench", "client": client,
                                              "embedding_model_dims": DIM}}  # fmt: skip
    return _mem0(store, work, tmp, args)
