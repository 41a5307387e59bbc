"""``memkit export`` and ``memkit import`` through real subprocesses: round trips, bad lines, resuming."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

from memkit.cli._jsonl import encode_vector
from tests.cli._run import COMMAND, memkit, ok_json, sqlite_url

pytestmark = pytest.mark.slow


def _records(url: str) -> dict[str, Any]:
    """Every long-term record of a store, by id, read through the backend."""
    from memkit import open_backend
    from memkit.backend import Scope

    async def read() -> dict[str, Any]:
        async with open_backend(url) as backend:
            page = await backend.scan("long_term", Scope(), limit=1000, all_scopes=True)
            return {r.id: r for r in page.records}

    return anyio.run(read)


def _write_lines(path: Path, lines: list[dict[str, Any]], header: dict[str, Any] | None = None) -> None:
    rows = ([header] if header else []) + lines
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_export_and_import_keep_ids_texts_and_exact_vectors(tmp_path: Path) -> None:
    source, target = sqlite_url(tmp_path / "a.db"), sqlite_url(tmp_path / "b.db")
    for user, text in (("ada", "I am allergic to peanuts."), ("ada", "I like tea."), ("bob", "Bob likes jazz.")):
        ok_json("store", text, "--user-id", user, "--url", source, "--embedder", "hashing")
    out = tmp_path / "all.jsonl"
    assert ok_json("export", str(out), "--vectors", "--url", source)["exported"] == 3
    header = json.loads(out.read_text().splitlines()[0])
    assert header == {"memkit_export": 1, "model_id": "hashing-v1-384", "dim": 384}
    summary = ok_json("import", str(out), "--url", target)
    assert summary["imported"] == 3 and summary["embedded"] == 0 and summary["bad"] == []
    before, after = _records(source), _records(target)
    assert before.keys() == after.keys()
    for record_id, record in before.items():
        assert np.array_equal(record.vector, after[record_id].vector)  # the exported float32 bytes, exactly
        assert record.scope == after[record_id].scope and record.text == after[record_id].text
    hits = ok_json("recall", "peanuts", "--user-id", "ada", "--url", target)["hits"]
    assert hits[0]["memory"]["content"] == "I am allergic to peanuts."
    again = ok_json("import", str(out), "--url", target)  # the same file twice: each memory once
    assert again["imported"] == 3 and len(_records(target)) == 3


def test_a_superseded_memory_stays_history_through_export_and_import(tmp_path: Path) -> None:
    """The lines carry ``superseded_by``: without it a restored store recalled the corrected fact as current."""
    from memkit import Memkit

    source, target = sqlite_url(tmp_path / "a.db"), sqlite_url(tmp_path / "b.db")

    async def supersede() -> str:
        async with Memkit(source, embedder="hashing", config=False) as mem:
            old = await mem.long_term.store("The user lives in Paris", user_id="ada")
            assert old.memory is not None
            await mem.long_term.supersede(old.memory.id, "The user lives in Porto", user_id="ada")
            return old.memory.id

    old_id = anyio.run(supersede)
    out = tmp_path / "all.jsonl"
    ok_json("export", str(out), "--vectors", "--url", source)
    assert ok_json("import", str(out), "--url", target)["imported"] == 2
    hits = ok_json("recall", "where does the user live", "--user-id", "ada", "--url", target)["hits"]
    assert [h["memory"]["content"] for h in hits] == ["The user lives in Porto"]
    restored = ok_json("get", old_id, "--user-id", "ada", "--url", target)
    assert restored["superseded_by"] is not None and restored["superseded_at"] is not None
    _write_lines(tmp_path / "bad.jsonl", [{"content": "x", "user_id": "ada", "superseded_at": "2026-01-01T00:00:00Z"}])
    assert "superseded_at needs superseded_by" in memkit("import", str(tmp_path / "bad.jsonl"), "--url", target).stderr


def test_export_of_one_user_to_standard_output(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "a.db")
    ok_json("store", "likes tea", "--user-id", "ada", "--url", url, "--embedder", "hashing")
    ok_json("store", "likes jazz", "--user-id", "bob", "--url", url)
    result = memkit("export", "-", "--user-id", "bob", "--url", url)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines[0] == {"memkit_export": 1} and [(m["user_id"], m["content"]) for m in lines[1:]] == [
        ("bob", "likes jazz")
    ]
    assert memkit("export", str(tmp_path / "x.jsonl"), "--url", url).returncode == 0
    again = memkit("export", str(tmp_path / "x.jsonl"), "--url", url)
    assert again.returncode == 3 and "--force" in again.stderr


def test_vectors_of_another_model_are_embedded_again(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "a.db")
    ok_json("store", "likes tea", "--user-id", "ada", "--url", url, "--embedder", "hashing")  # claims hashing-384
    rng = np.random.default_rng(0)
    lines = [{"content": f"memory {i} about jazz", "user_id": "ada", "vector": encode_vector(rng.random(8) + 0.1)}
             for i in range(5)]  # fmt: skip
    _write_lines(tmp_path / "other.jsonl", lines, {"memkit_export": 1, "model_id": "other-model", "dim": 8})
    summary = ok_json("import", str(tmp_path / "other.jsonl"), "--url", url)
    assert summary["imported"] == 5 and summary["embedded"] == 5
    assert {r.vector.shape for r in _records(url).values()} == {(384,)}
    assert ok_json("recall", "jazz", "--user-id", "ada", "--url", url)["hits"][0]["lexical"] > 0


def test_a_store_of_a_model_the_cli_cannot_load_says_so(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "a.db")
    vector = encode_vector(np.ones(8))
    _write_lines(tmp_path / "x.jsonl", [{"content": "likes tea", "user_id": "ada", "vector": vector}],
                 {"memkit_export": 1, "model_id": "someone-elses-model", "dim": 8})  # fmt: skip
    assert ok_json("import", str(tmp_path / "x.jsonl"), "--url", url)["embedded"] == 0  # its vectors are used
    assert ok_json("list", "--url", url)["memories"][0]["content"] == "likes tea"  # listing needs no model
    recall = memkit("recall", "tea", "--user-id", "ada", "--url", url)
    assert recall.returncode == 1 and "someone-elses-model" in recall.stderr and "Traceback" not in recall.stderr


def test_bad_lines_are_reported_by_number_and_skipped_whole(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "a.db")
    good = {"content": "likes tea", "user_id": "ada", "vector": encode_vector(np.ones(384))}
    lines = [
        good,
        {"content": "", "user_id": "ada"},  # line 3
        {"contnet": "typo", "user_id": "ada"},  # 4
        {"content": "no owner"},  # 5
        {"content": "wrong size", "user_id": "ada", "vector": encode_vector(np.ones(5))},  # 6
        {"content": "too important", "user_id": "ada", "importance": 7},  # 7
        {"content": "naive time", "user_id": "ada", "created_at": "2024-01-01T00:00:00"},  # 8
        {"content": "not base64", "user_id": "ada", "vector": "@@@@"},  # 9
        {"content": "five bytes", "user_id": "ada", "vector": base64.b64encode(b"12345").decode()},  # 10
        {"content": "likes jazz", "user_id": "bob"},  # 11
    ]
    path = tmp_path / "mixed.jsonl"
    _write_lines(path, lines, {"memkit_export": 1, "model_id": "hashing-v1-384", "dim": 384})
    with path.open("a") as handle:
        handle.write("this is not json\n")  # line 12
    result = memkit("import", str(path), "--url", url)
    assert result.returncode == 3
    reported = {int(line.split(":")[1]): line for line in result.stderr.splitlines() if line.startswith(str(path))}
    assert list(reported) == [3, 4, 5, 6, 7, 8, 9, 10, 12]
    assert "base64" in reported[9] and "float32" in reported[10]
    assert "imported 2 memories" in result.stdout and "9 bad lines skipped" in result.stderr
    stored = {r.text for r in _records(url).values()}
    assert stored == {"likes tea", "likes jazz"}  # nothing of a bad line was written


def test_an_access_count_no_store_can_keep_is_a_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    _write_lines(path, [{"content": "a", "user_id": "ada", "access_count": 2**63 - 1},
                        {"content": "b", "user_id": "ada", "access_count": 10**21}])  # fmt: skip
    result = memkit("import", str(path), "--json", "--embedder", "hashing", "--url", sqlite_url(tmp_path / "a.db"))
    assert result.returncode == 3
    summary = json.loads(result.stdout)
    assert summary["imported"] == 1 and [b["line"] for b in summary["bad"]] == [2]
    assert "access_count must be between 0 and" in summary["bad"][0]["error"]


def test_check_validates_without_a_store(tmp_path: Path) -> None:
    (tmp_path / "memkit.toml").write_text("url = [not toml")  # --check reads no configuration
    path = tmp_path / "x.jsonl"
    _write_lines(path, [{"content": "likes tea", "user_id": "ada"}, {"content": "", "user_id": "ada"}])
    result = memkit("import", str(path), "--check", "--json", "--url", sqlite_url(tmp_path / "never.db"))
    assert result.returncode == 3
    assert json.loads(result.stdout)["valid"] == 1 and json.loads(result.stdout)["bad"][0]["line"] == 2
    assert not (tmp_path / "never.db").exists()
    assert memkit("import", str(path), "--check", cwd=tmp_path).returncode == 3  # no --url: still no config read
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memkit.toml", "x.jsonl"]


def _killed_after_first_batch(args: list[str], state: Path) -> None:
    """Starts ``memkit ARGS`` and SIGKILLs it once it has saved a position (mid-run, not at the end)."""
    process = subprocess.Popen([*COMMAND, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, "HF_HUB_OFFLINE": "1"})  # fmt: skip
    deadline = time.monotonic() + 120
    while not state.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert state.exists(), "the command ended before it saved a position: make the input larger"


def _big_file(path: Path, n: int) -> None:
    vector = encode_vector(np.ones(384))
    lines = [{"content": f"note {i}: the meeting moved to room {i % 97}", "user_id": f"user{i % 7}",
              "vector": vector} for i in range(n)]  # fmt: skip
    _write_lines(path, lines, {"memkit_export": 1, "model_id": "hashing-v1-384", "dim": 384})


def test_an_import_killed_half_way_continues_where_it_stopped(tmp_path: Path) -> None:
    url, path = sqlite_url(tmp_path / "a.db"), tmp_path / "big.jsonl"
    _big_file(path, 30_000)
    state = Path(f"{path}.memkit-import")
    _killed_after_first_batch(["import", str(path), "--url", url, "--no-progress"], state)
    done_before = json.loads(state.read_text())["imported"]
    assert 0 < done_before < 30_000
    summary = ok_json("import", str(path), "--url", url)
    assert summary["resumed"] is True and summary["imported"] <= 30_000 - done_before
    assert not state.exists()
    assert ok_json("stats", "--url", url)["collections"]["long_term"]["total"] == 30_000


def test_a_resumed_import_still_reports_the_bad_lines_found_before(tmp_path: Path) -> None:
    url, path = sqlite_url(tmp_path / "a.db"), tmp_path / "big.jsonl"
    _big_file(path, 30_000)
    lines = path.read_text().splitlines(keepends=True)
    lines[3] = json.dumps({"content": "", "user_id": "ada"}) + "\n"  # line 4 (the header is line 1): empty
    path.write_text("".join(lines))
    state = Path(f"{path}.memkit-import")
    _killed_after_first_batch(["import", str(path), "--url", url, "--no-progress"], state)
    saved = json.loads(state.read_text())
    assert saved["bad_count"] == 1 and saved["bad"][0][0] == 4
    result = memkit("import", str(path), "--url", url, "--json")
    assert result.returncode == 3, result.stderr  # bad input, though this run met no bad line itself
    summary = json.loads(result.stdout)
    assert summary["resumed"] is True and summary["bad_count"] == 1 and summary["bad"][0]["line"] == 4
    assert "content" in summary["bad"][0]["error"] and "1 bad lines were found before" in result.stderr
    assert summary["imported"] + saved["imported"] == 29_999
    state.write_text(json.dumps(saved))  # the same interruption again, read by a person this time
    again = memkit("import", str(path), "--url", url)
    assert again.returncode == 3 and "were found before the interruption" in again.stderr
    assert f"{path}:4: " in again.stderr and "1 bad lines skipped" in again.stderr


def test_an_export_to_a_folder_that_does_not_exist_says_what_to_do(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "a.db")
    ok_json("store", "likes tea", "--user-id", "ada", "--url", url, "--embedder", "hashing")
    result = memkit("export", str(tmp_path / "no-such-folder" / "out.jsonl"), "--url", url)
    assert result.returncode == 4 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"memkit export: error: cannot write {tmp_path / 'no-such-folder' / 'out.jsonl'}: No such file or directory",
        "  choose a file in a folder you can write to (or - for standard output)",
    ]


def test_an_export_killed_half_way_continues_where_it_stopped(tmp_path: Path) -> None:
    url, source = sqlite_url(tmp_path / "a.db"), tmp_path / "big.jsonl"
    _big_file(source, 30_000)
    ok_json("import", str(source), "--url", url)
    out = tmp_path / "out.jsonl"
    state = Path(f"{out}.memkit-export")
    _killed_after_first_batch(["export", str(out), "--url", url, "--no-progress"], state)
    with out.open("a") as handle:
        handle.write('{"content": "half a li')  # what a kill can leave after the last saved page
    assert ok_json("export", str(out), "--url", url)["exported"] == 30_000
    lines = out.read_text().splitlines()
    ids = [json.loads(line)["id"] for line in lines[1:]]
    assert len(ids) == 30_000 and len(set(ids)) == 30_000 and not state.exists()


def test_python_m_memkit_cli_still_runs() -> None:
    out = subprocess.run([sys.executable, "-m", "memkit.cli", "--version"], capture_output=True, text=True,
                         timeout=60, check=True)  # fmt: skip
    assert out.stdout.startswith("memkit ")


def test_the_transfer_benchmark_writes_its_figures(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "transfer.json", tmp_path / "transfer.png"
    subprocess.run([sys.executable, "-m", "benchmarks.transfer", "--n", "3000", "--json", str(out), "--plot",
                    str(png)], check=True, capture_output=True, timeout=600)  # fmt: skip
    figures = json.loads(out.read_text())
    assert figures["n"] == 3000 and figures["import_per_s"] > 0 and figures["export_per_s"] > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_lines_are_read_in_checked_chunks_and_joined_in_order(tmp_path: Path) -> None:
    """An embedded store's batches are several chunks of checked lines: their memories, bad lines (by
    number) and position join up as one batch's would, and the next batch starts where it stopped."""
    from memkit.cli._lines import BATCH, read_header, read_lines

    path = tmp_path / "chunks.jsonl"
    lines = [{"content": f"note {i}", "user_id": "ada"} if i % 1000 != 7 else {"content": "", "user_id": "ada"}
             for i in range(2 * BATCH + 500)]  # fmt: skip
    _write_lines(path, lines)
    with path.open("ab") as handle:
        handle.write(b"\n\n")  # blank lines at the end are not lines to import
    options: dict[str, Any] = {"dim": None, "max_chars": 1000, "use_vectors": False}
    with path.open("rb") as handle:
        assert read_header(handle) is None
        first = read_lines(handle, 0, size=2 * BATCH, **options)
        rest = read_lines(handle, first.line, size=2 * BATCH, **options)
        end = read_lines(handle, rest.line, size=2 * BATCH, **options)
    assert len(first.records) + len(first.bad) == 2 * BATCH and first.line == 2 * BATCH
    assert all(r is None for r in first.records + rest.records)  # no vectors: each is embedded first
    contents = [p.unembedded[at].content for p in (first, rest) for at in range(len(p.records))]
    assert contents == [line["content"] for line in lines if line["content"]]
    assert [n for n, _ in first.bad + rest.bad] == [i + 1 for i in range(len(lines)) if i % 1000 == 7]
    assert not end.records and not end.bad and end.offset == rest.offset == path.stat().st_size
