"""benchmarks.embedder runs end to end on a tiny size (its timings are not asserted: they are noisy)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("sentence_transformers")


@pytest.mark.slow
def test_embedder_benchmark_writes_its_figures(tmp_path: Path) -> None:
    out, png = tmp_path / "embedder.json", tmp_path / "embedder.png"
    subprocess.run(
        [sys.executable, "-m", "benchmarks.embedder", "--runtimes", "torch,onnx", "--short", "8", "--long", "2",
         "--turns", "0", "--queries", "3", "--json", str(out), "--plot", str(png)],
        check=True, capture_output=True, timeout=600, env={**os.environ, "MEMKIT_CACHE_DIR": str(tmp_path / "cache")},
    )  # fmt: skip
    figures = json.loads(out.read_text())
    torch, onnx = figures["rows"]
    assert (torch["runtime"], onnx["runtime"]) == ("torch", "onnx")
    for row in (torch, onnx):
        for key in ("short_b8_per_s", "short_b64_per_s", "long_b8_per_s", "long_b64_per_s"):
            assert row[key] > 0, key
        assert 0 < row["query_p50_ms"] <= row["query_p95_ms"] and row["threads"] >= 1
        assert "lme_per_s" not in row  # --turns 0
    assert "parity_min" not in torch and 0.99 <= onnx["parity_min"] <= onnx["parity_mean"] <= 1.0001
    assert figures["texts"] == {"short": 8, "long": 2, "lme": 0} and figures["queries"] == 3
    assert png.stat().st_size > 10_000
