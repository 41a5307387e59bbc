"""A store's lookups (same text by id and by key, nearest neighbours) overlap on a server, one wait instead of
three, and stay one after another, without tasks, in process (where a task only adds turns of the loop)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import msgspec
import pytest
from memkit_backends.memory import MemoryBackend

from memkit import StorageURL
from memkit.backend import Backend
from memkit.embedders import HashingEmbedder
from memkit.layers.longterm import LongTermMemory, NewMemory
from memkit.testing import LongTermConformance

pytestmark = pytest.mark.anyio


class RoundTripDouble(MemoryBackend):
    """memory:// with a wait before each read, standing for a server round trip; counts reads in flight."""

    def __init__(self, url: StorageURL, *, overlaps: bool, wait_s: float) -> None:
        super().__init__(url)
        self.capabilities = msgspec.structs.replace(MemoryBackend.capabilities, concurrent_requests=overlaps)
        self.wait_s, self.in_flight, self.peak = wait_s, 0, 0

    async def _round_trip(self) -> None:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await anyio.sleep(self.wait_s)
        finally:
            self.in_flight -= 1

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        await self._round_trip()
        return await super().get(*args, **kwargs)

    async def scan(self, *args: Any, **kwargs: Any) -> Any:
        await self._round_trip()
        return await super().scan(*args, **kwargs)

    async def nearest(self, *args: Any, **kwargs: Any) -> Any:
        await self._round_trip()
        return await super().nearest(*args, **kwargs)

    async def nearest_many(self, *args: Any, **kwargs: Any) -> Any:
        """A server adapter's: the contract's default, ``nearest`` per scope (memory:// does one pass instead)."""
        return await Backend.nearest_many(self, *args, **kwargs)


async def _layer(overlaps: bool, wait_s: float) -> tuple[RoundTripDouble, LongTermMemory]:
    backend = RoundTripDouble(StorageURL("memory://"), overlaps=overlaps, wait_s=wait_s)
    await backend.open()
    layer = LongTermMemory(backend, HashingEmbedder(64))
    await layer.setup()
    return backend, layer


async def test_on_a_server_the_three_lookups_of_a_store_are_one_wait() -> None:
    backend, lt = await _layer(overlaps=True, wait_s=0.02)
    first = await lt.store("Ada prefers window seats on long flights", user_id="ada")
    assert first.status == "stored" and backend.peak == 3  # by id, by key and nearest, all at once
    assert (await lt.store("Ada prefers window seats on long flights", user_id="ada")).status == "duplicate"
    merged = await lt.store("Ada prefers window seats on long flights!", user_id="ada")
    assert merged.status in ("merged", "duplicate") and merged.memory is not None
    assert merged.memory.id == first.memory.id  # type: ignore[union-attr]
    assert len((await lt.list(user_id="ada")).memories) == 1


async def test_a_batch_of_several_scopes_overlaps_its_scopes_not_their_lookups() -> None:
    """Plans side by side and lookups side by side too was 3 requests per plan queued for a small pool."""
    backend, lt = await _layer(overlaps=True, wait_s=0.02)
    results = await lt.store_many([NewMemory(content=f"fact {i} about the attic", user_id=f"u{i}") for i in range(3)])
    assert [r.status for r in results] == ["stored"] * 3 and backend.peak == 3  # one request per scope at a time


async def test_in_process_the_lookups_stay_one_after_another() -> None:
    backend, lt = await _layer(overlaps=False, wait_s=0.005)
    assert (await lt.store("Ada prefers window seats on long flights", user_id="ada")).status == "stored"
    assert backend.peak == 1
    assert (await lt.store("Ada prefers window seats on long flights", user_id="ada")).status == "duplicate"


class TestLongTermOnARoundTripDouble(LongTermConformance):
    """Every long-term behaviour with the lookups overlapped (Redis and Postgres run it too, on real servers)."""

    @pytest.fixture
    async def backend(self) -> AsyncIterator[Backend]:
        double = RoundTripDouble(StorageURL("memory://"), overlaps=True, wait_s=0.001)
        async with double:
            yield double
