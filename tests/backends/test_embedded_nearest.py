"""The embedded backends' batched near-duplicate check gives the contract's default answers (one
similarity-only query per vector), whatever the batch size, storage dtype, expiry, importance and ties."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
import numpy as np
import pytest

from memkit import open_backend
from memkit.backend import Backend, Scope

pytestmark = pytest.mark.anyio

DIM = 16


def _records(seed: int) -> list:  # type: ignore[type-arg]
    from memkit.testing import make_record

    rng = np.random.default_rng(seed)
    centre = rng.standard_normal(DIM).astype(np.float32)
    records = []
    for i in range(60):
        vector = centre + 0.3 * rng.standard_normal(DIM).astype(np.float32)
        if i % 7 == 0:
            vector = records[i - 1].vector if records else vector  # exact ties
        record = make_record(f"r{i:02d}", "alice" if i % 3 else "bob", importance=float(rng.random()))
        changes: dict[str, object] = {"vector": (vector / np.linalg.norm(vector)).astype(np.float32)}
        if i % 11 == 0:
            changes["expires_at"] = time.time() - 5
        records.append(msgspec.structs.replace(record, **changes))
    return records


@pytest.mark.parametrize("url", ["memory://", "memory://?dtype=float16", "memory://?dtype=int8", "sqlite"])
@pytest.mark.parametrize("batch", [1, 3, 8, 20])
async def test_the_batched_check_answers_as_a_query_per_vector(url: str, batch: int, tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/n.db" if url == "sqlite" else url
    # A query against int8 rows is rounded to int16 (memkit.scoring); the batched check multiplies in float.
    # Each of a unit query's components is off by at most half a level (1/32767), so a product with a unit
    # row by at most sqrt(dim) / 2 / 32767 (6.1e-5 here).
    atol = np.sqrt(DIM) / 2 / 32767 if url.endswith("int8") else 1e-6
    async with open_backend(url) as backend:
        await backend.ensure_collection("c", DIM)
        records = _records(batch)
        await backend.upsert("c", records)
        probes = [r.vector for r in records[:batch]]
        for k, floor in ((1, -1.0), (3, 0.5), (5, 0.9)):
            for now in (None, time.time()):
                got = await backend.nearest("c", Scope(user_id="alice"), probes, k=k, min_similarity=floor, now=now)
                want = await Backend.nearest(backend, "c", Scope(user_id="alice"), probes, k=k,
                                             min_similarity=floor, now=now)  # fmt: skip
                assert [[i for i, _ in row] for row in got] == [[i for i, _ in row] for row in want]
                for row_got, row_want in zip(got, want, strict=True):
                    np.testing.assert_allclose([s for _, s in row_got], [s for _, s in row_want], atol=atol)


@pytest.mark.parametrize("url", ["memory://", "sqlite:///{tmp}/closed.db"])
async def test_a_closed_backend_refuses_even_an_empty_batch(url: str, tmp_path: Path) -> None:
    """Every call to a closed backend says it is closed, an empty near-duplicate batch included."""
    from memkit.errors import NotOpenError

    async with open_backend(url.format(tmp=tmp_path)) as backend:
        assert await backend.nearest_many("c", []) == []
    with pytest.raises(NotOpenError):
        await backend.nearest_many("c", [])
