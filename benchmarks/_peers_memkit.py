"""memkit in the peers benchmark, through its public API only: ``long_term.store_many`` for the bulk of the
notes, ``long_term.store`` one by one for the last ones (on a time budget: the rate is extrapolated from
those stored and the JSON says how many), and ``long_term.recall`` with similarity-only weights (compared
with the truth) and with the default weights (access tracking on, as users run it)."""

from __future__ import annotations

import time
from typing import Any

from tqdm import tqdm  # type: ignore[import-untyped, unused-ignore]

from ._peers_data import QUERY_USER, K, Workload, figures, rss_peak_mb
from .ingest import LookupEmbedder

__all__ = ["run_memkit"]

BATCH = 1_000


def _index(content: str) -> int:
    """The note's position in the workload, from its text ("note 123: ...")."""
    return int(content.split(":", 1)[0].removeprefix("note "))


async def _ingest(lt: Any, work: Workload, one_by_one: int, store_seconds: float) -> dict[str, Any]:
    from memkit import NewMemory

    n = work.n
    split = n - min(one_by_one, n // 10)
    statuses: list[str] = []
    with tqdm(total=n, desc=f"memkit ingest {n}", unit="note", leave=False) as progress:
        begun = started = time.perf_counter()
        for start in range(0, split, BATCH):
            end = min(split, start + BATCH)
            batch = [NewMemory(content=work.texts[i], user_id=work.users[i]) for i in range(start, end)]
            statuses += [r.status for r in await lt.store_many(batch)]
            progress.update(end - start)
        many_s = time.perf_counter() - started
        started = time.perf_counter()
        at = split
        while at < n and time.perf_counter() - started < store_seconds:
            statuses.append((await lt.store(work.texts[at], user_id=work.users[at])).status)
            at += 1
            progress.update(1)
        one_s, one_n = time.perf_counter() - started, at - split
        # Notes the time budget left over go in untimed, so every system searches the same n notes.
        rest = [NewMemory(content=work.texts[i], user_id=work.users[i]) for i in range(at, n)]
        statuses += [r.status for r in await lt.store_many(rest)] if rest else []
        progress.update(n - at)
    return {"ingest_per_s": split / many_s, "ingest_api": "store_many (batches of 1,000)",
            "store_per_s": one_n / one_s if one_n else None, "store_n": one_n,
            "store_extrapolated": one_n < n, "not_stored": len(statuses) - statuses.count("stored"),
            "ingest_wall_s": time.perf_counter() - begun}  # fmt: skip


async def _queries(lt: Any, work: Workload, weights: Any, label: str) -> tuple[list[float], list[list[int]]]:
    times, found = [], []
    for text in tqdm(work.query_texts, desc=label, unit="query", leave=False):
        started = time.perf_counter()
        hits = await lt.recall(text, user_id=QUERY_USER, k=K, weights=weights)
        times.append(time.perf_counter() - started)
        found.append([_index(h.memory.content) for h in hits])
    return times, found


async def run_memkit(url: str, work: Workload, one_by_one: int, store_seconds: float) -> dict[str, Any]:
    from memkit import Memkit, Weights

    similarity_only = Weights(similarity=1, lexical=0, recency=0, importance=0)
    async with Memkit(url, embedder=LookupEmbedder(work.lookup())) as mem:
        lt = mem.long_term
        row = await _ingest(lt, work, one_by_one, store_seconds)
        times, found = await _queries(lt, work, similarity_only, "memkit recall (similarity only)")
        row |= figures(work, times, found)
        default_times, _ = await _queries(lt, work, None, "memkit recall (default weights)")
        default = figures(work, default_times, None)
        row |= {"default_p50_ms": default["p50_ms"], "default_p95_ms": default["p95_ms"],
                "default_first_query_ms": default["first_query_ms"]}  # fmt: skip
    return row | {"rss_peak_mb": rss_peak_mb()}
