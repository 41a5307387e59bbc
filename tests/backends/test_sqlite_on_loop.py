"""sqlite:// reads of a loaded collection run on the event loop when nothing changed in the file since the
arrays caught up and the work is small (memory://'s rule): a thread hop was half of a recall on 10k rows.
Another process's commit, a collection not loaded yet, or a large scan still go to a worker thread."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest
from memkit_backends._embedded import offload

from memkit import open_backend
from memkit.backend import Query, Scope
from memkit.testing import make_record

pytestmark = pytest.mark.anyio
ALICE = Scope(user_id="alice")


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the functions sent to worker threads."""
    sent: list[str] = []
    real = anyio.to_thread.run_sync

    async def counting(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        sent.append(getattr(func, "__name__", repr(func)))
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counting)
    yield sent


async def test_reads_of_an_unchanged_loaded_collection_stay_on_the_loop(tmp_path: Path, hops: list[str]) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    async with open_backend(url) as backend, open_backend(url) as other:
        await backend.upsert("c", [make_record(f"r{i}", text=f"teapot {i}", seed=i) for i in range(10)])
        assert await backend.count("c", ALICE) == 10  # loads: a thread
        hops.clear()
        assert [r.id for r in await backend.get("c", ["r3"], ALICE)] == ["r3"]
        hits = await backend.query("c", Query(scope=ALICE, text="teapot", k=3))
        assert len(hits) == 3
        assert len((await backend.scan("c", ALICE, limit=100)).records) == 10
        assert await backend.nearest("c", ALICE, [make_record("x", seed=3).vector], k=1)  # type: ignore[list-item]
        assert hops == []
        # Another connection commits: the next read catches up in a thread and sees it.
        await other.upsert("c", [make_record("late", text="teapot late", seed=42)])
        hops.clear()
        assert [r.id for r in await backend.get("c", ["late"], ALICE)] == ["late"]
        assert len(hops) == 1
        hops.clear()
        assert await backend.count("c", ALICE) == 11  # caught up: on the loop again
        assert hops == []


async def test_a_large_scan_still_goes_to_a_thread(
    tmp_path: Path, hops: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(offload, "OFFLOAD_MIN_ROWS", 5)
    async with open_backend(f"sqlite:///{tmp_path / 'b.db'}") as backend:
        await backend.upsert("c", [make_record(f"r{i}", text=f"teapot {i}", seed=i) for i in range(10)])
        await backend.count("c", ALICE)
        hops.clear()
        await backend.query("c", Query(scope=ALICE, text="teapot", k=3))
        assert len(hops) == 1
        hops.clear()
        await backend.get("c", ["r1"], ALICE)  # by id: small whatever the collection's size
        assert hops == []


@pytest.mark.parametrize("url", ["memory://", "sqlite:///{tmp}/n.db"])
async def test_a_near_duplicate_check_of_many_scopes_in_a_large_collection_goes_to_a_thread(
    url: str, tmp_path: Path, hops: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch spanning users reads every user's rows in one call (~30 ms at 100k): off the loop once the
    collection is large; one small scope's check stays on it."""
    async with open_backend(url.format(tmp=tmp_path)) as backend:
        records = [make_record(f"r{i}", "alice" if i % 2 else "bob", seed=i) for i in range(10)]
        await backend.upsert("c", records)
        await backend.count("c", ALICE)  # sqlite:// loads its copy: a thread
        vector = records[1].vector
        hops.clear()
        await backend.nearest_many("c", [(ALICE, [vector]), (Scope(user_id="bob"), [vector])])
        assert hops == []  # 10 rows: on the loop
        monkeypatch.setattr(offload, "OFFLOAD_MIN_ROWS", 6)  # the collection's 10 rows are large, a scope's 5 not
        found = await backend.nearest_many("c", [(ALICE, [vector]), (Scope(user_id="bob"), [vector])], k=1)
        assert len(hops) == 1 and found[0][0][0][0] == "r1"
        hops.clear()
        await backend.nearest_many("c", [(ALICE, [vector])])
        assert hops == []  # one scope of 5 rows, one vector: nearest's rule
