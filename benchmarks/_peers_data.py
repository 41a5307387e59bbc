"""The peers benchmark's workload, its truth, and the figures every system reports the same way.

The workload: ``n`` notes of ``USERS`` users (note ``i`` belongs to ``user{i % USERS}``), each a short
text with a pre-computed dim-384 float32 unit vector (clustered, as embeddings of real notes are), and
``QUERIES`` fresh query vectors from the same distribution, all asked for ``QUERY_USER``'s top-10. Every
process rebuilds it from the seed, so the parent and each system's own process hold the same data.
The truth is the exact filtered top-10 by cosine similarity, computed with NumPy.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "DIM",
    "USERS",
    "Workload",
    "figures",
    "numpy_reference",
    "numpy_search",
    "recall_at_k",
    "rss_peak_mb",
    "workload",
]

DIM = 384
USERS = 10
QUERY_USER = "user3"
K = 10
TIE = 1e-5
"""A returned note counts as a true hit when its exact score is within this of the 10th best: two systems
summing the same float32 products in different orders may swap notes that are tied to the 7th digit."""


@dataclass(frozen=True)
class Workload:
    texts: list[str]
    users: list[str]
    vectors: np.ndarray  # (n, DIM) float32, unit rows
    query_texts: list[str]
    query_vectors: np.ndarray  # (queries, DIM) float32, unit rows
    user_rows: np.ndarray  # the indices of QUERY_USER's notes, ascending

    @property
    def n(self) -> int:
        return len(self.texts)

    def lookup(self) -> dict[str, np.ndarray]:
        """Text -> vector for every note and query: what a fixed-vector embedder returns."""
        table = dict(zip(self.texts, self.vectors, strict=True))
        table.update(zip(self.query_texts, self.query_vectors, strict=True))
        return table


def _clustered(rng: np.random.Generator, centres: np.ndarray, n: int) -> np.ndarray:
    vectors = centres[rng.integers(0, len(centres), n)] + 0.8 * rng.standard_normal((n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    result: np.ndarray = vectors.astype(np.float32)
    return result


def _words(rng: np.random.Generator, n: int) -> list[str]:
    """Eight words a note from a Zipf-like vocabulary of 5,000 pseudo-words (for the lexical signal)."""
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = np.array(["".join(rng.choice(letters, int(rng.integers(4, 9)))) for _ in range(5_000)])
    odds = 1.0 / np.arange(1, len(vocab) + 1)
    words = vocab[rng.choice(len(vocab), size=(n, 8), p=odds / odds.sum())]
    return [" ".join(row) for row in words]


def workload(n: int, queries: int = 200, seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((200, DIM)).astype(np.float32)
    vectors = _clustered(rng, centres, n)
    words = _words(rng, n + queries)
    query_vectors = _clustered(rng, centres, queries)
    texts = [f"note {i}: {words[i]}" for i in range(n)]
    query_texts = [f"query {j}: {words[n + j]}" for j in range(queries)]
    users = [f"user{i % USERS}" for i in range(n)]
    user_rows = np.arange(int(QUERY_USER.removeprefix("user")), n, USERS)
    return Workload(texts, users, vectors, query_texts, query_vectors, user_rows)


def truth(work: Workload) -> tuple[np.ndarray, np.ndarray]:
    """Per query: the exact scores of every one of QUERY_USER's notes, and the 10th best score."""
    scores = work.query_vectors @ work.vectors[work.user_rows].T  # (queries, user's notes)
    kth = -np.partition(-scores, K - 1, axis=1)[:, K - 1]
    return scores, kth


def recall_at_k(work: Workload, found: Sequence[Sequence[int]]) -> float:
    """Mean share of the true top-10 among each query's returned note indices (ties within TIE count)."""
    scores, kth = truth(work)
    position = {int(row): at for at, row in enumerate(work.user_rows)}
    shares = []
    for j, rows in enumerate(found):
        mine = [position[r] for r in dict.fromkeys(int(r) for r in rows) if r in position]
        shares.append(min(K, sum(scores[j, p] >= kth[j] - TIE for p in mine)) / K)
    return float(np.mean(shares)) if shares else 0.0


def numpy_search(matrix: np.ndarray, rows: np.ndarray, query: np.ndarray, buffer: np.ndarray) -> np.ndarray:
    """Brute force: the user's rows (an index kept beside the matrix) gathered and scored, the top-10 best
    first. ``buffer`` holds the gathered rows between queries: a fresh 15 MB array per query at 100k made
    the time depend on the process's allocator state (page faults), 2-16 ms across processes in one run."""
    np.take(matrix, rows, axis=0, out=buffer)
    scores = buffer @ query
    top = np.argpartition(-scores, K - 1)[:K]
    result: np.ndarray = rows[top[np.argsort(-scores[top])]]
    return result


def numpy_reference(work: Workload) -> list[float]:
    """``numpy_search`` for every query, in this process; per-query seconds."""
    buffer = np.empty((len(work.user_rows), DIM), dtype=np.float32)
    times = []
    for q in work.query_vectors:
        started = time.perf_counter()
        numpy_search(work.vectors, work.user_rows, q, buffer)
        times.append(time.perf_counter() - started)
    return times


def rss_peak_mb() -> float:
    """This process's peak resident memory (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed_queries(search: Callable[[int], list[int]], count: int, progress: Any) -> tuple[list[float], list[list[int]]]:
    """Runs ``search(j)`` for each query j in order; returns per-query seconds and the note indices found."""
    times, found = [], []
    for j in range(count):
        started = time.perf_counter()
        rows = search(j)
        times.append(time.perf_counter() - started)
        found.append(rows)
        progress.update(1)
    return times, found


def figures(work: Workload, times: Sequence[float], found: Sequence[Sequence[int]] | None) -> dict[str, Any]:
    """p50/p95 in ms over the queries after the first (whose latency is reported on its own), recall@10,
    and the p50 as a ratio to the NumPy reference timed here, in this process, on the same queries."""
    reference = float(np.median(numpy_reference(work)[1:])) * 1000
    warm = np.asarray(times[1:] or times) * 1000
    p50 = float(np.percentile(warm, 50))
    return {
        "first_query_ms": times[0] * 1000,
        "p50_ms": p50,
        "p95_ms": float(np.percentile(warm, 95)),
        "recall_at_10": recall_at_k(work, found) if found is not None else None,
        "numpy_p50_ms": reference,
        "p50_over_numpy": p50 / reference,
    }
