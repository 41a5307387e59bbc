"""SQLite's ``upsert_encoded`` (what ``memkit import`` writes with): the rows and tokens it writes are those
``upsert`` writes for the same records, loaded arrays stay in step, and a bad batch writes nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from memkit_backends.sqlite import EncodedRows, SQLiteBackend

from memkit.backend import Query, Record, Scope, StorageURL
from memkit.errors import DimensionMismatchError, ValidationError
from memkit.text import tokenize

pytestmark = pytest.mark.anyio

DIM = 16
_ROW_COLUMNS = ("collection, id, user_id, agent_id, session_id, body, text, vector, importance, timestamp, "
                "expires_at, fields, access_count, last_accessed")  # fmt: skip


def _records(n: int, start: int = 0) -> list[Record]:
    """Records of every shape an import writes: agents and sessions, tags, expiry, no text."""
    rng = np.random.default_rng(start)
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    records = []
    for i in range(n):
        at = start + i
        scope = Scope(user_id=f"u{at % 3}") if at % 4 else Scope(agent_id="bot", session_id=f"s{at % 2}")
        records.append(Record(
            id=f"r{at}", scope=scope, body=b'{"n":%d}' % at, text=None if at % 7 == 3 else f"Note {at}: tea, 'scones'",
            vector=vectors[i], importance=(at % 10) / 10, timestamp=1_700_000_000.0 + at,
            expires_at=2_000_000_000.0 + at if at % 5 == 0 else None,
            fields={"kind": "fact", "dedupe": f"d{at}", "tags": ("a", f"t{at % 2}")},
        ))  # fmt: skip
    return records


def encoded_of(records: list[Record]) -> EncodedRows:
    """The batch ``memkit import``'s reading process sends for these records, built here independently."""
    return EncodedRows(
        ids=[r.id for r in records], scopes=[(r.scope.user_id, r.scope.agent_id, r.scope.session_id) for r in records],
        bodies=[r.body for r in records], texts=[r.text for r in records],
        vectors=np.stack([np.asarray(r.vector, np.float32) for r in records]),
        numbers=[(r.importance, r.timestamp, r.expires_at) for r in records],
        fields=[msgspec.json.encode(r.fields) for r in records],
        tokens=[" ".join(tokenize(r.text)) if r.text else None for r in records],
    )  # fmt: skip


def _backend(path: Path) -> SQLiteBackend:
    return SQLiteBackend(StorageURL(f"sqlite:///{path}"))


def _rows(path: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(f"SELECT {_ROW_COLUMNS} FROM memkit_records ORDER BY id").fetchall()
        tokens = conn.execute("SELECT t.collection, t.id, t.tokens, r.id FROM memkit_tokens t "
                              "JOIN memkit_records r ON r.rowid = t.record ORDER BY t.id").fetchall()  # fmt: skip
    return rows, tokens


async def test_encoded_rows_are_written_as_upsert_writes_their_records(tmp_path: Path) -> None:
    records = _records(300)
    rewritten = [msgspec.structs.replace(r, text=None if r.text else "now it has text", body=b"{}") for r in
                 _records(40, start=100)]  # fmt: skip  # over rows written before: tokens replaced or dropped
    async with _backend(tmp_path / "a.db") as a, _backend(tmp_path / "b.db") as b:
        await a.upsert("mem", records)
        await a.upsert("mem", rewritten)
        await b.upsert_encoded("mem", encoded_of(records))
        await b.upsert_encoded("mem", encoded_of(rewritten))
    (rows_a, tokens_a), (rows_b, tokens_b) = _rows(tmp_path / "a.db"), _rows(tmp_path / "b.db")
    assert rows_a == rows_b and len(rows_a) == 300
    assert tokens_a == tokens_b and all(t[1] == t[3] for t in tokens_b)  # each row's own tokens
    assert len(tokens_b) == sum(1 for r in rows_b if r[6])  # the text-less have none


async def test_the_last_of_an_id_wins_where_its_first_was_as_in_upsert(tmp_path: Path) -> None:
    r0, r1, r2 = _records(3)
    batch = [r0, r1, msgspec.structs.replace(r0, text="the later one", body=b"{}"), r2]
    async with _backend(tmp_path / "a.db") as a, _backend(tmp_path / "b.db") as b:
        await a.upsert("mem", batch)
        await b.upsert_encoded("mem", encoded_of(batch))
        [got] = await b.get("mem", ["r0"])
    assert got.text == "the later one" and got.body == b"{}"
    order = "SELECT rowid, id, seq FROM memkit_records ORDER BY rowid"
    with sqlite3.connect(tmp_path / "a.db") as one, sqlite3.connect(tmp_path / "b.db") as other:
        assert one.execute(order).fetchall() == other.execute(order).fetchall() == [(1, "r0", 1), (2, "r1", 2),
                                                                                     (3, "r2", 3)]  # fmt: skip


async def test_a_collection_held_in_arrays_sees_the_rows_and_a_reopened_file_finds_their_words(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    records = _records(50)
    async with _backend(path) as backend:
        await backend.upsert("mem", records[:10])
        assert len(await backend.get("mem", [r.id for r in records])) == 10  # the arrays are loaded now
        await backend.upsert_encoded("mem", encoded_of(records[10:]))
        scope = records[21].scope
        hits = await backend.query("mem", Query(scope=scope, vector=np.asarray(records[21].vector), k=1))
        assert hits[0].record.id == "r21"
    async with _backend(path) as backend:
        hits = await backend.query("mem", Query(scope=Scope(user_id="u1"), text="note 37", k=1))
        assert hits[0].record.id == "r37" and hits[0].scores.lexical > 0  # its tokens, read from the file


def _flawed(batch: EncodedRows, flaw: str) -> EncodedRows:
    """The batch with one flaw ``upsert`` would refuse in its records (or that would write an unreadable row)."""
    vectors = batch.vectors.copy()
    vectors[7, 3] = np.nan
    return {
        "dim": lambda: batch._replace(vectors=np.ones((10, DIM + 1), np.float32)),
        "nan": lambda: batch._replace(vectors=vectors),
        "float64": lambda: batch._replace(vectors=batch.vectors.astype(np.float64)),
        "lengths": lambda: batch._replace(texts=batch.texts[:-1]),
        "longer with a repeated id": lambda: batch._replace(
            ids=["r20", *batch.ids[1:-1], "r20"], texts=[*batch.texts, "one more"]
        ),
        "importance": lambda: batch._replace(numbers=[(float("nan"), 1.0, None), *batch.numbers[1:]]),
        "not a number": lambda: batch._replace(numbers=[("high", 1.0, None), *batch.numbers[1:]]),
        "a number as text": lambda: batch._replace(numbers=[("0.5", 1.0, None), *batch.numbers[1:]]),
        "id": lambda: batch._replace(ids=[123, *batch.ids[1:]]),
        "fields": lambda: batch._replace(fields=[b"not json", *batch.fields[1:]]),
        "infinite field": lambda: batch._replace(fields=[b'{"x":1e999}', *batch.fields[1:]]),
        "tokens without text": lambda: batch._replace(texts=[None, *batch.texts[1:]]),
        "text without tokens": lambda: batch._replace(tokens=[None, *batch.tokens[1:]]),
    }[flaw]()


@pytest.mark.parametrize("loaded", [False, True], ids=["file only", "arrays loaded"])
@pytest.mark.parametrize("flaw", ["dim", "nan", "float64", "lengths", "longer with a repeated id", "importance",
                                  "not a number", "a number as text", "id", "fields", "infinite field",
                                  "tokens without text", "text without tokens"])  # fmt: skip
async def test_a_bad_batch_writes_nothing(tmp_path: Path, flaw: str, loaded: bool) -> None:
    good = _records(20)
    batch = _flawed(encoded_of(_records(10, start=20)), flaw)
    error = DimensionMismatchError if flaw == "dim" else ValidationError
    async with _backend(tmp_path / "x.db") as backend:
        await backend.upsert("mem", good)
        if loaded:
            await backend.get("mem", ["r1"])
        with pytest.raises(error):
            await backend.upsert_encoded("mem", batch)
        assert await backend.count("mem", Scope(user_id="u1")) == sum(1 for r in good if r.scope.user_id == "u1")
    rows, tokens = _rows(tmp_path / "x.db")
    assert [r[1] for r in rows] == sorted(r.id for r in good) and len(tokens) == sum(1 for r in good if r.text)


async def test_a_float16_store_refuses_encoded_rows_past_float16s_range(tmp_path: Path) -> None:
    records = _records(10)
    records[4] = msgspec.structs.replace(records[4], vector=np.full(DIM, -7e4, np.float32))
    async with SQLiteBackend(StorageURL(f"sqlite:///{tmp_path / 'a.db'}?dtype=float16")) as backend:
        with pytest.raises(ValidationError, match="r4"):
            await backend.upsert_encoded("mem", encoded_of(records))
    assert _rows(tmp_path / "a.db")[0] == []  # nothing of the batch written
