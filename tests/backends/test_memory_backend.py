"""memory:// beyond the conformance suite: URL options, scope ids released, keys collected."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import numpy as np
import pytest

from memkit import open_backend
from memkit.backend import Record, Scope
from memkit.errors import InvalidURLError, ValidationError
from memkit.testing import make_record
from memkit.testing._helpers import fields_of

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
            atol = float(np.abs(record.vector).max()) / 254 * 1.001 + 1e-6 if dtype == "int8" else 1e-3
            np.testing.assert_allclose(got[record.id].vector, record.vector, atol=atol, rtol=0)
        collection = backend._store.collections["c"]  # type: ignore[attr-defined]
        assert all(stored is None or stored.vector is None for stored in collection._records)
        assert collection.dtype == dtype


async def test_a_quantized_store_s_compaction_keeps_its_rounded_vectors() -> None:
    """A compaction writes the bare records again and copies their stored rows: none loses its vector, none is
    rounded twice, and a record written without a vector stays without one."""
    async with open_backend("memory://?dtype=int8") as backend:
        await backend.ensure_collection("c", 8)
        records = [make_record(f"r{i:04d}", seed=i) for i in range(2600)]
        records[7] = Record(**{**fields_of(records[7]), "vector": None})
        await backend.upsert("c", records)
        before = {r.id: r.vector for r in await backend.get("c", [r.id for r in records[1400:]] + ["r0007"])}
        collection = backend._store.collections["c"]  # type: ignore[attr-defined]
        rows_before = len(collection._records)
        await backend.delete("c", [r.id for r in records[8:1400]])  # more dead than live rows: compacted
        assert len(collection._records) < rows_before
        after = {r.id: r.vector for r in await backend.get("c", list(before))}
        assert after["r0007"] is None and before["r0007"] is None
        for record_id, vector in before.items():
            if vector is not None:
                np.testing.assert_array_equal(after[record_id], vector)


@pytest.mark.parametrize("embedded", ["memory", "sqlite"])
async def test_a_float16_store_refuses_a_vector_past_float16s_range(embedded: str, tmp_path: Path) -> None:
    """Stored as float16 the value would be infinite: memory:// would return it, and either would score the
    row NaN (sqlite:// keeps the exact vector in its file, but scores from its float16 arrays)."""
    url = "memory://?dtype=float16" if embedded == "memory" else f"sqlite:///{tmp_path / 'm.db'}?dtype=float16"
    async with open_backend(url) as backend:
        await backend.ensure_collection("c", 8)
        big = Record(**{**fields_of(make_record("big", seed=1)), "vector": np.full(8, 1e5, np.float32)})
        with pytest.raises(ValidationError, match="float16"):
            await backend.upsert("c", [make_record("ok", seed=2), big])
        with pytest.raises(ValidationError, match="float16"):
            await backend.replace("c", big, None)
        with pytest.raises(ValidationError, match="float16"):  # refused though a later record of its id is fine
            await backend.upsert("c", [big, Record(**{**fields_of(big), "vector": np.ones(8, np.float32)})])
        assert await backend.get("c", ["ok", "big"]) == []  # nothing of the batch written
        await backend.upsert("c", [Record(**{**fields_of(big), "vector": np.full(8, 6e4, np.float32)})])
        assert [r.id for r in await backend.get("c", ["big"])] == ["big"]  # within range: kept
