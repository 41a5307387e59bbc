"""The columnar collection behind memory:// and the SQLite cache: growth, tombstones, compaction."""

from __future__ import annotations

import time

import numpy as np
from memkit_backends._embedded.columnar import ColumnarCollection

from memkit.backend import Query, Scope, Weights
from memkit.testing import make_record
from memkit.testing._helpers import unit


def test_growth_delete_and_compaction_keep_results_right() -> None:
    collection = ColumnarCollection()
    records = [make_record(f"r{i:05d}", f"user{i % 3}", seed=i, text=f"word{i}") for i in range(3000)]
    for start in range(0, 3000, 500):
        collection.upsert(records[start : start + 500])
    assert len(collection) == 3000
    collection.delete([r.id for r in records[:2000]])
    # Compaction happened: the arrays hold only the live rows now, each owner's in one run, no holes.
    assert collection.columns().n_rows == 1000
    query = Query(scope=Scope(user_id="user1"), vector=unit(2500), text="word2500", k=3, now=time.time(),
                  weights=Weights(similarity=1.0, lexical=0.0, recency=0.0, importance=0.0))  # fmt: skip
    hits = collection.query(query)
    assert hits[0].record.id == "r02500"
    assert all(h.record.scope.user_id == "user1" for h in hits)
    [got] = collection.get(["r00001", "r02999"])
    assert got.id == "r02999" and got.body == records[2999].body
    assert got.vector is not records[2999].vector  # float32 vectors live in the matrix alone, returned exactly
    np.testing.assert_array_equal(got.vector, records[2999].vector)
    lexical = Query(scope=Scope(user_id="user0"), text="word2001", k=1, now=time.time(),
                    weights=Weights(similarity=0.0, lexical=1.0, recency=0.0, importance=0.0))  # fmt: skip
    assert collection.query(lexical)[0].record.id == "r02001"


def test_quantized_compaction_copies_stored_bits() -> None:
    collection = ColumnarCollection(dtype="int8")
    records = [make_record(f"q{i:05d}", seed=i) for i in range(2500)]
    collection.upsert(records)
    before = collection.columns().vectors[2400].copy()
    collection.delete([r.id for r in records[:1300]])
    after = collection.columns()
    row = 2400 - 1300
    assert np.array_equal(after.vectors[row], before)
