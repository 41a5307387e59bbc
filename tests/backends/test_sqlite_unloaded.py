"""sqlite:// writes to a collection this process has not read go to the file alone: nothing is loaded into
memory for them (an import, an ingestion worker), and the first read loads everything they wrote."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec
import numpy as np
import pytest

from memkit import open_backend
from memkit.backend import Query, Record, Scope, Weights
from memkit.errors import DimensionMismatchError, ValidationError
from memkit.testing import make_record
from memkit.testing._helpers import unit

pytestmark = pytest.mark.anyio
ALICE = Scope(user_id="alice")


def loaded(backend: object) -> set[str]:
    return set(backend._cache.collections)  # type: ignore[attr-defined]


async def test_writes_alone_load_nothing_and_a_first_read_sees_them_all(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    async with open_backend(url) as backend:
        await backend.ensure_collection("c", 8)
        await backend.upsert("c", [make_record(f"r{i}", text=f"word{i} shared", seed=i) for i in range(50)])
        await backend.upsert("c", [make_record("r1", text="rewritten text", seed=99)])  # the last write wins
        assert loaded(backend) == set()
        assert await backend.count("c", ALICE) == 50
        assert loaded(backend) == {"c"}
        [r1] = await backend.get("c", ["r1"])
        assert r1.text == "rewritten text" and np.allclose(r1.vector, unit(99))  # type: ignore[arg-type]
        hits = await backend.query("c", Query(scope=ALICE, text="word7", k=3))
        assert hits[0].record.id == "r7"  # by the tokens the unloaded write indexed
        await backend.upsert("c", [make_record("late", text="word7 again", seed=3)])  # loaded now: mirrored
        hits = await backend.query("c", Query(scope=ALICE, text="word7", k=3))
        assert {h.record.id for h in hits[:2]} == {"r7", "late"}


async def test_an_unloaded_collection_still_refuses_what_it_cannot_hold(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'd.db'}"
    async with open_backend(url) as backend:
        await backend.ensure_collection("c", 8)
    async with open_backend(url) as backend:  # a new process: nothing loaded
        with pytest.raises(DimensionMismatchError):
            await backend.ensure_collection("c", 4)
        with pytest.raises(DimensionMismatchError):
            await backend.upsert("c", [make_record("ok", seed=1), _short(make_record("short"))])
        with pytest.raises(ValidationError):
            nan = make_record("nan", seed=2, fields={"x": float("nan")})
            await backend.upsert("c", [make_record("ok", seed=1), nan])
        assert loaded(backend) == set()
        assert await backend.count("c", ALICE) == 0  # all or nothing


@pytest.mark.parametrize("junk_time", ["'then'", "1e999"])
async def test_an_unloaded_upsert_keeps_counts_and_unreadable_counts_count_as_none(
    tmp_path: Path, junk_time: str
) -> None:
    path = tmp_path / "k.db"
    url = f"sqlite:///{path}"
    async with open_backend(url) as backend:
        await backend.upsert("c", [make_record("good", seed=1), make_record("bad", seed=2)])
        await backend.touch("c", {"good": 2, "bad": 5}, 100.0)
    with sqlite3.connect(path) as conn:  # what a hand edit or a bug could leave
        conn.execute(f"UPDATE memkit_counters SET reads = 'many', read_at = {junk_time} WHERE id = 'bad'")
    async with open_backend(url) as backend:
        await backend.upsert("c", [make_record("good", seed=3), make_record("bad", seed=4)])
        assert loaded(backend) == set()
        got = {r.id: (r.access_count, r.last_accessed) for r in await backend.get("c", ["good", "bad"])}
        assert got == {"good": (2, 100.0), "bad": (0, None)}  # statistics: the record itself stays readable
        await backend.touch("c", {"bad": 1}, 50.0)
    with sqlite3.connect(path) as conn:  # and its next count wrote readable ones
        assert conn.execute("SELECT reads, read_at FROM memkit_counters WHERE id = 'bad'").fetchone() == (1, 50.0)


def _short(record: Record) -> Record:
    return msgspec.structs.replace(record, vector=unit(1)[:4].copy())


@pytest.mark.parametrize("read_first", [False, True])
async def test_a_row_that_cannot_be_read_is_repaired_alike_loaded_or_not(tmp_path: Path, read_first: bool) -> None:
    path = tmp_path / "r.db"
    async with open_backend(f"sqlite:///{path}") as backend:
        await backend.upsert("c", [make_record("row", seed=1)])
        await backend.touch("c", {"row": 3}, 100.0)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE memkit_records SET importance = 'high' WHERE id = 'row'")
    async with open_backend(f"sqlite:///{path}") as backend:
        if read_first:
            assert await backend.get("c", ["row"]) == []  # skipped as undecodable
        await backend.upsert("c", [make_record("row", seed=2)])
        [row] = await backend.get("c", ["row"])
    assert (row.access_count, row.last_accessed) == (3, 100.0)


async def test_an_id_twice_in_one_upsert_keeps_the_last(tmp_path: Path) -> None:
    async with open_backend(f"sqlite:///{tmp_path / 't.db'}") as backend:
        await backend.upsert("c", [make_record("x", text="first", seed=1), make_record("x", text="second", seed=2)])
        [x] = await backend.get("c", ["x"])
        assert x.text == "second" and await backend.count("c", ALICE) == 1


async def test_a_dimension_set_by_another_process_binds_a_cache_loaded_without_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'dim.db'}"
    async with open_backend(url) as one, open_backend(url) as two:
        await one.upsert("c", [make_record("plain")])  # no vector: no dimension yet
        assert await two.count("c", ALICE) == 1  # loaded, without a dimension
        await one.ensure_collection("c", 8)
        with pytest.raises(DimensionMismatchError):
            await two.upsert("c", [_short(make_record("four"))])


@pytest.mark.parametrize("dim", [0, -3, True])
async def test_a_dimension_must_be_a_positive_integer(tmp_path: Path, dim: int) -> None:
    async with open_backend(f"sqlite:///{tmp_path / 'p.db'}") as backend:
        with pytest.raises(ValidationError, match="positive integer"):
            await backend.ensure_collection("c", dim)


async def test_a_write_that_needs_the_collection_loads_it_before_taking_the_write_lock(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    async with open_backend(url) as backend:
        await backend.upsert("c", [make_record(f"r{i}", seed=i) for i in range(20)])
    async with open_backend(url) as backend:
        statements: list[str] = []
        backend._conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]
        assert await backend.delete("c", ["r1"]) == 1  # a delete updates the arrays: it loads them
        backend._conn.set_trace_callback(None)  # type: ignore[attr-defined]
    load = next(i for i, s in enumerate(statements) if s.startswith("SELECT r.rowid, r.collection, r.id"))
    assert load < statements.index("BEGIN IMMEDIATE"), statements


async def test_stored_tokens_follow_their_rows(tmp_path: Path) -> None:
    """A text's tokens are kept beside its row (a load reads them instead of tokenizing): a rewrite
    replaces them, a rewrite without text and a delete remove them, and a new process scores by them."""
    path = tmp_path / "t.db"
    async with open_backend(f"sqlite:///{path}") as backend:
        await backend.upsert("c", [make_record(i, text=f"{i} teapots", seed=n) for n, i in enumerate("abc")])
        await backend.upsert("c", [make_record("a", text="kettles boiling", seed=5), make_record("b", seed=6)])
        await backend.delete("c", ["c"])
    with sqlite3.connect(path) as conn:
        stored = conn.execute("SELECT r.id, t.tokens FROM memkit_tokens t LEFT JOIN memkit_records r "
                              "ON r.rowid = t.record").fetchall()  # fmt: skip
    assert stored == [("a", "kettl boil")]  # stemmed, as queries are
    async with open_backend(f"sqlite:///{path}") as backend:
        hits = await backend.query("c", Query(scope=ALICE, text="boiling kettle", k=3))
        assert [hit.record.id for hit in hits if hit.scores.lexical > 0] == ["a"]


LEXICAL = Weights(similarity=0.0, lexical=1.0, recency=0.0, importance=0.0)


async def _lexical_ids(url: str, collection: str, text: str) -> list[str]:
    async with open_backend(url) as backend:
        hits = await backend.query(collection, Query(scope=ALICE, text=text, k=5, weights=LEXICAL, now=1e12))
        return [hit.record.id for hit in hits if hit.scores.lexical > 0]


async def test_tokens_whose_rowid_now_names_another_record_are_not_used(tmp_path: Path) -> None:
    """A copy that renumbers rowids (``.dump`` and restore) leaves tokens under other records' rowids:
    each tokens row names its record, and one that does not match is ignored (the text is tokenized)."""
    path, url = tmp_path / "n.db", f"sqlite:///{tmp_path / 'n.db'}"
    async with open_backend(url) as backend:
        await backend.upsert("c", [make_record(f"r{i}", text=f"teapot{i}", seed=i) for i in range(6)])
    with sqlite3.connect(path) as conn:  # what renumbering does: every record's tokens move one rowid on
        conn.execute("UPDATE memkit_tokens SET record = -record")
        conn.execute("UPDATE memkit_tokens SET record = 1 - record")
    assert await _lexical_ids(url, "c", "teapot4") == ["r4"]


async def test_a_foreign_row_with_the_same_id_keeps_its_own_tokens(tmp_path: Path) -> None:
    path, url = tmp_path / "f.db", f"sqlite:///{tmp_path / 'f.db'}"
    async with open_backend(url) as backend:
        await backend.upsert("d", [make_record("x", text="apple", seed=1)])
        await backend.upsert("c", [make_record("x", text="teapot", seed=1)])
    with sqlite3.connect(path) as conn:  # a hand-edited change number that sorts after every integer
        conn.execute("UPDATE memkit_records SET seq = 'oops' WHERE collection = 'd'")
    async with open_backend(url) as backend:
        await backend.upsert("c", [make_record("x", text="kettle", seed=1)])
    assert await _lexical_ids(url, "c", "kettle") == ["x"]
    assert await _lexical_ids(url, "c", "teapot") == []
    assert await _lexical_ids(url, "d", "apple") == ["x"]
