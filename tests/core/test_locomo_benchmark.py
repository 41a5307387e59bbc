"""The LoCoMo benchmark runs end to end on a small file in LoCoMo's format, written by the test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SAMPLE = {
    "sample_id": "conv-test",
    "conversation": {
        "speaker_a": "Ann",
        "speaker_b": "Ben",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a greyhound called Pixel."},
            {"speaker": "Ben", "dia_id": "D1:2", "text": "Lovely! I am learning the cello.",
             "blip_caption": "a photo of a cello", "img_url": ["x"]},
        ],
        "session_2_date_time": "10:04 am on 19 June, 2023",
        "session_2": [
            {"speaker": "Ann", "dia_id": "D2:1", "text": "Pixel won a race at the dog park."},
            {"speaker": "Ben", "dia_id": "D2:2", "text": "My cello teacher moved to Oslo."},
        ],
    },
    "qa": [
        {"question": "What is the name of Ann's greyhound?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4},
        {"question": "Where did Ben's teacher move?", "answer": "Oslo", "evidence": ["D2:2; D9:9"], "category": 1},
        {"question": "What did Pixel win?", "answer": "a race", "evidence": [], "category": 2},
    ],
}  # fmt: skip


def test_locomo_benchmark_json(tmp_path: Path) -> None:
    data = tmp_path / "tiny_locomo.json"
    data.write_text(json.dumps([SAMPLE]))
    out = tmp_path / "locomo.json"
    subprocess.run(
        [sys.executable, "-m", "benchmarks.locomo", "--data", str(data), "--json", str(out),
         "--embedder", "hashing", "--plot", str(tmp_path / "locomo.png")],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    summary = json.loads(out.read_text())
    for key in ("recall@5", "recall@10", "recall@25", "by_category", "n_questions", "ingest_s",
                "recall_p50_ms", "recall_p95_ms"):  # fmt: skip
        assert key in summary
    assert summary["n_questions"] == 3
    # Four turns and k >= 5: every existing evidence id is found; the empty-evidence question counts 1.
    assert summary["recall@5"] == 100.0
    assert set(summary["by_category"]) == {"single-hop", "multi-hop", "temporal"}
    assert (tmp_path / "locomo.png").stat().st_size > 5_000
