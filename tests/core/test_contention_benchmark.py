"""The contention benchmark runs end to end at tiny sizes on memory:// (its figures are not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_contention_benchmark_writes_json(tmp_path: Path) -> None:
    out, png = tmp_path / "contention.json", tmp_path / "contention.png"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.contention", "--size", "200", "--stores", "20", "--readers", "2",
         "--backends", "memory", "--no-exit-check", "--json", str(out), "--plot", str(png)],
        check=True, capture_output=True, text=True, timeout=600, cwd=Path(__file__).parents[2],
    )  # fmt: skip
    payload = json.loads(out.read_text())
    [row] = payload["rows"]
    assert row["backend"] == "memory" and row["n"] == 200 and row["stores"] == 20 and row["readers"] == 2
    for key in ("alone_p50_ms", "alone_p99_ms", "loaded_p50_ms", "loaded_p99_ms", "p99_ratio", "recalls_per_s"):
        assert row[key] > 0, key
    assert row["alone_p50_ms"] <= row["alone_p99_ms"] and row["loaded_p50_ms"] <= row["loaded_p99_ms"]
    assert row["target"] in ("met", "MISSED") and payload["target_p99_ratio"] == 3.0
    assert payload["exit"] == []
    assert "p99_ratio" in done.stdout  # the printed table
    assert png.stat().st_size > 10_000
