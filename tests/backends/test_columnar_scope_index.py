"""The columnar collection's scope index against a scan of every record, through random writes, rewrites into
other scopes, deletes and compactions: a scope's rows (what scans, counts, queries and the near-duplicate check
read) are exactly the live rows of that scope, whatever happened before."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memkit_backends._embedded import columnar
from memkit_backends._embedded.columnar import ColumnarCollection
from memkit_backends._embedded.indexes import FieldIndex

from memkit.backend import Query, Scope, scope_matches
from memkit.testing import make_record

USERS, AGENTS, SESSIONS = ("u1", "u2", None), ("a1", None), ("s1", "s2", None)
write = st.tuples(st.just("write"), st.integers(0, 15), st.sampled_from(USERS), st.sampled_from(AGENTS),
                  st.sampled_from(SESSIONS))  # fmt: skip
delete = st.tuples(st.just("delete"), st.integers(0, 15), st.none(), st.none(), st.none())


def asked_scopes() -> list[Scope]:
    return [Scope(user_id=u, agent_id=a, session_id=s) for u, a, s in itertools.product(USERS, AGENTS, SESSIONS)
            if (u, a, s) != (None, None, None)]  # fmt: skip


@pytest.fixture(autouse=True)
def compact_early(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(columnar, "_COMPACT_MIN_DEAD", 4)  # compactions happen within a short run


@settings(max_examples=120, deadline=None)
@given(ops=st.lists(st.one_of(write, delete), max_size=60), batched=st.booleans())
def test_a_scopes_rows_are_its_live_rows(ops: list[tuple[str, int, str | None, str | None, str | None]],
                                         batched: bool) -> None:  # fmt: skip
    collection = ColumnarCollection(dim=8)
    held: dict[str, Scope] = {}
    pending = []
    for op, n, user, agent, session in ops:
        record_id = f"r{n}"
        if op == "write":
            record = make_record(record_id, user, agent=agent, session=session, seed=n)
            pending.append(record)
            held[record_id] = record.scope
            if not batched or len(pending) >= 40:  # 40 crosses the vectorised write path
                collection.upsert(pending)
                pending = []
        else:
            collection.upsert(pending)
            pending = []
            collection.delete([record_id])
            held.pop(record_id, None)
    collection.upsert(pending)
    for scope in asked_scopes():
        want = sorted(record_id for record_id, stored in held.items() if scope_matches(stored, scope))
        rows = collection.matching_rows(scope, None, None)
        assert sorted(collection.ids_of(rows)) == want
        assert collection.count(scope, None, None) == len(want)
        hits = collection.query(Query(scope=scope, vector=np.ones(8, np.float32), k=50, now=0.0))
        assert sorted(h.record.id for h in hits) == want


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.sampled_from(["k1", "k2"]), st.sampled_from(["v", 1, True]),
                              st.integers(0, 20)), max_size=80))  # fmt: skip
def test_the_field_index_holds_what_a_dict_of_sets_would(ops: list[tuple[bool, str, str | int, int]]) -> None:
    """One-row keys keep a bare row number (no set for the cycle collector to walk), and big keys a mask (here
    from 2 rows on); the rows are the same, whether added key by key or as a record's fields, and ``True`` is
    not ``1``."""
    indexes, want = (FieldIndex(), FieldIndex(mask_min_rows=2)), dict[tuple[str, str | int, bool], set[int]]()
    for adding, name, value, row in ops:
        key = (name, value, isinstance(value, bool))
        for index in indexes:
            if not adding:
                index.discard(key, row)
            elif row % 2:
                index.add(key, row)
            else:  # a record's fields: a tag tuple gives the same key
                index.add_fields(row, {name: (value,)} if isinstance(value, str) else {name: value})
        if adding:
            want.setdefault(key, set()).add(row)
        else:
            want.get(key, set()).discard(row)
    want = {key: rows for key, rows in want.items() if rows}
    keys = [(name, value, isinstance(value, bool)) for name in ("k1", "k2") for value in ("v", 1, True)]
    for index in indexes:
        assert set(index) == set(want)
        for key in keys:
            rows = want.get(key, set())
            assert set(index.rows(key)) == rows and len(index.rows(key)) == len(rows)
            assert all(row in index.rows(key) for row in rows) and -1 not in index.rows(key)
            assert index.sorted_rows(key).tolist() == sorted(rows)
