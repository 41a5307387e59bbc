"""The LongMemEval benchmark runs end to end on a tiny synthetic file in the LongMemEval format (hashing
embedder; the figures are checked against what the file makes certain, not against the real data)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks._lme_data import load


def message(role: str, content: str, has_answer: bool = False) -> dict[str, Any]:
    found: dict[str, Any] = {"role": role, "content": content}
    if has_answer:
        found["has_answer"] = True
    return found


def chatter(i: int) -> list[dict[str, Any]]:
    return [message("user", f"Can you suggest a recipe with ingredient number {i}?"),
            message("assistant", f"Sure, here is a recipe with ingredient {i}.")]  # fmt: skip


def item(
    qid: str, kind: str, question: str, sessions: list[list[dict[str, Any]]], answers: list[str]
) -> dict[str, Any]:
    ids = [f"{qid}_s{i}" for i in range(len(sessions))]
    dates = [f"2023/05/{10 + i:02d} (Wed) 10:00" for i in range(len(sessions))]
    return {"question_id": qid, "question_type": kind, "question": question, "question_date": "2023/05/30 (Tue) 23:40",
            "answer": "-", "answer_session_ids": [ids[int(a)] for a in answers], "haystack_session_ids": ids,
            "haystack_dates": dates, "haystack_sessions": sessions}  # fmt: skip


def tiny_file(path: Path) -> None:
    long_turn = " ".join(f"filler{i}" for i in range(3000)) + " and my sister Bea adopted a ferret named Mango."
    assert len(long_turn) > 20_000
    items = [
        item("q1", "single-session-user", "What is the name of the ferret my sister adopted?",
             [chatter(1), [message("user", long_turn, True), message("assistant", "Lovely!")], chatter(2)], ["1"]),
        item("q2", "multi-session", "Which two cities did I visit for the marathon and the conference?",
             [[message("user", "I ran the marathon in Rotterdam.", True)], chatter(3),
              [message("user", "The conference was in Lisbon, I went there too.", True)]], ["0", "2"]),
        item("q3", "single-session-assistant", "What did you recommend for the ingredient number 4?",
             [chatter(4), chatter(5)], ["0"]),  # evidence only in an assistant turn: no turn metric
        item("q4_abs", "temporal-reasoning", "When did I go to Mars?", [chatter(6), chatter(7)], []),
    ]  # fmt: skip
    with gzip.open(path, "wt") as file:
        json.dump(items, file)


def test_loader_reads_user_turns_dates_and_evidence(tmp_path: Path) -> None:
    data = tmp_path / "tiny.json.gz"
    tiny_file(data)
    items = load(data)
    assert [i.question_id for i in items] == ["q1", "q2", "q3", "q4_abs"]
    assert items[0].evidence_turns == {("q1_s1", 0)} and items[3].abstention and not items[2].evidence_turns
    assert items[1].sessions[2].at.day == 12 and items[1].at.hour == 23
    assert all(t.text.startswith("Can you") for t in items[2].sessions[0].turns)  # assistant turns left out


def test_longmemeval_benchmark_json(tmp_path: Path) -> None:
    data = tmp_path / "tiny.json.gz"
    tiny_file(data)
    out, png, cache = tmp_path / "lme.json", tmp_path / "lme.png", tmp_path / "cache"
    command = [sys.executable, "-m", "benchmarks.longmemeval", "--data", str(data), "--json", str(out),
               "--embedder", "hashing", "--embed-cache", str(cache), "--compare"]  # fmt: skip
    subprocess.run([*command, "--plot", str(png)], check=True, capture_output=True, timeout=600)
    summary = json.loads(out.read_text())
    assert summary["n_questions"] == 4 and summary["n_turn_questions"] == 2
    assert summary["skipped_no_user_turn_evidence"] == 2 and summary["abstention_skipped"] == 1
    assert summary["turn_any@5"] == 1.0 and summary["turn_all@10"] == 1.0  # the long turn's tail found
    assert summary["session_all@5"] == 1.0
    for kind in ("single-session-user", "multi-session", "single-session-assistant", "temporal-reasoning"):
        assert kind in summary["by_type"]
    names = {v["name"] for v in summary["variants"]}
    assert {"dense only", "BM25 only", "no neighbour boost", "no indexed context"} <= names
    assert all(0.0 <= v["turn_all@50"] <= 1.0 and v["recall_p50_ms"] > 0 for v in summary["variants"])
    assert summary["recall_p95_ms"] >= summary["recall_p50_ms"] > 0 and summary["ingest_turns_per_s"] > 0
    assert png.stat().st_size > 5_000 and (cache / "embeddings.sqlite").stat().st_size > 0
    subprocess.run(command, check=True, capture_output=True, timeout=600)  # again, from the disk cache
    assert json.loads(out.read_text())["turn_all@10"] == summary["turn_all@10"]


def test_levers_runs_only_the_named_ablations(tmp_path: Path) -> None:
    data = tmp_path / "tiny.json.gz"
    tiny_file(data)
    out = tmp_path / "lme.json"
    command = [sys.executable, "-m", "benchmarks.longmemeval", "--data", str(data), "--json", str(out),
               "--embedder", "hashing"]  # fmt: skip
    subprocess.run([*command, "--levers", "FEEDBACK,bm25"], check=True, capture_output=True, timeout=600)
    names = {v["name"] for v in json.loads(out.read_text())["variants"]}
    assert names and all("feedback" in n or "BM25" in n for n in names) and "BM25 only" in names
    refused = subprocess.run([*command, "--levers", "no such lever"], check=False, capture_output=True, text=True,
                             timeout=600)  # fmt: skip
    assert refused.returncode != 0 and "names no variant" in refused.stderr and "dense only" in refused.stderr
