"""memory:// beyond the conformance suite: URL options, scope ids released, keys collected."""

from __future__ import annotations

import time

import anyio
import numpy as np
import pytest

from memkit import open_backend
from memkit.backend import Scope
from memkit.errors import InvalidURLError
from memkit.testing import make_record

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("url", ["memory://?dtype=float64", "memory://?dtipe=int8", "memory://?timeout=1"])
def test_options_are_checked(url: str) -> None:
    with pytest.raises(InvalidURLError):
        open_backend(url)


async def test_scope_ids_of_forgotten_users_are_released() -> None:
    async with open_backend("memory://?dtype=int8") as backend:
        await backend.ensure_collection("c", 8)
        for user in range(300):
            await backend.upsert("c", [make_record(f"{user}-{i}", user=f"user{user}", seed=i) for i in range(3)])
            assert await backend.delete("c", [f"{user}-{i}" for i in range(3)], Scope(user_id=f"user{user}")) == 3
        await backend.upsert("c", [make_record("kept", user="last", seed=1)])
        collection = backend._store.collections["c"]  # type: ignore[attr-defined]
        assert collection.scope_ids == 1
        assert await backend.count("c", Scope(user_id="user5")) == 0
        assert await backend.count("c", Scope(user_id="last")) == 1


async def test_expired_keys_are_collected_by_the_process_clock_not_the_callers() -> None:
    async with open_backend("memory://") as backend:
        long_ago = time.time() - 10_000
        await backend.kv_set("ns", "past", b"v", ttl_s=3600, now=long_ago)  # expired to a real-time reader
        await backend.kv_set("ns", "short", b"v", ttl_s=0.01)
        assert await backend.kv_get("ns", "past", now=long_ago + 10) == b"v"  # the caller's clock decides
        await anyio.sleep(0.02)
        await backend.kv_set("ns", "other", b"v")  # writes sweep keys past their physical deadline
        kv = backend._kv  # type: ignore[attr-defined]
        assert "short" not in kv._spaces["ns"].items and "past" in kv._spaces["ns"].items
        assert await backend.kv_delete_prefix("ns") == 2
        assert (await backend.kv_scan("ns")).items == []


@pytest.mark.parametrize("dtype", ["float16", "int8"])
async def test_a_quantized_store_keeps_only_its_rounded_vectors(dtype: str) -> None:
    """memory://?dtype=int8 (or float16) holds each vector once, rounded: a record keeping its float32 vector
    beside the row held more vector bytes than float32 storage. Reads widen the stored row back to float32."""
    async with open_backend(f"memory://?dtype={dtype}") as backend:
        await backend.ensure_collection("c", 8)
        records = [make_record(f"r{i}", seed=i) for i in range(40)]  # one batch written by columns, one by rows
        await backend.upsert("c", records[:35])
        await backend.upsert("c", records[35:])
        got = {r.id: r for r in await backend.get("c", [r.id for r in records])}
        for record in records:
            assert record.vector is not None
            atol = float(np.abs(record.vector).max()) / 254 + 1e-7 if dtype == "int8" else 1e-3
            np.testing.assert_allclose(got[record.id].vector, record.vector, atol=atol, rtol=0)
        collection = backend._store.collections["c"]  # type: ignore[attr-defined]
        assert all(stored is None or stored.vector is None for stored in collection._records)
        assert collection.dtype == dtype
