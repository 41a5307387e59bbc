"""Conformance of scans and counts: (timestamp, id) order both ways, keyset cursors, the empty-scope guard."""

from __future__ import annotations

import time

import msgspec
import pytest

from memkit.backend import Backend, Record, Scope
from memkit.errors import ScopeError
from memkit.testing._helpers import COLLECTION, DIM, fields_of, make_record, query, unit

__all__ = ["ScanConformance"]


def _at(record: Record, timestamp: float) -> Record:
    return Record(**{**fields_of(record), "timestamp": timestamp})


async def _scan_all(backend: Backend, scope: Scope, limit: int, **kwargs: object) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        page = await backend.scan(COLLECTION, scope, limit=limit, cursor=cursor, **kwargs)  # type: ignore[arg-type]
        assert len(page.records) <= limit
        seen += [r.id for r in page.records]
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


class ScanConformance:
    """Mixed into ``BackendConformance``."""

    async def test_scan_orders_by_timestamp_both_ways(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        base = time.time() - 1000
        # Ids and timestamps in different orders, and a tie broken by id.
        records = [_at(make_record(f"r{(i * 7) % 20:02d}", seed=i), base + i) for i in range(20)]
        records.append(_at(make_record("tie", seed=99), base + 5))
        await backend.upsert(COLLECTION, records)
        await backend.upsert(COLLECTION, [make_record("bob-1", "bob", seed=1)])
        alice = Scope(user_id="alice")
        oldest_first = sorted(records, key=lambda r: (r.timestamp, r.id))
        assert await _scan_all(backend, alice, 6) == [r.id for r in oldest_first]
        assert await _scan_all(backend, alice, 4, newest_first=True) == [r.id for r in reversed(oldest_first)]
        newest = await backend.scan(COLLECTION, alice, limit=3, newest_first=True)
        assert [r.id for r in newest.records] == [r.id for r in oldest_first[-1:-4:-1]]

    async def test_scan_cursor_visits_each_record_once_under_inserts_and_deletes(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        base = time.time() - 1000
        original = [_at(make_record(f"o{i:02d}", seed=i), base + i) for i in range(30)]
        await backend.upsert(COLLECTION, original)
        for newest_first in (False, True):
            seen: list[str] = []
            cursor = None
            step = 0
            while True:
                page = await backend.scan(COLLECTION, Scope(user_id="alice"), limit=5, cursor=cursor,
                                          newest_first=newest_first)  # fmt: skip
                seen += [r.id for r in page.records]
                # Between pages: forget what was just read, insert before and after the cursor.
                await backend.delete(COLLECTION, [r.id for r in page.records[:1]])
                extra = [_at(make_record(f"x{newest_first:d}{step}{j}", seed=j + 20), base + 15.5 + j)
                         for j in (-20, 0, 40)]  # fmt: skip
                await backend.upsert(COLLECTION, extra)
                step += 1
                if page.next_cursor is None:
                    break
                cursor = page.next_cursor
            survivors = [r.id for r in original if r.id in seen]
            assert len(seen) == len(set(seen)), f"visited twice: {sorted(i for i in seen if seen.count(i) > 1)}"
            if not newest_first:  # the first pass saw every original record exactly once
                assert sorted(survivors) == sorted(r.id for r in original)

    async def test_count(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        now = time.time()
        await backend.upsert(COLLECTION, [make_record(f"c{i}", seed=i, fields={"kind": "a" if i % 3 else "b"})
                                          for i in range(10)])  # fmt: skip
        await backend.upsert(COLLECTION, [make_record("gone", seed=1, expires_at=now - 1, fields={"kind": "b"})])
        await backend.upsert(COLLECTION, [make_record("bob-1", "bob", seed=1, fields={"kind": "b"})])
        alice = Scope(user_id="alice")
        assert await backend.count(COLLECTION, alice) == 11
        assert await backend.count(COLLECTION, alice, now=now) == 10
        assert await backend.count(COLLECTION, alice, filters={"kind": "b"}, now=now) == 4
        assert await backend.count(COLLECTION, alice, filters={"kind": ["a", "b"]}, now=now) == 10
        assert await backend.count(COLLECTION, Scope(user_id="nobody")) == 0
        assert await backend.count(COLLECTION, Scope(), all_scopes=True, now=now) == 11
        assert await backend.count("never-created", alice) == 0

    async def test_an_empty_scope_is_refused_unless_asked_for(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        await backend.upsert(COLLECTION, [make_record("a1", "alice", seed=1), make_record("b1", "bob", seed=2)])
        with pytest.raises(ScopeError):
            await backend.scan(COLLECTION, Scope())
        with pytest.raises(ScopeError):
            await backend.count(COLLECTION, Scope())
        with pytest.raises(ScopeError):
            query(Scope(), vector=unit(1))
        everyone = await backend.scan(COLLECTION, Scope(), all_scopes=True)
        assert sorted(r.id for r in everyone.records) == ["a1", "b1"]
        # The opt-in never widens a named scope.
        alice = await backend.scan(COLLECTION, Scope(user_id="alice"), all_scopes=True)
        assert [r.id for r in alice.records] == ["a1"]
        hits = await backend.query(COLLECTION, msgspec.structs.replace(query(Scope(), all_scopes=True, vector=unit(1)),
                                                                       k=10))  # fmt: skip
        assert sorted(h.record.id for h in hits) == ["a1", "b1"]
