"""Where the columnar collection puts a new record: its owner's rows sit in runs (a scope's scan reads them
nearly contiguously), still ascending in arrival order, with few holes; a compaction writes each owner's
rows as one run. Holes are never seen: not counted, scanned, queried or returned."""

from __future__ import annotations

import time

import numpy as np
import numpy.typing as npt
import pytest
from memkit_backends._embedded.columnar import ColumnarCollection
from memkit_backends._embedded.pages import MAX_PAGE_ROWS, RowPages

from memkit.backend import Query, Scope, Weights
from memkit.testing import make_record
from memkit.testing._helpers import unit

OWNERS = ("ada", "bob", "cy", "dee")


def runs(rows: npt.NDArray[np.int64]) -> list[int]:
    """Lengths of the runs of consecutive row numbers."""
    return [len(run) for run in np.split(rows, np.flatnonzero(np.diff(rows) != 1) + 1)] if rows.size else []


def interleaved(collection: ColumnarCollection, per_owner: int) -> list[str]:
    """Records of the owners one at a time, in turns (as users of one agent write); their ids in order."""
    ids = []
    for i in range(per_owner):
        for owner in OWNERS:
            record = make_record(f"{owner}-{i:04d}", owner, seed=len(ids), text=f"note {i} of {owner}")
            collection.upsert([record])
            ids.append(record.id)
    return ids


def test_a_page_holds_a_quarter_of_the_rows_taken_before_it_up_to_the_most() -> None:
    pages, end, sizes = RowPages(), 0, []
    for taken in range(1000):
        row, after = pages.take((0, "ada"), end)
        if after > end:  # a new page
            assert row == end and after - end <= max(1, taken // 4)  # holes: under a quarter of the rows
            sizes.append(after - end)
            end = after
    assert sizes[:10] == [1] * 8 + [2, 2] and max(sizes) == MAX_PAGE_ROWS and sum(sizes) - 1000 < MAX_PAGE_ROWS


def test_dense_pages_are_one_row() -> None:
    pages = RowPages()
    assert [pages.take((0, "ada"), end, dense=True) for end in range(300)] == [(end, end + 1) for end in range(300)]


def test_interleaved_owners_get_runs_in_arrival_order_with_few_holes() -> None:
    collection = ColumnarCollection()
    interleaved(collection, 500)
    n_rows = collection.columns().n_rows
    assert len(collection) == 2000 and n_rows - 2000 < len(OWNERS) * MAX_PAGE_ROWS
    for owner in OWNERS:
        rows = collection.matching_rows(Scope(user_id=owner), None, None)
        ids = collection.ids_of(rows)
        assert ids == [f"{owner}-{i:04d}" for i in range(500)]  # ascending rows are arrival order
        # Appended, they were 500 runs of 1; the rows past the first 256 are in runs of 64 (the last one shorter).
        assert max(runs(rows)) == MAX_PAGE_ROWS and sum(n for n in runs(rows) if n == MAX_PAGE_ROWS) >= 500 - 256 - 64
    assert int(collection.columns().alive[:n_rows].sum()) == 2000  # holes are never alive


def test_holes_are_not_counted_scanned_or_queried() -> None:
    collection = ColumnarCollection()
    interleaved(collection, 100)
    everyone = [Scope(user_id=owner) for owner in OWNERS]
    assert [collection.count(scope, None, None) for scope in everyone] == [100] * 4
    page = collection.scan(Scope(user_id="bob"), None, 1000, None, None)
    assert len(page.records) == 100 and {r.scope.user_id for r in page.records} == {"bob"}
    query = Query(scope=Scope(user_id="cy"), vector=unit(999_999), k=500, now=time.time(),
                  weights=Weights(similarity=1.0, lexical=0.0, recency=0.0, importance=0.0))  # fmt: skip
    hits = collection.query(query)
    assert len(hits) == 100 and all(hit.record.scope.user_id == "cy" for hit in hits)


def test_ties_go_to_the_earlier_stored_record_of_an_owner() -> None:
    collection = ColumnarCollection()
    interleaved(collection, 40)
    same = unit(123)
    for i in range(3):  # three equal vectors, stored apart, between other owners' records
        collection.upsert([make_record(f"twin{i}", "ada", seed=123)])
        interleaved_more = [make_record(f"other{i}-{owner}", owner, seed=500 + i) for owner in OWNERS[1:]]
        collection.upsert(interleaved_more)
    query = Query(scope=Scope(user_id="ada"), vector=same, k=3, now=time.time(),
                  weights=Weights(similarity=1.0, lexical=0.0, recency=0.0, importance=0.0))  # fmt: skip
    assert [hit.record.id for hit in collection.query(query)] == ["twin0", "twin1", "twin2"]


def test_compaction_writes_each_owner_as_one_run() -> None:
    collection = ColumnarCollection(dtype="float16")
    ids = interleaved(collection, 600)
    gone = [record_id for record_id in ids if int(record_id[-4:]) % 2 == 0]  # half of each owner's
    kept = [record_id for record_id in ids if int(record_id[-4:]) % 2 == 1]
    stored = {record_id: collection.get([record_id])[0] for record_id in kept}
    before = {record_id: collection.columns().vectors[collection._row_of[record_id]].copy() for record_id in stored}
    collection.delete(gone)  # half the rows: compacts
    assert collection._dead == 0
    assert collection.columns().n_rows == 1200  # taken densely: no holes
    for owner in OWNERS:
        rows = collection.matching_rows(Scope(user_id=owner), None, None)
        assert len(runs(rows)) == 1
        assert collection.ids_of(rows) == [i for i in kept if i.startswith(f"{owner}-")]
    for record_id, record in stored.items():  # the stored bits moved with their rows, not re-encoded
        assert np.array_equal(collection.columns().vectors[collection._row_of[record_id]], before[record_id])
        [got] = collection.get([record_id])
        assert got.body == record.body and got.scope == record.scope


def test_capacity_grows_in_powers_of_two_whatever_the_batches() -> None:
    """A growth holds old and new columns at once: capacities that followed the first batch's size (its pages'
    holes included) put the last growth of a 100k ingest at 90k rows, the process's peak 70 MB higher."""
    collection = ColumnarCollection()
    capacities = set()
    for start in range(0, 5000, 700):
        collection.upsert([make_record(f"g{i}", OWNERS[i % 4], seed=i) for i in range(start, start + 700)])
        capacities.add(int(collection.columns().alive.shape[0]))
    assert capacities <= {2**k for k in range(6, 14)} and max(capacities) >= collection.columns().n_rows


def test_a_growth_that_fails_leaves_the_collection_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    collection = ColumnarCollection()
    collection.upsert([make_record(f"a{i}", OWNERS[i % 4], seed=i) for i in range(60)])

    def out_of_memory(capacity: int) -> None:
        raise MemoryError

    with monkeypatch.context() as patched:
        patched.setattr(collection, "_allocate", out_of_memory)
        with pytest.raises(MemoryError):
            collection.upsert([make_record(f"b{i}", OWNERS[i % 4], seed=i) for i in range(1000)])
    assert (
        len(collection) == 60
        and collection.get(["b0"]) == []
        and collection.count(Scope(user_id="ada"), None, None) == 15
    )
    collection.upsert([make_record(f"b{i}", OWNERS[i % 4], seed=i) for i in range(100)])  # and writes on
    assert len(collection) == 160
