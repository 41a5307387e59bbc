"""Redis scans: keyset pages by (timestamp, id), ties at a timestamp ordered by id, never an offset."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import msgspec
import pytest

from memkit import ValidationError, open_backend
from memkit.backend import Backend, Record, Scope
from memkit.testing import make_record
from tests.conftest import fresh_redis_url

pytestmark = pytest.mark.anyio

ALICE = Scope(user_id="alice")


@pytest.fixture
async def backend(redis_url: str) -> AsyncIterator[Backend]:
    async with open_backend(fresh_redis_url(redis_url)) as opened:
        await opened.ensure_collection("c", 8)
        yield opened


def at(record_id: str, timestamp: float, seed: int = 1, **kwargs: object) -> Record:
    return msgspec.structs.replace(make_record(record_id, seed=seed, **kwargs), timestamp=timestamp)  # type: ignore[arg-type]


async def scan_all(backend: Backend, limit: int, *, newest_first: bool = False, forget: bool = False) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        page = await backend.scan("c", ALICE, limit=limit, cursor=cursor, newest_first=newest_first)
        assert len(page.records) <= limit
        seen += [r.id for r in page.records]
        if forget:  # what a consolidation pass does: read a page, then forget it
            await backend.delete("c", [r.id for r in page.records])
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


async def test_forgetting_each_page_visits_every_memory(backend: Backend) -> None:
    # The v1 cursor was an offset: deleting a page shifted the rest under it, and 11 of 20 were visited.
    base = time.time() - 100
    await backend.upsert("c", [at(f"m{i:02d}", base + i) for i in range(20)])
    assert await scan_all(backend, 3, forget=True) == [f"m{i:02d}" for i in range(20)]
    assert await backend.count("c", ALICE) == 0


@pytest.mark.parametrize("newest_first", [False, True])
async def test_ties_are_ordered_by_id_across_pages(backend: Backend, newest_first: bool) -> None:
    # Whole groups at one timestamp, larger than a page and straddling pages' ends, among distinct ones.
    base = time.time() - 100
    # Ids out of insertion order: RediSearch returns a tie in the order the rows were written.
    records = [at(f"t{(i * 7) % 25:02d}", base + 5) for i in range(25)] + [at(f"u{i}", base + i) for i in range(10)]
    records += [at(f"v{i}", base + 7.25) for i in range(4)] + [at("bob-1", base + 5, user="bob")]
    await backend.upsert("c", records)
    wanted = sorted((r for r in records if r.scope == ALICE), key=lambda r: (r.timestamp, r.id), reverse=newest_first)
    for limit in (1, 4, 7, 26, 100):
        assert await scan_all(backend, limit, newest_first=newest_first) == [r.id for r in wanted], limit


async def test_a_tie_across_the_end_of_a_page_is_read_in_id_order(backend: Backend) -> None:
    base = time.time() - 100
    # Ids in reverse insertion order, so the server's own order of the tie is not the id order.
    await backend.upsert("c", [at("a", base), *(at(f"z{9 - i}", base + 1) for i in range(10))])
    page = await backend.scan("c", ALICE, limit=4)
    assert [r.id for r in page.records] == ["a", "z0", "z1", "z2"]
    rest = await backend.scan("c", ALICE, limit=100, cursor=page.next_cursor)
    assert [r.id for r in rest.records] == [f"z{i}" for i in range(3, 10)] and rest.next_cursor is None


async def test_inserts_and_deletes_between_pages(backend: Backend) -> None:
    # The conformance scenario (tests/conformance via memkit.testing._scan), with seeds numpy accepts.
    base = time.time() - 1000
    original = [at(f"o{i:02d}", base + i, seed=i) for i in range(30)]
    await backend.upsert("c", original)
    for newest_first in (False, True):
        seen: list[str] = []
        cursor = None
        step = 0
        while True:
            page = await backend.scan("c", ALICE, limit=5, cursor=cursor, newest_first=newest_first)
            seen += [r.id for r in page.records]
            await backend.delete("c", [r.id for r in page.records[:1]])
            await backend.upsert("c", [at(f"x{newest_first:d}{step}{j}", base + 15.5 + j, seed=j + 20)
                                       for j in (-20, 0, 40)])  # fmt: skip
            step += 1
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert len(seen) == len(set(seen))
        if not newest_first:
            assert {r.id for r in original} <= set(seen)


async def test_scan_filters_expiry_and_counters(backend: Backend) -> None:
    now = time.time()
    await backend.upsert("c", [
        at("a", now - 3, fields={"tags": ("x", "y")}), at("b", now - 2, fields={"tags": ("y",)}),
        at("gone", now - 1, fields={"tags": ("x",)}, expires_at=now - 0.5),
    ])  # fmt: skip
    await backend.touch("c", {"b": 2}, now)
    page = await backend.scan("c", ALICE, filters={"tags": "y"}, now=now, newest_first=True)
    assert [(r.id, r.fields["tags"], r.access_count) for r in page.records] == [("b", ("y",), 2), ("a", ("x", "y"), 0)]
    assert [r.id for r in (await backend.scan("c", ALICE, filters={"tags": "x"})).records] == ["a", "gone"]
    assert await backend.count("c", ALICE, filters={"tags": ["x", "y"]}, now=now) == 2


async def test_cursors_are_checked(backend: Backend) -> None:
    for bad in ("not base64!", "WzFd", "eyJhIjoxfQ==", "WyJ4IiwiYSJd"):  # garbage, [1], {"a":1}, ["x","a"]
        with pytest.raises(ValidationError):
            await backend.scan("c", ALICE, cursor=bad)
    with pytest.raises(ValidationError):
        await backend.scan("c", ALICE, limit=0)
    assert (await backend.scan("never-made", ALICE)).records == []
