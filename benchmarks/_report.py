"""Shared output for benchmarks: a printed table, JSON, and an optional PNG."""

from __future__ import annotations

import json
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["machine_info", "print_table", "python_probe_ms", "write_json"]


def machine_info() -> dict[str, Any]:
    import os

    import numba
    import numpy

    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "numpy": numpy.__version__,
        "numba": numba.__version__,
    }


def python_probe_ms(repeat: int = 5) -> float:
    """Milliseconds a fixed piece of pure Python takes here (best of ``repeat``): dicts, tuples, strings and
    sorting, what a layer's own code does between backend calls. Printed beside figures in milliseconds or
    items per second, so runs of different hours or machines can be compared: this 2-core machine's speed
    moves by half between runs minutes apart, and a target met or missed in one run says little alone."""
    import time

    best = float("inf")
    for _ in range(repeat):
        began = time.perf_counter()
        index: dict[tuple[str, int], list[int]] = {}
        for i in range(60_000):
            key = (f"key {i % 5_000}", i % 7)
            index.setdefault(key, []).append(i)
        ordered = sorted(index.items(), key=lambda item: (len(item[1]), item[0]))
        "|".join(f"{k[0]}:{len(v)}" for k, v in ordered)
        best = min(best, time.perf_counter() - began)
    return best * 1000


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.3f}" if abs(value) < 1000 else f"{value:.0f}"
        return str(value)

    widths = [max(len(c), *(len(cell(r.get(c, ""))) for r in rows)) for c in columns]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)))
    for row in rows:
        print("  ".join(cell(row.get(c, "")).rjust(w) for c, w in zip(columns, widths, strict=True)))


def write_json(path: str | None, payload: Any) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {path}")
