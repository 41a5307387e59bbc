"""Conformance of the record face: CRUD, scopes, filters, search, expiry, scans."""

from __future__ import annotations

import time
import uuid

import anyio
import anyio.lowlevel
import msgspec
import numpy as np
import pytest

from memkit.backend import Backend, Record, Scope, Weights
from memkit.errors import DimensionMismatchError, MemkitError
from memkit.testing._helpers import (
    COLLECTION,
    DIM,
    SIMILARITY_ONLY,
    assert_vector_kept,
    fields_of,
    make_record,
    query,
    require,
    unit,
)
from memkit.testing._kv import KeyValueConformance
from memkit.testing._scan import ScanConformance
from memkit.testing._writes import WriteConformance

__all__ = ["BackendConformance"]


class BackendConformance(WriteConformance, ScanConformance, KeyValueConformance):
    """Subclass and provide an async ``backend`` fixture yielding an open, empty backend."""

    approximate_search: bool = False
    """Set on a configuration whose vector search may miss rows (an ANN index) or round similarities
    (half precision): its hybrid top k is then held to 95% overlap with the exact one, not 100%."""

    # -- CRUD -----------------------------------------------------------------------------------
    async def test_upsert_get_roundtrip(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        record = make_record("r1", text="hello world", seed=1, fields={"kind": "fact", "n": 3, "ok": True})
        await backend.upsert(COLLECTION, [record])
        [got] = await backend.get(COLLECTION, ["r1"])
        assert got.id == "r1" and got.body == record.body and got.text == "hello world"
        assert got.fields == {"kind": "fact", "n": 3, "ok": True}
        assert got.scope == record.scope
        assert_vector_kept(got, record)

    async def test_upsert_replaces(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        await backend.upsert(COLLECTION, [make_record("r1", text="old words", seed=1)])
        await backend.upsert(COLLECTION, [make_record("r1", text="new words", seed=2, importance=0.9)])
        [got] = await backend.get(COLLECTION, ["r1"])
        assert got.text == "new words" and abs(got.importance - 0.9) < 1e-6
        page = await backend.scan(COLLECTION, Scope(user_id="alice"))
        assert [r.id for r in page.records] == ["r1"]

    async def test_replace_is_compare_and_set(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        original = make_record("r", text="first", seed=1)
        await backend.upsert(COLLECTION, [original])
        newer = Record(**{**fields_of(original), "body": b"second", "text": "second"})
        assert await backend.replace(COLLECTION, newer, expected_body=b"stale") is False
        assert (await backend.get(COLLECTION, ["r"]))[0].body == original.body
        assert await backend.replace(COLLECTION, newer, expected_body=original.body) is True
        assert (await backend.get(COLLECTION, ["r"]))[0].body == b"second"
        ghost = make_record("ghost", seed=2)
        assert await backend.replace(COLLECTION, ghost, expected_body=ghost.body) is False
        assert await backend.get(COLLECTION, ["ghost"]) == []

    async def test_replace_many_decides_each_record_on_its_own(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        kept, moved = make_record("kept", seed=1), make_record("moved", seed=2)
        await backend.upsert(COLLECTION, [kept, moved])
        changed = Record(**{**fields_of(kept), "body": b"changed"})
        stale = Record(**{**fields_of(moved), "body": b"lost"})
        fresh = make_record("fresh", seed=3)
        again = make_record("moved", seed=2)  # the stored body already: a retry that had succeeded
        verdicts = await backend.replace_many(
            COLLECTION, [(changed, kept.body), (stale, b"not what is stored"), (fresh, None)]
        )
        assert verdicts == [True, False, True]
        got = {r.id: r.body for r in await backend.get(COLLECTION, ["kept", "moved", "fresh"])}
        assert got == {"kept": b"changed", "moved": moved.body, "fresh": fresh.body}
        assert await backend.replace_many(COLLECTION, [(again, b"anything"), (fresh, None)]) == [True, True]
        assert await backend.replace_many(COLLECTION, []) == []

    async def test_concurrent_read_modify_replace_loses_nothing(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        await backend.upsert(COLLECTION, [Record(**{**fields_of(make_record("n", seed=1)), "body": b"0"})])

        async def increment() -> None:
            while True:
                [current] = await backend.get(COLLECTION, ["n"])
                count = int(current.body.split(b":")[0]) + 1  # with a nonce: see the key-value twin of this test
                bumped = Record(**{**fields_of(current), "body": f"{count}:{uuid.uuid4().hex}".encode()})
                if await backend.replace(COLLECTION, bumped, expected_body=current.body):
                    return
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as group:
            for _ in range(20):
                group.start_soon(increment)
        assert (await backend.get(COLLECTION, ["n"]))[0].body.split(b":")[0] == b"20"

    async def test_get_missing_and_delete(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        await backend.upsert(COLLECTION, [make_record("a", seed=1), make_record("b", seed=2)])
        assert await backend.get(COLLECTION, ["nope"]) == []
        assert await backend.delete(COLLECTION, ["a", "nope"]) == 1
        assert [r.id for r in await backend.get(COLLECTION, ["a", "b"])] == ["b"]
        assert await backend.delete(COLLECTION, ["a"]) == 0

    async def test_dimension_mismatch_writes_nothing(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        good = make_record("good", seed=1)
        bad = Record(id="bad", scope=Scope(user_id="alice"), body=b"x", vector=np.ones(DIM + 1, np.float32))
        with pytest.raises(DimensionMismatchError):
            await backend.upsert(COLLECTION, [good, bad])
        assert await backend.get(COLLECTION, ["good", "bad"]) == []

    # -- scopes and isolation -------------------------------------------------------------------
    async def test_scope_isolation(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        await backend.upsert(
            COLLECTION,
            [
                make_record("a1", "alice", text="secret plan", seed=1),
                make_record("b1", "bob", text="secret plan", seed=1),
            ],
        )
        alice = Scope(user_id="alice")
        hits = await backend.query(COLLECTION, query(alice, vector=unit(1), text="secret plan", k=10))
        assert [h.record.id for h in hits] == ["a1"]
        assert [r.id for r in await backend.get(COLLECTION, ["a1", "b1"], alice)] == ["a1"]
        assert await backend.delete(COLLECTION, ["b1"], alice) == 0
        assert [r.id for r in (await backend.scan(COLLECTION, alice)).records] == ["a1"]
        assert await backend.query(COLLECTION, query(Scope(user_id="mallory"), vector=unit(1), k=10)) == []
        # Opting in to cross-scope search never widens a scope that names a user.
        widened = await backend.query(COLLECTION, query(alice, all_scopes=True, vector=unit(1), k=10))
        assert [h.record.id for h in widened] == ["a1"]
        everyone = await backend.query(COLLECTION, query(Scope(), all_scopes=True, vector=unit(1), k=10))
        assert sorted(h.record.id for h in everyone) == ["a1", "b1"]

    async def test_scope_components(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        await backend.upsert(
            COLLECTION,
            [
                make_record("s1", "alice", agent="bot", session="one", seed=1),
                make_record("s2", "alice", agent="bot", session="two", seed=2),
                make_record("s3", "alice", agent="other", session="one", seed=3),
            ],
        )
        hits = await backend.query(COLLECTION, query(Scope(user_id="alice", session_id="one"), vector=unit(1), k=10))
        assert sorted(h.record.id for h in hits) == ["s1", "s3"]
        hits = await backend.query(COLLECTION, query(Scope(agent_id="bot"), vector=unit(1), k=10))
        assert sorted(h.record.id for h in hits) == ["s1", "s2"]

    # -- filters --------------------------------------------------------------------------------
    async def test_filters(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        await backend.upsert(
            COLLECTION,
            [
                make_record("f1", seed=1, fields={"kind": "fact", "topic": "food"}),
                make_record("f2", seed=2, fields={"kind": "preference", "topic": "food"}),
                make_record("f3", seed=3, fields={"kind": "fact", "topic": "travel"}),
            ],
        )
        alice = Scope(user_id="alice")
        hits = await backend.query(COLLECTION, query(alice, vector=unit(1), k=10, filters={"kind": "fact"}))
        assert sorted(h.record.id for h in hits) == ["f1", "f3"]
        both = {"kind": ["fact", "preference"], "topic": "food"}
        hits = await backend.query(COLLECTION, query(alice, vector=unit(1), k=10, filters=both))
        assert sorted(h.record.id for h in hits) == ["f1", "f2"]
        page = await backend.scan(COLLECTION, alice, filters={"topic": "travel"})
        assert [r.id for r in page.records] == ["f3"]
        assert await backend.query(COLLECTION, query(alice, vector=unit(1), filters={"kind": "nope"})) == []

    # -- vector search --------------------------------------------------------------------------
    async def test_vector_search_ranks_by_similarity(self, backend: Backend) -> None:
        require(backend, "vector_search")
        await backend.ensure_collection(COLLECTION, DIM)
        await backend.upsert(COLLECTION, [make_record(f"v{i}", seed=i) for i in range(20)])
        hits = await backend.query(
            COLLECTION, query(Scope(user_id="alice"), vector=unit(7), k=3, weights=SIMILARITY_ONLY)
        )
        assert hits[0].record.id == "v7"
        assert abs(hits[0].scores.similarity - 1.0) < 1e-2
        assert [h.scores.final for h in hits] == sorted((h.scores.final for h in hits), reverse=True)

    async def test_query_dimension_mismatch(self, backend: Backend) -> None:
        require(backend, "vector_search")
        await backend.ensure_collection(COLLECTION, DIM)
        await backend.upsert(COLLECTION, [make_record("v", seed=1)])
        with pytest.raises(DimensionMismatchError):
            await backend.query(COLLECTION, query(Scope(user_id="alice"), vector=np.ones(DIM + 2, np.float32)))

    async def test_importance_and_recency_signals(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        now = time.time()
        old = make_record("old", seed=1, importance=0.5)
        old = Record(**{**fields_of(old), "timestamp": now - 60 * 86400})
        new = make_record("new", seed=1, importance=0.5)
        important = make_record("imp", seed=1, importance=1.0)
        important = Record(**{**fields_of(important), "timestamp": now - 60 * 86400})
        await backend.upsert(COLLECTION, [old, new, important])
        recency_only = Weights(similarity=0.0, lexical=0.0, recency=1.0, importance=0.0)
        hits = await backend.query(COLLECTION, query(Scope(user_id="alice"), vector=unit(1), k=3, weights=recency_only))
        assert hits[0].record.id == "new" and abs(hits[1].scores.recency - 0.25) < 0.01
        hits = await backend.query(COLLECTION, query(Scope(user_id="alice"), vector=unit(1), k=3, min_importance=0.9))
        assert [h.record.id for h in hits] == ["imp"]

    # -- text search ----------------------------------------------------------------------------
    async def test_text_search(self, backend: Backend) -> None:
        require(backend, "text_search")
        await backend.ensure_collection(COLLECTION, DIM)
        await backend.upsert(
            COLLECTION,
            [
                make_record("t1", text="Caroline went hiking in the Rockies", seed=1),
                make_record("t2", text="Melanie painted a sunset", seed=2),
                make_record("t3", text="hiking boots are on sale", seed=3),
            ],
        )
        lexical_only = Weights(similarity=0.0, lexical=1.0, recency=0.0, importance=0.0)
        hits = await backend.query(
            COLLECTION, query(Scope(user_id="alice"), text="Where did Caroline go hiking?", k=3, weights=lexical_only)
        )
        assert hits[0].record.id == "t1" and abs(hits[0].scores.lexical - 1.0) < 1e-6
        assert hits[1].record.id == "t3" and 0 < hits[1].scores.lexical < 1
        assert hits[2].scores.lexical == 0.0

    async def test_text_scores_do_not_depend_on_other_users(self, backend: Backend) -> None:
        """A user's text ranking is the same alone and among other users' records of the same lengths (a
        server that scored the scope clause as a search term would favour the user's short records)."""
        require(backend, "text_search")
        lengths = [n + 1 + i % 3 for i, n in enumerate([2, 3, 5, 8, 12, 16, 20, 24])]
        # Half the user's records lack the query's word, so its document frequency differs from the scope's size.
        mine = [make_record(f"a{i}", text=" ".join(["apple"] * (1 + i % 3) + ["pear"] * (n - 1 - i % 3)))
                for i, n in enumerate(lengths)]  # fmt: skip
        mine += [make_record(f"b{i}", text=" ".join(["pear"] * n)) for i, n in enumerate(lengths)]
        # Other users' records mirror the user's word for word, in other words: lengths and statistics match.
        others = [make_record(f"o{u}-{r.id}", user=f"other{u}", text=(r.text or "").replace("apple", "plum"))
                  for u in range(30) for r in mine]  # fmt: skip
        lexical_only = Weights(similarity=0.0, lexical=1.0, recency=0.0, importance=0.0)
        ask = query(Scope(user_id="alice"), text="apple", k=len(lengths), weights=lexical_only)
        scores = []
        for collection, records in ((COLLECTION, mine), (COLLECTION + "-shared", mine + others)):
            await backend.ensure_collection(collection, DIM)
            await backend.upsert(collection, records)
            scores.append({h.record.id: h.scores.lexical for h in await backend.query(collection, ask)})
        alone, shared = scores
        assert alone.keys() == {f"a{i}" for i in range(len(lengths))}
        assert shared.keys() == alone.keys() and all(abs(shared[i] - alone[i]) < 1e-4 for i in alone), (alone, shared)

    async def test_filters_do_not_rescale_text_scores(self, backend: Backend) -> None:
        """Text scores are scaled by the best match in the query's scope, whatever its filters: a filtered
        query's scores then compare with an unfiltered one's (the neighbour boost adds them up)."""
        require(backend, "text_search")
        await backend.ensure_collection(COLLECTION, DIM)
        texts = ["apple apple apple", "apple pear", "apple pear plum fig", "pear plum", "apple kiwi", "kiwi"]
        records = [make_record(f"r{i}", text=text, seed=i, fields={"group": "best" if i == 0 else "rest"},
                               importance=0.1 if i == 0 else 0.5)
                   for i, text in enumerate(texts)]  # fmt: skip
        await backend.upsert(COLLECTION, records)
        ask = query(Scope(user_id="alice"), vector=unit(7), text="apple", k=len(texts))
        everything = {h.record.id: h.scores for h in await backend.query(COLLECTION, ask)}
        for narrowed in (msgspec.structs.replace(ask, filters={"group": "rest"}),
                         msgspec.structs.replace(ask, min_importance=0.3)):  # fmt: skip
            filtered = await backend.query(COLLECTION, narrowed)
            assert {h.record.id for h in filtered} == {f"r{i}" for i in range(1, len(texts))}
            for hit in filtered:
                want = everything[hit.record.id]
                assert abs(hit.scores.lexical - want.lexical) < 1e-5, (hit.record.id, hit.scores, want)
                assert abs(hit.scores.final - want.final) < 1e-5

    async def test_text_search_is_not_query_syntax(self, backend: Backend) -> None:
        require(backend, "text_search")
        await backend.ensure_collection(COLLECTION, DIM)
        await backend.upsert(COLLECTION, [make_record("x", text="plain words here", seed=1)])
        for nasty in ['" OR 1=1 --', "NEAR(a b)", "*", "@user_id:{bob}", "a AND NOT b", "'); DROP TABLE x; --", "\\"]:
            await backend.query(COLLECTION, query(Scope(user_id="alice"), text=nasty, k=3))

    async def test_a_word_said_twice_weighs_twice(self, backend: Backend) -> None:
        """Query-term frequency counts on every backend (query feedback repeats the question so its words
        outweigh the words it adds): of two records alike but for one word, the one holding the word the
        query repeats ranks first, either way round."""
        require(backend, "text_search")
        await backend.ensure_collection(COLLECTION, DIM)
        await backend.upsert(COLLECTION, [make_record("a", text="apple crumble recipe", seed=1),
                                          make_record("b", text="banana crumble recipe", seed=2),
                                          make_record("c", text="unrelated words only", seed=3)])  # fmt: skip
        lexical_only = Weights(similarity=0.0, lexical=1.0, recency=0.0, importance=0.0)
        for text, first in (("apple apple apple banana", "a"), ("apple banana banana banana", "b")):
            hits = await backend.query(COLLECTION, query(Scope(user_id="alice"), text=text, k=2, weights=lexical_only))
            assert [h.record.id for h in hits][:1] == [first], (text, [(h.record.id, h.scores.lexical) for h in hits])
            assert hits[0].scores.lexical > hits[1].scores.lexical, [(h.record.id, h.scores.lexical) for h in hits]

    # -- TTL ------------------------------------------------------------------------------------
    async def test_expired_never_returned(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        past = time.time() - 1
        await backend.upsert(
            COLLECTION, [make_record("gone", text="ephemeral", seed=1, expires_at=past), make_record("kept", seed=2)]
        )
        alice = Scope(user_id="alice")
        hits = await backend.query(COLLECTION, query(alice, vector=unit(1), text="ephemeral", k=10))
        assert [h.record.id for h in hits] == ["kept"]
        assert [r.id for r in (await backend.scan(COLLECTION, alice, now=time.time())).records] == ["kept"]
        assert await backend.delete_expired(COLLECTION, time.time()) == 1
        assert await backend.get(COLLECTION, ["gone"]) == []

    # -- scan -----------------------------------------------------------------------------------
    async def test_scan_pagination(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        await backend.upsert(COLLECTION, [make_record(f"p{i:02d}", seed=i) for i in range(25)])
        await backend.upsert(COLLECTION, [make_record("other", "bob", seed=1)])
        seen: list[str] = []
        cursor = None
        while True:
            page = await backend.scan(COLLECTION, Scope(user_id="alice"), limit=10, cursor=cursor)
            seen.extend(r.id for r in page.records)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == [f"p{i:02d}" for i in range(25)]

    # -- concurrency ----------------------------------------------------------------------------
    async def test_concurrent_writers_and_readers(self, backend: Backend) -> None:
        await backend.ensure_collection(COLLECTION, DIM)
        errors: list[BaseException] = []

        async def writer(worker: int) -> None:
            for i in range(20):
                await backend.upsert(COLLECTION, [make_record(f"w{worker}-{i}", f"user{worker}", seed=i)])

        async def reader(worker: int) -> None:
            for _ in range(20):
                try:
                    await backend.query(COLLECTION, query(Scope(user_id=f"user{worker}"), vector=unit(1), k=5))
                except MemkitError as exc:  # pragma: no cover - reported below
                    errors.append(exc)

        async with anyio.create_task_group() as group:
            for worker in range(4):
                group.start_soon(writer, worker)
                group.start_soon(reader, worker)
        assert errors == []
        for worker in range(4):
            page = await backend.scan(COLLECTION, Scope(user_id=f"user{worker}"), limit=100)
            assert len(page.records) == 20

    # -- rerank depth ---------------------------------------------------------------------------
    async def test_hybrid_top_k_on_a_large_scope_matches_scoring_it_whole(self, backend: Backend) -> None:
        """Servers rerank candidate lists; with a scope far larger than the first lists, the top k must
        still be the one found by scoring every row in scope (a k larger than the scope forces that)."""
        require(backend, "vector_search")
        await backend.ensure_collection(COLLECTION, DIM)
        rng = np.random.default_rng(5)
        words = [f"w{i}" for i in range(40)]
        odds = 1.0 / np.arange(1, 41)
        now = time.time()
        records = [
            Record(id=f"r{i:04d}", scope=Scope(user_id="alice" if i < 1200 else "bob"), body=b"",
                   text=" ".join(rng.choice(words, 4, p=odds / odds.sum())), vector=unit(1000 + i),
                   importance=float(rng.random()), timestamp=now - float(rng.random()) * 90 * 86400)
            for i in range(1400)
        ]  # fmt: skip
        for start in range(0, len(records), 500):
            await backend.upsert(COLLECTION, records[start : start + 500])
        variants = [Weights(), Weights(similarity=0.5, lexical=0.0, recency=0.2, importance=0.3),
                    Weights(similarity=0.2, lexical=0.8, recency=0.0, importance=0.0),
                    Weights(similarity=0.3, lexical=0.3, recency=0.3, importance=0.1)]  # fmt: skip
        shares = []
        for i, weights in enumerate(variants * 2):
            probe = records[int(rng.integers(0, 1200))]
            ask = query(Scope(user_id="alice"), vector=unit(i), text=probe.text, weights=weights, now=now, k=10)
            top = [h.record.id for h in await backend.query(COLLECTION, ask)]
            whole = await backend.query(COLLECTION, msgspec.structs.replace(ask, k=1300))
            assert {h.record.scope.user_id for h in whole} == {"alice"} and len(whole) == 1200
            shares.append(len(set(top) & {h.record.id for h in whole[:10]}) / 10)
        if self.approximate_search:
            assert min(shares) >= 0.8 and sum(shares) / len(shares) >= 0.95, shares
        else:
            assert min(shares) == 1.0, shares
