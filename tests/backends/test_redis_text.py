"""Redis text search: the scope restricts a text query without weighing in its scores; old indexes upgrade."""

from __future__ import annotations

import msgspec
import pytest
import redis
from memkit_backends.redis import _codec as codec
from memkit_backends.redis import _collections as collections
from memkit_backends.redis._keys import body_prefix_of, collection_prefix, counters_prefix_of, index_name

from memkit import open_backend
from memkit.backend import Query, Scope, Weights
from memkit.testing import make_record
from tests.conftest import fresh_redis_url

pytestmark = pytest.mark.anyio

LEXICAL_ONLY = Weights(similarity=0.0, lexical=1.0, recency=0.0, importance=0.0)
WORDS = ["apple", "pear", "plum", "fig", "kiwi", "lime"]


def _records() -> list:  # type: ignore[type-arg]
    mine = [make_record(f"a{i}", text=" ".join(WORDS[j % 6] for j in range(i, i + 2 + i % 7))) for i in range(24)]
    others = [make_record(f"o{u}-{i}", user=f"other{u}", text=" ".join(WORDS[j % 6] for j in range(i, i + 3)))
              for u in range(30) for i in range(12)]  # fmt: skip
    return mine + others


async def test_the_scope_adds_nothing_to_text_scores(redis_url: str) -> None:
    # RediSearch scores a TAG clause as a search term, weighted by how rare the user's records are in
    # the collection: with it, a user's text scores shifted with every other user's records.
    url = fresh_redis_url(redis_url)
    async with open_backend(url) as backend:
        await backend.ensure_collection("c", 8)
        await backend.upsert("c", _records())
        ask = Query(scope=Scope(user_id="alice"), text="apple kiwi", k=24, weights=LEXICAL_ONLY)
        got = {h.record.id: h.scores.lexical for h in await backend.query("c", ask) if h.scores.lexical > 0}
    client = redis.Redis.from_url(url.split("?")[0], protocol=2)
    reply = client.execute_command("FT.SEARCH", index_name("c"), "@tokens:(appl|kiwi)", "WITHSCORES", "SCORER",
                                   "BM25STD", "NOCONTENT", "LIMIT", "0", "1000", "DIALECT", "2")  # fmt: skip
    client.close()
    pairs = zip(reply[1::2], reply[2::2], strict=True)
    unscoped = {key.decode().rsplit(":", 1)[1]: float(score) for key, score in pairs}
    mine = {i: s for i, s in unscoped.items() if i.startswith("a")}
    top = max(mine.values())
    assert got.keys() == mine.keys()
    assert all(abs(got[i] - mine[i] / top) < 1e-5 for i in mine), (got, mine)


async def test_an_index_made_before_scope_numbers_is_upgraded(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    url = fresh_redis_url(redis_url)
    with monkeypatch.context() as old_version:  # what earlier releases wrote: no numeric scope fields
        old_version.setattr(collections, "SCOPE_NUMBER_SCHEMA", ())
        old_version.setattr(codec, "scope_numbers", lambda scope: {})
        async with open_backend(url) as backend:
            await backend.upsert("c", _records())
    client = redis.Redis.from_url(url.split("?")[0])
    for key in client.scan_iter(match=body_prefix_of("c") + "*"):  # and bodies inside the hash
        client.hset(collection_prefix("c") + key.decode().rsplit(":", 1)[1], "body", client.get(key) or b"")
        client.delete(key)
    client.close()
    async with open_backend(url) as backend:
        ask = Query(scope=Scope(user_id="alice"), text="apple", k=30, weights=LEXICAL_ONLY)
        before = [h.record.id for h in await backend.query("c", ask)]  # tags still serve the text query
        await backend.ensure_collection("c", 8)
        after = [h.record.id for h in await backend.query("c", ask)]
        assert "c" in backend._collections.scope_numbers  # type: ignore[attr-defined]
        [record] = await backend.get("c", ["a3"])
        assert record.body == b"body:a3"  # read from the hash, where it was
        assert await backend.replace("c", msgspec.structs.replace(record, body=b"new"), b"body:a3")
        assert [r.body for r in await backend.get("c", ["a3"])] == [b"new"]
    assert len(after) == 24 and set(before) == set(after)


async def test_a_body_only_change_leaves_the_index_alone(redis_url: str) -> None:
    # RediSearch re-indexes a hash on any write and never takes a replaced document out of its average
    # length: access counts rewritten on every recall once took LoCoMo recall@10 from 81 to 58.
    url = fresh_redis_url(redis_url)
    records = _records()
    async with open_backend(url) as backend:
        await backend.upsert("c", records)
        ask = Query(scope=Scope(user_id="alice"), text="apple kiwi", k=24, weights=LEXICAL_ONLY)
        before = {h.record.id: h.scores.lexical for h in await backend.query("c", ask)}
        for _ in range(5):
            for record in await backend.get("c", [f"a{i}" for i in range(24)]):
                touched = msgspec.structs.replace(record, body=record.body + b".")
                assert await backend.replace("c", touched, record.body)
        after = {h.record.id: h.scores.lexical for h in await backend.query("c", ask)}
        [record] = await backend.get("c", ["a0"])
        assert record.body == b"body:a0....."
        renamed = msgspec.structs.replace(record, text="durian")  # an indexed change is indexed
        assert await backend.replace("c", renamed, record.body)
        found = await backend.query("c", Query(scope=Scope(user_id="alice"), text="durian", k=3))
        assert [h.record.id for h in found if h.scores.lexical > 0] == ["a0"]
    client = redis.Redis.from_url(url.split("?")[0], protocol=2)
    info = client.execute_command("FT.INFO", index_name("c"))
    client.close()
    stats = dict(zip(info[::2], info[1::2], strict=True))
    assert int(stats[b"max_doc_id"]) == len(records) + 1
    assert after == before


async def test_touches_index_nothing(redis_url: str) -> None:
    # Access counters live in a key of their own beside each record: a recall's touch must not rewrite the
    # indexed hash (each rewrite is a new document to RediSearch, with the drift measured above).
    url = fresh_redis_url(redis_url)
    records = _records()
    async with open_backend(url) as backend:
        await backend.upsert("c", records)
        ask = Query(scope=Scope(user_id="alice"), text="apple kiwi", k=24, weights=LEXICAL_ONLY)
        before = {h.record.id: h.scores.lexical for h in await backend.query("c", ask)}
        for n in range(100):
            await backend.touch("c", {f"a{n % 24}": 1, "ghost": 1}, 1_000.0 + n)
        after = {h.record.id: (h.scores.lexical, h.record.access_count) for h in await backend.query("c", ask)}
        [record] = await backend.get("c", ["a0"])
        assert (record.access_count, record.last_accessed) == (5, 1_096.0)
    client = redis.Redis.from_url(url.split("?")[0], protocol=2)
    info = client.execute_command("FT.INFO", index_name("c"))
    assert not client.exists(counters_prefix_of("c") + "ghost")  # unknown ids are ignored, not created
    client.close()
    stats = dict(zip(info[::2], info[1::2], strict=True))
    assert int(stats[b"max_doc_id"]) == len(records)
    assert {i: lexical for i, (lexical, _) in after.items()} == before
    assert sum(count for _, count in after.values()) == 100
