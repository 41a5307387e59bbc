"""One system of the peers benchmark at one size, in a process of its own (so its peak RSS is its own):

    python -m benchmarks._peers_worker SYSTEM N --out result.json [--url URL] [--tmp DIR] [--queries 200]

Writes the system's figures (see ``benchmarks.peers``) as JSON to ``--out``, or ``{"skipped": why}`` when a
library it needs is not installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import time
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from tqdm import tqdm  # type: ignore[import-untyped, unused-ignore]

from ._peers_data import DIM, QUERY_USER, Workload, figures, numpy_search, rss_peak_mb, timed_queries, workload

__all__ = ["SYSTEMS", "missing"]

# System -> (the modules it imports, the package that brings them, what it is).
SYSTEMS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "numpy": ((), "numpy", "NumPy brute force, same process (reference)"),
    "memkit-memory": ((), "memkit-sdk", "memkit memory://"),
    "memkit-sqlite": ((), "memkit-sdk", "memkit sqlite:// (a temp file)"),
    "memkit-redis": (("redis",), "memkit-sdk[redis]", "memkit Redis Stack (server started for the run)"),
    "memkit-postgres": (("asyncpg",), "memkit-sdk[postgres]", "memkit Postgres + pgvector (server started)"),
    "langgraph": (("langgraph",), "langgraph", "LangGraph InMemoryStore (index, namespace per user)"),
    "chroma-memory": (("chromadb",), "chromadb", "Chroma EphemeralClient (where user)"),
    "chroma-persistent": (("chromadb",), "chromadb", "Chroma PersistentClient, temp dir (where user)"),
    "mem0-faiss": (("mem0", "faiss"), "mem0ai faiss-cpu", "Mem0 Memory, FAISS store, infer=False"),
    "mem0-qdrant": (("mem0", "qdrant_client"), "mem0ai qdrant-client", "Mem0 Memory, local Qdrant, infer=False"),
}


def missing(system: str) -> str | None:
    """The install command for a system whose libraries are absent, else None."""
    modules, package, _ = SYSTEMS[system]
    if all(importlib.util.find_spec(m) is not None for m in modules):
        return None
    return f'pip install {package}  (or every peer: pip install -e ".[bench-peers]")'


def run_numpy(work: Workload) -> dict[str, Any]:
    """The rows gathered into a matrix and an index of each user's rows; search as in the reference."""
    rows = list(work.vectors)
    started = time.perf_counter()
    matrix = np.stack(rows)
    users = np.array(work.users)
    index = {u: np.flatnonzero(users == u) for u in np.unique(users)}
    rate = work.n / (time.perf_counter() - started)

    buffer = np.empty((len(index[QUERY_USER]), DIM), dtype=np.float32)

    def search(j: int) -> list[int]:
        return [int(r) for r in numpy_search(matrix, index[QUERY_USER], work.query_vectors[j], buffer)]

    with tqdm(total=len(work.query_texts), desc="numpy queries", unit="query", leave=False) as progress:
        times, found = timed_queries(search, len(work.query_texts), progress)
    return {"ingest_per_s": rate, "ingest_api": "np.stack + user index"} | figures(work, times, found)


def run(system: str, work: Workload, args: argparse.Namespace) -> dict[str, Any]:
    if system == "numpy":
        return run_numpy(work)
    if system.startswith("memkit-"):
        from ._peers_memkit import run_memkit

        return anyio.run(run_memkit, args.url, work, args.one_by_one, args.store_seconds)
    from . import _peers_libs

    runner = getattr(_peers_libs, "run_" + system.replace("-", "_"))
    result: dict[str, Any] = runner(work, Path(args.tmp), args)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("system", choices=sorted(SYSTEMS))
    parser.add_argument("n", type=int)
    parser.add_argument("--out", required=True)
    parser.add_argument("--url", help="memkit storage URL (memkit-* systems)")
    parser.add_argument("--tmp", default=".", help="a directory for on-disk stores")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--one-by-one", type=int, default=1_000, help="notes written by the one-at-a-time API")
    parser.add_argument("--store-seconds", type=float, default=30.0, help="time budget for those")
    args = parser.parse_args()
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")  # Chroma's
    if why := missing(args.system):
        result: dict[str, Any] = {"skipped": f"not installed: {why}"}
    else:
        work = workload(args.n, args.queries, args.seed)
        result = run(args.system, work, args) | {"rss_peak_mb": rss_peak_mb()}
    Path(args.out).write_text(json.dumps({"system": args.system, "n": args.n, **result}, indent=2))


if __name__ == "__main__":
    main()
