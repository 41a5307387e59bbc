"""The Redis key-value face: the writer's expiry, a sorted index per namespace, v1 entries moved over."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator

import anyio
import anyio.lowlevel
import msgspec
import pytest
import redis

from memkit import open_backend
from memkit.backend import Backend, Record
from memkit.testing import make_record
from tests.conftest import fresh_redis_url

pytestmark = pytest.mark.anyio


@pytest.fixture
def plain_url(redis_plain_url: str) -> str:
    return fresh_redis_url(redis_plain_url)


@pytest.fixture
def raw(plain_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(plain_url.split("?", maxsplit=1)[0])
    yield client
    client.close()


@pytest.fixture
async def backend(plain_url: str) -> AsyncIterator[Backend]:
    async with open_backend(plain_url) as opened:
        yield opened


async def test_v1_entries_are_moved_to_the_new_layout(plain_url: str, raw: redis.Redis) -> None:
    # What version 1 wrote: plain strings under memkit:kv:<namespace>\0<key>, expiring by the server's TTL.
    raw.set(b"memkit:kv:threads\x00t1", b"state one")
    raw.set(b"memkit:kv:threads\x00t2", b"state two", px=60_000)
    raw.set(b"memkit:kv:cache\x00q", b"cached")
    async with open_backend(plain_url) as backend:
        assert await backend.kv_get("threads", "t1") == b"state one"
        assert await backend.kv_get("threads", "t2") == b"state two"
        assert await backend.kv_get("threads", "t2", now=time.time() + 61) is None  # its TTL came along
        page = await backend.kv_scan("threads")
        assert page.items == [("t1", b"state one"), ("t2", b"state two")]
        assert await backend.kv_delete_prefix("cache") == 1
    assert raw.keys(b"memkit:kv:*") == []
    assert 0 < raw.pttl(b"memkit:kvv:threads\x00t2") <= 60_000
    async with open_backend(plain_url) as backend:  # once: a second open finds the marker
        assert await backend.kv_get("threads", "t1") == b"state one"


async def test_the_server_ttl_only_collects_garbage(backend: Backend, raw: redis.Redis) -> None:
    now = time.time()
    await backend.kv_set("ns", "k", b"v", ttl_s=30, now=now)
    assert 29_000 < raw.pttl(b"memkit:kvv:ns\x00k") <= 30_000
    # A caller whose clock runs ahead: the physical TTL outlasts the logical expiry by as much.
    await backend.kv_set("ns", "ahead", b"v", ttl_s=30, now=now + 100)
    assert raw.pttl(b"memkit:kvv:ns\x00ahead") > 129_000
    assert await backend.kv_get("ns", "ahead", now=now + 129) == b"v"
    assert await backend.kv_get("ns", "k", now=now + 29.9) == b"v"
    assert await backend.kv_get("ns", "k", now=now + 30) is None  # live while expires_at > now
    await backend.kv_set("ns", "forever", b"v")
    assert raw.pttl(b"memkit:kvv:ns\x00forever") == -1


async def test_stale_index_members_are_skipped_and_removed(backend: Backend, raw: redis.Redis) -> None:
    for key in ("a", "b", "c", "d"):
        await backend.kv_set("ns", key, key.encode())
    raw.delete(b"memkit:kvv:ns\x00b", b"memkit:kvv:ns\x00c")  # as the server's TTL does
    page = await backend.kv_scan("ns", limit=2)
    assert page.items == [("a", b"a"), ("d", b"d")]
    assert raw.zrange(b"memkit:kvi:ns", 0, -1) == [b"a", b"d"]


async def test_a_lease_renewed_with_its_own_value_gets_the_new_ttl(backend: Backend) -> None:
    now = time.time()
    assert await backend.kv_replace("ns", "lease", b"w1", expected=None, ttl_s=5, now=now)
    assert await backend.kv_replace("ns", "lease", b"w1", expected=b"w1", ttl_s=5, now=now + 4)
    assert await backend.kv_get("ns", "lease", now=now + 8) == b"w1"
    assert await backend.kv_replace("ns", "lease", b"w2", expected=None, ttl_s=5, now=now + 8) is False
    assert await backend.kv_replace("ns", "lease", b"w2", expected=None, ttl_s=5, now=now + 9) is True


async def test_concurrent_kv_compare_and_set_loses_nothing(backend: Backend) -> None:
    # Each write unique (a nonce), as the contract asks of racing writers: a retried write that finds its
    # own value reports success, so two writers of one value could not be told apart.
    async def increment() -> None:
        while True:
            current = await backend.kv_get("ns", "n")
            count = int((current or b"0:").split(b":")[0]) + 1
            if await backend.kv_replace("ns", "n", f"{count}:{uuid.uuid4()}".encode(), expected=current):
                return
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group:
        for _ in range(20):
            group.start_soon(increment)
    assert ((await backend.kv_get("ns", "n")) or b"").split(b":")[0] == b"20"


async def test_concurrent_record_compare_and_set_loses_nothing(redis_url: str) -> None:
    async with open_backend(fresh_redis_url(redis_url)) as backend:
        await backend.upsert("c", [msgspec.structs.replace(make_record("n", seed=1), body=b"0:")])

        async def increment() -> None:
            while True:
                [current] = await backend.get("c", ["n"])
                count = int(current.body.split(b":")[0]) + 1
                bumped: Record = msgspec.structs.replace(current, body=f"{count}:{uuid.uuid4()}".encode())
                if await backend.replace("c", bumped, expected_body=current.body):
                    return
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as group:
            for _ in range(20):
                group.start_soon(increment)
        assert (await backend.get("c", ["n"]))[0].body.split(b":")[0] == b"20"
