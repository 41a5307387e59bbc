"""The benchmarks run end to end on tiny sizes (their figures are not asserted: timings are noisy)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def run_benchmark(name: str, args: list[str], tmp_path: Path) -> tuple[Any, Path]:
    """``python -m benchmarks.NAME ARGS --json --plot`` in a subprocess: its JSON figures and its PNG's path."""
    out, png = tmp_path / f"{name}.json", tmp_path / f"{name}.png"
    subprocess.run([sys.executable, "-m", f"benchmarks.{name}", *args, "--json", str(out), "--plot", str(png)],
                   check=True, capture_output=True, timeout=600)  # fmt: skip
    return json.loads(out.read_text()), png


def test_scoring_benchmark_writes_json_and_plot(tmp_path: Path) -> None:
    rows, png = run_benchmark("scoring", ["--sizes", "3000", "--repeats", "3"], tmp_path)
    assert [row["dtype"] for row in rows] == ["float32", "float16", "int8"]
    for row in rows:
        assert set(row) >= {"n", "dtype", "fused_ms", "numpy_ms", "floor_ms", "recall_at_10"}
        assert row["n"] == 3000 and row["fused_ms"] > 0 and 0.9 <= row["recall_at_10"] <= 1.0
    assert png.stat().st_size > 10_000


def test_session_benchmark_writes_its_figures(tmp_path: Path) -> None:
    figures, png = run_benchmark("session", ["--turns", "60"], tmp_path)
    for key in ("add_p50_us", "add_p99_us", "compaction_ms", "facts_kept", "wm_set_us", "wm_context_us"):
        assert figures[key] >= 0, key
    assert figures["folds"] >= 1 and figures["over_budget"] == 0
    assert figures["max_rendered_tokens"] <= figures["budget"]
    assert png.stat().st_size > 10_000


def test_state_benchmark_writes_its_figures(tmp_path: Path) -> None:
    figures, png = run_benchmark("state", ["--backends", "memory"], tmp_path)
    (row,) = figures["cache"]
    assert row["backend"] == "memory" and row["single_flight_calls"] == 1
    assert row["cache_hit_us"] > 0 and "cache_miss_overhead_us" in row
    assert figures["state_messages"] > 500
    kinds = {(r["serializer"], r["compression"]) for r in figures["checkpoints"]}
    assert kinds == {("msgpack", "none"), ("msgpack", "zstd"), ("json", "none"), ("json", "zstd")}
    assert all(
        r["ckpt_save_ms"] > 0 and r["ckpt_load_ms"] > 0 and r["ckpt_bytes"] > 1000 for r in figures["checkpoints"]
    )
    assert png.stat().st_size > 10_000


def test_graph_benchmark_writes_its_figures(tmp_path: Path) -> None:
    figures, png = run_benchmark("graph", ["--backends", "memory", "--scale", "0.02", "--episodes", "200"], tmp_path)
    [row] = figures["backends"]
    assert figures["nodes"] == 200 and figures["edges"] == 1000
    assert row["graph_lost_updates"] == 0 and row["graph_upsert_per_s"] > 0 and row["graph_2hop_nodes_mean"] > 1
    assert 0 < row["graph_2hop_p50_ms"] <= row["graph_2hop_p95_ms"] and row["episodes_find_p50_ms"] > 0
    assert figures["machine"]["python_probe_ms_start"] > 0 and figures["machine"]["python_probe_ms_end"] > 0
    assert png.stat().st_size > 10_000


def test_context_benchmark_writes_its_figures(tmp_path: Path) -> None:
    figures, png = run_benchmark(
        "context", ["--embedder", "hashing", "--users", "3", "--contexts", "5", "--observes", "10"], tmp_path
    )
    for key in ("context_p50_ms", "context_p95_ms", "observe_return_p50_us", "observe_to_recallable_p50_ms"):
        assert figures[key] > 0, key
    assert png.stat().st_size > 10_000


def test_ingest_benchmark_writes_its_figures(tmp_path: Path) -> None:
    figures, png = run_benchmark("ingest", ["--sizes", "3000", "--backends", "memory,sqlite,memory-int8"], tmp_path)
    rows = figures["rows"]
    assert [(r["backend"], r["api"]) for r in rows] == [
        ("memory", "store_many"),
        ("memory", "store"),
        ("sqlite", "store_many"),
        ("sqlite", "store"),
        ("memory-int8", "store_many"),
        ("memory-int8", "store"),
    ]
    for row in rows:
        assert row["n"] == 3000 and row["per_s"] > 0 and row["per_s_median_last_batches"] > 0
        assert row["rss_peak_mb"] > 0
        assert (row.get("near_check_per_s", 0) > 0) == (row["api"] == "store_many")  # batches are checked as one
    # each backend in a process of its own: a row's peak RSS is not an earlier backend's
    assert len({row["pid"] for row in rows}) == 3 and rows[0]["pid"] == rows[1]["pid"]
    overhead, rounded = figures["recall_overhead"]
    assert rounded["backend"] == "memory-int8" and rounded["kernel_p50_ms"] > 0
    assert overhead["backend"] == "memory" and overhead["recall_api_p50_ms"] > 0 and overhead["kernel_p50_ms"] > 0
    assert overhead["kernels_with_text_p50_ms"] > overhead["kernel_p50_ms"]  # BM25 over the same rows, then the kernel
    assert overhead["backend_upsert_per_s"] > 0 and overhead["n"] == 3000 + 1000  # its copies deleted again
    assert png.stat().st_size > 10_000


def test_recall_rounds_benchmark_writes_its_figures(tmp_path: Path) -> None:
    args = ["--backends", "sqlite,postgres", "--size", "1000", "--rounds", "2", "--queries", "20"]
    rows, png = run_benchmark("recall_rounds", args, tmp_path)
    assert [(r["backend"], r["round"]) for r in rows] == [
        ("sqlite", 1),
        ("sqlite", 2),
        ("postgres", 1),
        ("postgres", 2),
    ]
    assert all(r["n"] == 1000 and r["recall_p50_ms"] > 0 for r in rows)
    assert png.stat().st_size > 10_000


def test_sqlite_touch_benchmark_writes_its_figures(tmp_path: Path) -> None:
    rows, png = run_benchmark("sqlite_touch", ["--size", "2000", "--slices", "10", "--rounds", "2"], tmp_path)
    assert [(r["backend"], r["n"], r["round"]) for r in rows] == [("sqlite", 2000, 1), ("sqlite", 2000, 2)]
    assert all(0 < r["touch_p50_ms"] <= r["touch_p99_ms"] and r["catch_up_ms"] > 0 for r in rows)
    assert all(r["bytes_per_count"] > 0 for r in rows) or not Path("/proc/self/io").exists()
    assert png.stat().st_size > 10_000


def test_backends_benchmark_writes_its_figures(tmp_path: Path) -> None:
    rows, png = run_benchmark("backends", ["--backends", "memory,sqlite", "--sizes", "500"], tmp_path)
    assert [(r["backend"], r["n"]) for r in rows] == [("memory", 500), ("sqlite", 500)]
    assert all(r["ingest_per_s"] > 0 and 0 < r["recall_p50_ms"] <= r["recall_p95_ms"] for r in rows)
    assert png.stat().st_size > 10_000


def test_ingest_benchmark_passes_on_a_workers_stray_output(tmp_path: Path) -> None:
    """A line a library prints on a worker's stdout is passed on to stderr, not read as a progress count (it
    ended the run, every figure lost)."""
    stray = 'import sys\nif "--worker" in sys.argv:\n    print("a library says hi")\n'
    (tmp_path / "sitecustomize.py").write_text(stray)
    out = tmp_path / "ingest.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.ingest", "--sizes", "1000", "--backends", "memory",
                           "--json", str(out)], check=True, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})  # fmt: skip
    assert "a library says hi" in done.stderr
    assert [row["api"] for row in json.loads(out.read_text())["rows"]] == ["store_many", "store"]
