"""Conformance of the writes the layers build on: create-if-absent, idempotent compare-and-set, tag fields,
access counters beside the records."""

from __future__ import annotations

import time

import anyio
import pytest

from memkit.backend import Backend, Record, Scope
from memkit.errors import ScopeError
from memkit.testing._helpers import COLLECTION, DIM, assert_vector_kept, fields_of, make_record, query, require, unit

__all__ = ["WriteConformance"]


def _with(record: Record, **changes: object) -> Record:
    return Record(**{**fields_of(record), **changes})


class WriteConformance:
    """Mixed into ``BackendConformance``."""

    async def test_replace_creates_only_if_absent(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        first = make_record("node", text="first writer", seed=1)
        assert await backend.replace(COLLECTION, first, expected_body=None) is True
        assert await backend.replace(COLLECTION, first, expected_body=None) is True  # a retry of the same call
        second = _with(first, body=b"second writer", text="second writer")
        assert await backend.replace(COLLECTION, second, expected_body=None) is False
        [stored] = await backend.get(COLLECTION, ["node"])
        assert stored.body == first.body and stored.text == "first writer"
        hits = await backend.query(COLLECTION, query(Scope(user_id="alice"), vector=unit(1), text="writer", k=5))
        assert [h.record.id for h in hits] == ["node"]

    async def test_an_id_twice_in_one_upsert_keeps_the_last(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        first, last = make_record("x", text="first words", seed=1), make_record("x", text="last words", seed=2)
        await backend.upsert(COLLECTION, [first, make_record("y", seed=3), last])
        [x] = await backend.get(COLLECTION, ["x"])
        assert x.text == "last words" and x.body == last.body
        assert sorted(r.id for r in (await backend.scan(COLLECTION, Scope(user_id="alice"))).records) == ["x", "y"]
        # A bulk batch too (a server's bulk path: Postgres copies 64 rows or more, where either copy could win).
        old = [make_record(f"f{i:03d}", text="old words", seed=10 + i) for i in range(100)]
        new = [_with(record, text="new words") for record in old]
        await backend.upsert(COLLECTION, [*old[:50], *new, *old[50:], *new[50:]])
        stored = await backend.get(COLLECTION, [record.id for record in old])
        assert [record.text for record in stored] == ["new words"] * 100

    async def test_concurrent_creators_one_wins(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        wins: list[int] = []

        async def create(worker: int) -> None:
            record = _with(make_record("shared", seed=1), body=f"worker {worker}".encode())
            if await backend.replace(COLLECTION, record, expected_body=None):
                wins.append(worker)

        async with anyio.create_task_group() as group:
            for worker in range(8):
                group.start_soon(create, worker)
        [stored] = await backend.get(COLLECTION, ["shared"])
        assert len(wins) == 1 and stored.body == f"worker {wins[0]}".encode()

    async def test_a_retried_replace_reports_its_success(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        original = make_record("r", seed=1)
        await backend.upsert(COLLECTION, [original])
        newer = _with(original, body=b"v2")
        assert await backend.replace(COLLECTION, newer, expected_body=original.body) is True
        assert await backend.replace(COLLECTION, newer, expected_body=original.body) is True
        other = _with(original, body=b"v3")
        assert await backend.replace(COLLECTION, other, expected_body=original.body) is False
        assert (await backend.get(COLLECTION, ["r"]))[0].body == b"v2"

    async def test_tag_fields_match_any_of(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        await backend.upsert(COLLECTION, [
            make_record("t1", seed=1, fields={"tags": ("urgent", "billing"), "kind": "episode"}),
            make_record("t2", seed=2, fields={"tags": ("billing",), "kind": "episode"}),
            make_record("t3", seed=3, fields={"tags": (), "kind": "episode"}),
            make_record("t4", seed=4, fields={"tags": "urgent", "kind": "note"}),
        ])  # fmt: skip
        [got] = await backend.get(COLLECTION, ["t1"])
        assert got.fields["tags"] == ("urgent", "billing") and got.fields["kind"] == "episode"
        alice = Scope(user_id="alice")

        async def ids(filters: dict[str, object]) -> tuple[list[str], list[str], int]:
            hits = await backend.query(COLLECTION, query(alice, vector=unit(1), k=10, filters=filters))
            page = await backend.scan(COLLECTION, alice, filters=filters)  # type: ignore[arg-type]
            count = await backend.count(COLLECTION, alice, filters=filters)  # type: ignore[arg-type]
            return sorted(h.record.id for h in hits), sorted(r.id for r in page.records), count

        assert await ids({"tags": "urgent"}) == (["t1", "t4"], ["t1", "t4"], 2)
        assert await ids({"tags": ["nothing", "billing"]}) == (["t1", "t2"], ["t1", "t2"], 2)
        assert await ids({"tags": "billing", "kind": "episode"}) == (["t1", "t2"], ["t1", "t2"], 2)
        assert await ids({"tags": "urgent billing"}) == ([], [], 0)

    async def test_access_counters_live_beside_the_record(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        record = make_record("m", text="counted words", seed=1)
        await backend.upsert(COLLECTION, [record, make_record("n", seed=2)])
        at = time.time()
        await backend.touch(COLLECTION, {"m": 2, "ghost": 5}, at)
        await backend.touch(COLLECTION, {"m": 1}, at - 100)  # an older touch counts but keeps the latest time
        [got] = await backend.get(COLLECTION, ["m"])
        assert got.access_count == 3 and got.last_accessed == pytest.approx(at)
        assert got.body == record.body and got.text == record.text
        assert_vector_kept(got, record)
        assert await backend.get(COLLECTION, ["ghost"]) == []
        # Writes of the record keep its counters; a delete takes them along.
        await backend.upsert(COLLECTION, [_with(record, body=b"rewritten")])
        assert (await backend.replace(COLLECTION, _with(record, body=b"again"), expected_body=b"rewritten")) is True
        hit = (await backend.query(COLLECTION, query(Scope(user_id="alice"), vector=unit(1), k=1)))[0]
        assert hit.record.id == "m" and hit.record.access_count == 3
        assert [r.access_count for r in (await backend.scan(COLLECTION, Scope(user_id="alice"))).records] == [3, 0]
        await backend.delete(COLLECTION, ["m"])
        await backend.upsert(COLLECTION, [record])
        assert (await backend.get(COLLECTION, ["m"]))[0].access_count == 0

    async def test_concurrent_touches_add_up(self, backend: Backend) -> None:
        require(backend, "atomic_replace")
        await backend.ensure_collection(COLLECTION, DIM)
        await backend.upsert(COLLECTION, [make_record("hot", seed=1)])
        async with anyio.create_task_group() as group:
            for _ in range(20):
                group.start_soon(backend.touch, COLLECTION, {"hot": 1}, time.time())
        assert (await backend.get(COLLECTION, ["hot"]))[0].access_count == 20

    async def test_nearest_checks_a_batch_of_vectors(self, backend: Backend) -> None:
        require(backend, "vector_search")
        await backend.ensure_collection(COLLECTION, DIM)
        now = time.time()
        await backend.upsert(COLLECTION, [make_record(f"v{i}", seed=i) for i in range(10)])
        await backend.upsert(COLLECTION, [make_record("bob-1", "bob", seed=1),
                                          make_record("gone-5", seed=5, expires_at=now - 1)])  # fmt: skip
        alice = Scope(user_id="alice")
        vectors = [unit(1), unit(5), unit(999), unit(3)]
        found = await backend.nearest(COLLECTION, alice, vectors, k=2, min_similarity=0.99, now=now)
        assert [[i for i, _ in row] for row in found] == [["v1"], ["v5"], [], ["v3"]]
        assert all(abs(similarity - 1.0) < 1e-2 for row in found for _, similarity in row)
        loose = await backend.nearest(COLLECTION, alice, [unit(1)], k=3, now=now)
        assert len(loose[0]) == 3 and loose[0][0][0] == "v1"
        assert [s for _, s in loose[0]] == sorted((s for _, s in loose[0]), reverse=True)
        assert await backend.nearest(COLLECTION, Scope(user_id="nobody"), vectors, now=now) == [[], [], [], []]
        assert await backend.nearest(COLLECTION, alice, [], now=now) == []

    async def test_nearest_many_answers_each_scope_as_nearest_does(self, backend: Backend) -> None:
        """A batch spanning users: each request answered from its own scope only, in order, as ``nearest``."""
        require(backend, "vector_search")
        await backend.ensure_collection(COLLECTION, DIM)
        now = time.time()
        await backend.upsert(COLLECTION, [make_record(f"a{i}", seed=i) for i in range(6)])
        await backend.upsert(COLLECTION, [make_record(f"b{i}", "bob", seed=i) for i in range(3, 9)])
        alice, bob, nobody = Scope(user_id="alice"), Scope(user_id="bob"), Scope(user_id="nobody")
        vectors = [unit(4), unit(1), unit(7), unit(999)]
        requests = [(alice, vectors), (bob, vectors), (nobody, vectors[:1]), (alice, [])]
        found = await backend.nearest_many(COLLECTION, requests, k=2, min_similarity=0.99, now=now)
        assert [[[i for i, _ in row] for row in answer] for answer in found] == [
            [["a4"], ["a1"], [], []],
            [["b4"], [], ["b7"], []],
            [[]],
            [],
        ]
        for (scope, asked), answer in zip(requests, found, strict=True):
            alone = await backend.nearest(COLLECTION, scope, asked, k=2, min_similarity=0.99, now=now)
            assert [[i for i, _ in row] for row in answer] == [[i for i, _ in row] for row in alone]
        loose = await backend.nearest_many(COLLECTION, [(bob, [unit(4)]), (alice, [unit(4)])], k=3, now=now)
        assert {i for i, _ in loose[0][0]} <= {f"b{i}" for i in range(3, 9)} and len(loose[0][0]) == 3
        assert {i for i, _ in loose[1][0]} <= {f"a{i}" for i in range(6)} and loose[1][0][0][0] == "a4"
        assert await backend.nearest_many(COLLECTION, [], now=now) == []
        with pytest.raises(ScopeError):
            await backend.nearest_many(COLLECTION, [(alice, vectors), (Scope(), vectors)], now=now)
