"""Issue 18's targets for memkit, checked on one run's rows at the largest size every system involved reached."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["PEERS", "targets"]

Rows = dict[str, dict[str, Any]]
PEERS = ("langgraph", "chroma-memory", "chroma-persistent", "mem0-faiss", "mem0-qdrant")


def _at(rows: list[dict[str, Any]], systems: tuple[str, ...]) -> tuple[int, dict[str, dict[str, Any]]] | None:
    """The largest n at which memkit-memory and at least one of ``systems`` were measured, with their rows."""
    sizes = sorted({r["n"] for r in rows if r["system"] == "memkit-memory"}, reverse=True)
    for n in sizes:
        found = {r["system"]: r for r in rows if r["n"] == n}
        if any(s in found for s in systems):
            return n, found
    return None


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def check(name: str, systems: tuple[str, ...], test: Callable[[Rows], tuple[bool, str]]) -> None:
        if (found := _at(rows, systems)) is None:
            return
        n, by_system = found
        met, detail = test(by_system)
        out.append({"target": name, "n": n, "met": met, "detail": f"n={n}: {detail}"})

    def fastest_peer(by: Rows) -> tuple[bool, str]:
        name = min((s for s in PEERS if s in by), key=lambda s: by[s]["p50_ms"])
        ratio = by["memkit-memory"]["p50_ms"] / by[name]["p50_ms"]
        return ratio <= 0.5, f"{ratio:.2f}x {name}'s p50"

    def numpy(by: Rows) -> tuple[bool, str]:
        ratio = by["memkit-memory"]["p50_over_numpy"]
        return ratio <= 1.5, f"{ratio:.2f}x the NumPy reference in its own process"

    def ingest(by: Rows) -> tuple[bool, str]:
        ratio = by["memkit-memory"]["ingest_per_s"] / by["langgraph"]["ingest_per_s"]
        return ratio >= 8, f"{ratio:.2f}x LangGraph's"

    def rss(by: Rows) -> tuple[bool, str]:
        mine, theirs = by["memkit-memory"]["rss_peak_mb"], by["langgraph"]["rss_peak_mb"]
        return mine <= theirs, f"{mine:.0f} MB against LangGraph's {theirs:.0f} MB"

    def recall(by: Rows) -> tuple[bool, str]:
        value = by["memkit-memory"]["recall_at_10"]
        return value >= 1.0, f"{value:.3f}"

    def sqlite(by: Rows) -> tuple[bool, str]:
        ratio = by["memkit-sqlite"]["p50_ms"] / by["memkit-memory"]["p50_ms"]
        default = by["memkit-sqlite"]["default_p50_ms"] / by["memkit-memory"]["default_p50_ms"]
        return ratio <= 1.5, f"{ratio:.2f}x memory://'s p50 (default weights: {default:.2f}x)"

    check("memory:// p50 <= 0.5x the fastest peer library's", PEERS, fastest_peer)
    check("memory:// p50 <= 1.5x NumPy", ("memkit-memory",), numpy)
    check("store_many ingest >= 8x LangGraph's", ("langgraph",), ingest)
    check("memory:// peak RSS <= LangGraph's", ("langgraph",), rss)
    check("memory:// recall@10 = 1.00 (similarity only)", ("memkit-memory",), recall)
    check("sqlite:// p50 <= 1.5x memory://'s", ("memkit-sqlite",), sqlite)
    return out
