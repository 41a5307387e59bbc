"""The Redis bulk writer: hand-encoded RESP in MULTI/EXEC, errors surfaced, connections left clean."""

from __future__ import annotations

import numpy as np
import pytest
import redis
from memkit_backends.redis._bulk import command, hset
from memkit_backends.redis._keys import collection_prefix, index_name

from memkit import open_backend
from memkit.errors import BackendError
from memkit.testing import make_record
from tests.conftest import fresh_redis_url

pytestmark = pytest.mark.anyio


def test_command_is_resp() -> None:
    assert command("HSET", "k", b"\x00\r\n", 0.1) == b"*4\r\n$4\r\nHSET\r\n$1\r\nk\r\n$3\r\n\x00\r\n\r\n$3\r\n0.1\r\n"


def test_hset_is_the_same_command() -> None:
    mapping = {"rid": "r1", "body": b"\x00\r\n", "imp": 0.25, "n": 3, "text": "caf\u00e9"}
    for _ in range(2):  # field names are cached after the first call
        assert hset("k:1", mapping) == command("HSET", "k:1", *(x for item in mapping.items() for x in item))


async def test_refused_write_raises_and_the_connection_stays_usable(redis_url: str) -> None:
    url = fresh_redis_url(redis_url)
    async with open_backend(url) as backend:
        await backend.ensure_collection("c", 8)
        redis.Redis.from_url(url.split("?")[0]).set(collection_prefix("c") + "taken", "a string, not a hash")
        with pytest.raises(BackendError, match="WRONGTYPE") as caught:
            await backend.upsert("c", [make_record("ok", seed=1), make_record("taken", seed=2)])
        assert isinstance(caught.value.__cause__, redis.ResponseError)  # chained, as every mapped error
        for _ in range(5):  # the pool's connections still answer in order
            await backend.upsert("c", [make_record(f"after{_}", seed=3)])
        assert [r.id for r in await backend.get("c", ["after4", "ok"])] == ["after4", "ok"]


async def test_records_written_during_the_index_scan_are_indexed_once(redis_url: str) -> None:
    # FT.CREATE makes RediSearch scan every key in the background, indexing again any matching key it
    # meets: records written before that scan ends were indexed twice (HNSW queries at ~50 ms).
    url = fresh_redis_url(redis_url, index="hnsw")
    client = redis.Redis.from_url(url.split("?")[0])
    with client.pipeline(transaction=False) as pipe:
        for start in range(0, 100_000, 10_000):
            pipe.mset({f"other:{i}": b"x" for i in range(start, start + 10_000)})
        pipe.execute()
    async with open_backend(url) as backend:
        await backend.ensure_collection("c", 8)
        for start in range(0, 2_000, 500):
            await backend.upsert("c", [make_record(f"r{i}", seed=i) for i in range(start, start + 500)])
    info = client.execute_command("FT.INFO", index_name("c"))
    stats = info if isinstance(info, dict) else dict(zip(info[::2], info[1::2], strict=False))
    stats = {(k if isinstance(k, str) else k.decode()): v for k, v in stats.items()}
    assert (int(stats["num_docs"]), int(stats["max_doc_id"])) == (2_000, 2_000)
    client.close()


async def test_records_in_older_layouts_read_back_whole(redis_url: str) -> None:
    """A read asks for the hash's fields by name: a hash written before the scope field (an id per field)
    with its body inline, and fields JSON holding what today's types do not name, still read back."""
    url = fresh_redis_url(redis_url)
    async with open_backend(url) as backend:
        await backend.ensure_collection("c", 8)
        record = make_record("new", "u1", seed=1, fields={"tag": ("a", "b"), "n": 2})
        await backend.upsert("c", [record])
        client = redis.Redis.from_url(url.split("?")[0])
        old = {**client.hgetall(collection_prefix("c") + "new")}
        for field in (b"scope", b"rid"):
            old.pop(field)
        legacy_fields = {b"rid": b"old", b"uid": b"u1", b"body": b"inline", b"fields": b'{"k": null}'}
        client.hset(collection_prefix("c") + "old", mapping={**old, **legacy_fields})
        [new, legacy] = await backend.get("c", ["new", "old", "absent"])
        assert new.body == record.body and new.scope == record.scope and new.fields == record.fields
        assert legacy.id == "old" and legacy.body == b"inline" and legacy.scope.user_id == "u1"
        assert legacy.scope.agent_id is None and legacy.fields == {"k": None}
        assert np.array_equal(legacy.vector, record.vector) and legacy.timestamp == record.timestamp
