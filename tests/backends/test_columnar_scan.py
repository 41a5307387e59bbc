"""The columnar collection's scans, counts, tags, counters and scope ids, beyond the conformance suite."""

from __future__ import annotations

import msgspec
import pytest
from memkit_backends._embedded.columnar import ColumnarCollection

from memkit.backend import Record, Scope
from memkit.errors import ValidationError
from memkit.testing import make_record

ALICE = Scope(user_id="alice")


def at(record: Record, timestamp: float, **changes: object) -> Record:
    return msgspec.structs.replace(record, timestamp=timestamp, **changes)


def scan_all(collection: ColumnarCollection, limit: int, newest_first: bool = False, **kwargs: object) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        page = collection.scan(ALICE, kwargs.get("filters"), limit, cursor, None, newest_first=newest_first)  # type: ignore[arg-type]
        seen += [r.id for r in page.records]
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


class CountingIds(ColumnarCollection):
    """Counts per-row id lookups: what a scan sorts or compares."""

    lookups = 0

    def _id(self, row: int) -> str:
        self.lookups += 1
        return super()._id(row)


def test_a_dedupe_lookup_touches_its_rows_only() -> None:
    collection = CountingIds(dim=8)
    collection.upsert([at(make_record(f"r{i:05d}", seed=i % 50, fields={"dedupe": f"k{i}", "kind": "fact"}), i)
                       for i in range(20_000)])  # fmt: skip
    page = collection.scan(ALICE, {"dedupe": "k12345", "kind": "fact"}, 1, None, None)
    assert [r.id for r in page.records] == ["r12345"] and page.next_cursor is None
    assert collection.lookups <= 1
    collection.lookups = 0
    page = collection.scan(ALICE, None, 10, None, None, newest_first=True)  # no filters: one mask, 10 ids sorted
    assert [r.id for r in page.records] == [f"r{i:05d}" for i in range(19_999, 19_989, -1)]
    assert collection.lookups <= 10
    assert collection.count(ALICE, {"kind": "fact"}, None) == 20_000


def test_ties_on_the_timestamp_are_ordered_by_id_across_pages() -> None:
    collection = ColumnarCollection()
    records = [at(make_record(f"t{i:02d}"), 100.0 + i // 7) for i in range(40)]  # runs of 7 equal timestamps
    collection.upsert(list(reversed(records)))
    for limit in (1, 3, 7, 8):
        assert scan_all(collection, limit) == [r.id for r in records]
        assert scan_all(collection, limit, newest_first=True) == [r.id for r in reversed(records)]


def test_scan_skips_expired_and_other_scopes_and_rejects_bad_cursors() -> None:
    collection = ColumnarCollection()
    collection.upsert([at(make_record("live"), 1.0), at(make_record("gone", expires_at=5.0), 2.0),
                       at(make_record("bob", user="bob"), 3.0)])  # fmt: skip
    assert [r.id for r in collection.scan(ALICE, None, 10, None, 10.0).records] == ["live"]
    assert [r.id for r in collection.scan(ALICE, None, 10, None, None).records] == ["live", "gone"]
    assert collection.count(ALICE, None, 10.0) == 1 and collection.count(Scope(user_id="nobody"), None, None) == 0
    for bad in ("not-a-cursor", "W10=", "WyJhIiwxXQ=="):  # garbage, [], ["a", 1]
        with pytest.raises(ValidationError):
            collection.scan(ALICE, None, 10, bad, None)


def test_tags_are_indexed_each_and_unindexed_on_rewrite_and_delete() -> None:
    collection = ColumnarCollection()
    collection.upsert([make_record("a", fields={"tags": ("x", "y")}), make_record("b", fields={"tags": ("y",)}),
                       make_record("c", fields={"n": 1}), make_record("d", fields={"n": True})])  # fmt: skip
    assert collection.count(ALICE, {"tags": "y"}, None) == 2
    assert collection.count(ALICE, {"tags": ("x", "nope")}, None) == 1
    assert collection.count(ALICE, {"n": 1}, None) == 1  # 1 and True are told apart, as JSON does
    assert collection.count(ALICE, {"n": True}, None) == 1
    collection.upsert([make_record("a", fields={"tags": ("z",)})])
    assert collection.count(ALICE, {"tags": "x"}, None) == 0 and collection.count(ALICE, {"tags": "z"}, None) == 1
    assert collection.get(["a"])[0].fields == {"tags": ("z",)}
    collection.delete(["a", "b"])
    assert collection.count(ALICE, {"tags": "y"}, None) == 0
    assert not any(key[0] == "tags" for key in collection._fields)


def test_a_rewrite_from_1_to_true_is_indexed_again_and_reads_hand_out_their_own_fields() -> None:
    """``{"n": 1} == {"n": True}`` in Python: the rewrite once kept the index's (n, 1) for a record holding
    True. Fields are kept flat and each read builds its dict: changing one changes nothing stored."""
    collection = ColumnarCollection()
    collection.upsert([make_record("c", fields={"n": 1, "kind": "fact"})])
    collection.upsert([make_record("c", fields={"n": True, "kind": "fact"})])
    assert collection.count(ALICE, {"n": True}, None) == 1 and collection.count(ALICE, {"n": 1}, None) == 0
    [got] = collection.get(["c"])
    assert got.fields == {"n": True, "kind": "fact"} and got.fields["n"] is True
    got.fields["kind"] = "changed"
    assert collection.get(["c"])[0].fields == {"n": True, "kind": "fact"}
    assert collection.count(ALICE, {"kind": "fact"}, None) == 1


def test_nan_and_odd_field_values_are_refused_writing_nothing() -> None:
    collection = ColumnarCollection()
    for fields in ({"x": float("nan")}, {"x": float("inf")}, {"x": ["a"]}, {"x": ("a", 1)}, {"x": None}):
        with pytest.raises(ValidationError):
            collection.upsert([make_record("ok"), make_record("bad", fields=fields)])
        assert len(collection) == 0


def test_counters_survive_rewrites_and_compaction_and_leave_with_a_delete() -> None:
    collection = ColumnarCollection(dim=8, dtype="int8")
    records = [make_record(f"c{i:04d}", seed=i) for i in range(3000)]
    collection.upsert(records)
    collection.touch({"c2999": 4, "c0001": 1, "ghost": 9}, 50.0)
    collection.touch({"c2999": 1}, 10.0)
    collection.upsert([msgspec.structs.replace(records[2999], body=b"new", access_count=77)])  # counters ignored
    assert collection.replace(msgspec.structs.replace(records[2999], body=b"newer"), b"new") is True
    collection.delete([r.id for r in records[:2000]])  # compacts: rows move
    assert len(collection) == 1000 and collection.columns().n_rows == 1000
    [got] = collection.get(["c2999"])
    assert (got.body, got.access_count, got.last_accessed) == (b"newer", 5, 50.0)
    assert collection.get(["c2998"])[0].access_count == 0 and collection.get(["c2998"])[0] is not None
    collection.delete(["c2999"])
    collection.upsert([records[2999]])
    assert collection.get(["c2999"])[0].access_count == 0


def test_replace_creates_if_absent_and_is_idempotent() -> None:
    collection = ColumnarCollection()
    first = make_record("n")
    assert collection.replace(first, None) is True
    assert collection.replace(first, None) is True  # retry
    assert collection.replace(msgspec.structs.replace(first, body=b"other"), None) is False
    assert collection.replace(msgspec.structs.replace(first, body=b"v2"), first.body) is True
    assert collection.replace(msgspec.structs.replace(first, body=b"v2"), first.body) is True  # retry
    assert collection.replace(msgspec.structs.replace(first, body=b"v3"), first.body) is False
    assert collection.get(["n"])[0].body == b"v2"


def test_scope_ids_are_released_when_no_row_uses_them() -> None:
    collection = ColumnarCollection(dim=8)
    records = [make_record(f"s{i}", user=f"user{i}", agent="bot", session=f"sess{i}", seed=i) for i in range(500)]
    collection.upsert(records)
    assert collection.scope_ids == 1001
    collection.upsert([msgspec.structs.replace(records[0], scope=Scope(user_id="user1", agent_id="bot"))])
    assert collection.scope_ids == 999  # user0 and sess0 were used by that row only
    collection.delete([r.id for r in records[1:]])
    assert collection.scope_ids == 2  # s0 alone is left, in scope (user1, bot)
    collection.delete(["s0"])
    assert collection.scope_ids == 0
    # Codes are reused, never confused: a new user gets a freed code and sees only its own rows.
    collection.upsert([make_record("fresh", user="newcomer", seed=1)])
    assert [r.id for r in collection.scan(Scope(user_id="newcomer"), None, 10, None, None).records] == ["fresh"]
    assert collection.count(Scope(user_id="user7"), None, None) == 0
    assert collection.count(Scope(agent_id="bot"), None, None) == 0
