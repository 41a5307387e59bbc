"""``memkit import`` checking lines in a child process (``memkit.cli._reader``): what it sends back is what
checking the lines here gives, its errors reach the command, and a long file goes through it end to end."""

from __future__ import annotations

import json
from contextlib import aclosing
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memkit.cli._import import _scheme, child_options
from memkit.cli._jsonl import encode_vector
from memkit.cli._lines import EMBEDDED_BATCH, joined, read_header, read_lines
from memkit.cli._output import CliError, ExitCode
from memkit.cli._reader import CHILD_FROM_BYTES, child_reader
from tests.cli._run import memkit, ok_json, sqlite_url
from tests.conftest import fresh_redis_url

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def _line(i: int, rng: np.random.Generator, dim: int) -> dict[str, Any]:
    """A line with a vector; every 97th a flaw the checks catch, every 13th without a vector."""
    vector = rng.standard_normal(dim).astype(np.float32)
    line: dict[str, Any] = {"content": f"note {i} about tea", "user_id": f"user-{i % 7}", "importance": 0.25,
                            "metadata": {"n": i}, "created_at": "2026-01-02T03:04:05Z",
                            "vector": encode_vector(vector / np.linalg.norm(vector))}  # fmt: skip
    if i % 13 == 0:
        del line["vector"]
    if i % 97 == 5:
        line["vector"] = encode_vector(np.full(dim, np.nan, np.float32))
    if i % 97 == 50:
        line["content"] = ""
    if i % 5 == 0:
        line["id"] = f"given-{i}"
    return line


def _file(path: Path, n: int, *, model: str = "test-model-8", dim: int = 8) -> Path:
    rng = np.random.default_rng(5)
    header = {"memkit_export": 1, "model_id": model, "dim": dim}
    path.write_text("".join(json.dumps(row) + "\n" for row in [header, *(_line(i, rng, dim) for i in range(n))]))
    return path


def _here(path: Path, options: dict[str, Any]) -> list[Any]:
    batches = []
    with path.open("rb") as handle:
        line = 1 if read_header(handle) is not None else 0
        while (parsed := read_lines(handle, line, **options)).records or parsed.bad:
            batches.append(parsed)
            line = parsed.line
    return batches


def _without_write_id(body: bytes) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(body)
    assert decoded.pop("_w").startswith("u")  # each write's own id; the content is the text, id and scope the record's
    return decoded


async def test_the_childs_batches_are_those_checked_here(tmp_path: Path) -> None:
    path = _file(tmp_path / "lines.jsonl", 25_000)
    options: dict[str, Any] = {"dim": 8, "max_chars": 1000, "use_vectors": True, "size": EMBEDDED_BATCH}
    expected = _here(path, options)
    with path.open("rb") as handle:
        read_header(handle)
        start = handle.tell()
    async with child_reader(str(path), start, 1, options) as reader:
        got = [parsed async for parsed in reader.batches()]
    # Each write takes the parts that have arrived: as many lines as here in all, never more than a batch.
    assert all(len(p.records) + len(p.bad) <= EMBEDDED_BATCH for p in got) and len(got) >= len(expected) == 3
    mine, theirs = joined(got), joined(expected)
    assert (mine.offset, mine.line, mine.bad) == (theirs.offset, theirs.line, theirs.bad)
    assert mine.bad and mine.unembedded.keys() == theirs.unembedded.keys() and mine.unembedded
    assert [m.content for m in mine.unembedded.values()] == [m.content for m in theirs.unembedded.values()]
    for a, b in zip(mine.records, theirs.records, strict=True):
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            assert (a.id, a.scope, a.text, a.fields, a.importance, a.timestamp) == (
                b.id, b.scope, b.text, b.fields, b.importance, b.timestamp)  # fmt: skip
            assert _without_write_id(a.body) == _without_write_id(b.body)
            assert np.array_equal(a.vector, b.vector) and a.vector.dtype == np.float32


async def test_a_file_the_child_cannot_read_is_the_commands_error(tmp_path: Path) -> None:
    options: dict[str, Any] = {"dim": 8, "max_chars": 1000, "use_vectors": True, "size": EMBEDDED_BATCH}
    with pytest.raises(CliError, match="reading the file failed: FileNotFoundError"):
        async with child_reader(str(tmp_path / "gone.jsonl"), 0, 0, options) as reader:
            async for _ in reader.batches():
                pass


def _import_with_bad_lines(path: Path, url: str) -> Any:
    result = memkit("import", str(path), "--url", url, "--embedder", "hashing", "--json")
    assert result.returncode == ExitCode.BAD_INPUT, result.stderr  # the lines it skipped
    return json.loads(result.stdout)


def test_a_long_file_imports_through_the_child(tmp_path: Path) -> None:
    """The store's model's vectors: records built in the child, the lines without one embedded here."""
    n = 4_500
    path = _file(tmp_path / "long.jsonl", n, model="hashing-v1-384", dim=384)
    assert path.stat().st_size >= CHILD_FROM_BYTES  # else it is checked in the command's own process
    url = sqlite_url(tmp_path / "x.db")
    summary = _import_with_bad_lines(path, url)
    flawed = [i for i in range(n) if i % 97 in (5, 50)]
    assert summary["imported"] == n - len(flawed) and [b["line"] for b in summary["bad"]] == [i + 2 for i in flawed]
    assert summary["embedded"] == sum(1 for i in range(n) if i % 13 == 0 and i not in flawed)
    again = _import_with_bad_lines(path, url)
    assert again["imported"] == summary["imported"]  # ids kept: written over, not twice
    listed = ok_json("list", "--user-id", "user-3", "--url", url, "--embedder", "hashing", "--limit", "1000")
    assert len(listed["memories"]) == sum(1 for i in range(n) if i % 7 == 3 and i not in flawed)


async def test_the_child_started_before_the_store_opens_is_the_one_a_sqlite_store_keeps(tmp_path: Path) -> None:
    """Its options are guessed from the file; the store's must match, or the child is dropped (lines checked
    in the command's process instead). For a SQLite store of the file's model they match."""
    from memkit import Memkit
    from memkit.layers.longterm import LongTermConfig

    identity = ("hashing-v1-384", 384)
    url = sqlite_url(tmp_path / "x.db")
    guess = child_options(identity, LongTermConfig().max_content_chars, server=False, reembed=False,
                          encoded=_scheme(url) == "sqlite")  # fmt: skip
    async with Memkit(url, embedder="hashing") as mem:
        store = (mem.embedder.model_id, mem.embedder.dim)
        max_chars = mem.long_term.config.max_content_chars
        kept = child_options(identity, max_chars, server=False, reembed=False, store=store,
                             encoded=hasattr(mem.backend, "upsert_encoded"))  # fmt: skip
    assert store == identity and kept == guess and guess["use_vectors"] and guess["tokens"]
    other = child_options(("another-model", 384), max_chars, server=False, reembed=False, store=store)
    guessed_other = child_options(("another-model", 384), LongTermConfig().max_content_chars, server=False,
                                  reembed=False)  # fmt: skip
    assert other != guessed_other
    assert not other["use_vectors"]  # its vectors unused: every line is embedded again, here
    assert child_options(identity, 8000, server=True, reembed=False, store=store) != guess  # a server: no child


async def test_leaving_after_one_batch_ends_the_child_and_the_receiving_thread(tmp_path: Path) -> None:
    """A write that fails (or ^C) leaves the reader mid-file: nothing of it may outlive the import."""
    import threading

    path = _file(tmp_path / "lines.jsonl", 25_000)
    options: dict[str, Any] = {"dim": 8, "max_chars": 1000, "use_vectors": True, "size": 2_000}
    async with child_reader(str(path), 0, 0, options) as reader:
        async with aclosing(reader.batches()) as batches:
            first = await anext(batches)
        assert len(first.records) + len(first.bad) <= 2_000
    assert reader._child.returncode is not None
    assert not [t for t in threading.enumerate() if t.name == "memkit-import-receiver"]


def test_a_file_whose_every_line_has_its_vector_is_written_as_encoded_rows(tmp_path: Path) -> None:
    """No line to embed: the child sends encoded rows and tokens, written as they are (``upsert_encoded``);
    the store then finds the memories by their words and vectors, as after any import."""
    import sqlite3

    n = 4_500
    rng = np.random.default_rng(9)
    path = tmp_path / "all.jsonl"
    lines = [{"memkit_export": 1, "model_id": "hashing-v1-384", "dim": 384}]
    for i in range(n):
        vector = rng.standard_normal(384).astype(np.float32)
        topic = "jasmine" if i == 4321 else "tea"
        lines.append({"content": f"note {i} about {topic} " + "x" * 600, "user_id": f"user-{i % 7}",
                      "vector": encode_vector(vector / np.linalg.norm(vector))})  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert path.stat().st_size >= CHILD_FROM_BYTES
    url = sqlite_url(tmp_path / "x.db")
    summary = ok_json("import", str(path), "--url", url, "--embedder", "hashing")
    assert summary["imported"] == n and summary["embedded"] == 0 and summary["bad"] == []
    with sqlite3.connect(tmp_path / "x.db") as conn:
        assert conn.execute("SELECT count(*) FROM memkit_tokens").fetchone() == (n,)
    found = ok_json("recall", "jasmine", "--user-id", f"user-{4321 % 7}", "--url", url, "--embedder", "hashing")
    assert found["hits"][0]["memory"]["content"].startswith("note 4321 about jasmine")


def test_an_import_into_a_server_starts_no_child(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server's writes wait on the network, so its lines are checked in the command beside them: a child
    started for it would only be dropped once the store opened."""
    import memkit.cli._import as importing
    from memkit.cli import main

    def no_child(*args: Any) -> Any:
        raise AssertionError("a child reader was started for a server's import")

    monkeypatch.setattr(importing, "child_reader", no_child)
    path = _file(tmp_path / "long.jsonl", 4_500, model="hashing-v1-384", dim=384)
    assert path.stat().st_size >= CHILD_FROM_BYTES
    url = fresh_redis_url(redis_url)
    code = main(["import", str(path), "--url", url, "--embedder", "hashing", "--json", "--no-progress"])
    assert code == ExitCode.BAD_INPUT  # its flawed lines skipped; the rest imported (checked above for SQLite)
