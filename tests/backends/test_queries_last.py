"""The embedded stores' connection lock: waiting queries go after every other waiting operation."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import anyio.lowlevel
import numpy as np
import pytest
from memkit_backends._embedded.priority import QueriesLast

from memkit import open_backend
from memkit.backend import Query, Record, Scope

pytestmark = pytest.mark.anyio


async def _settle() -> None:
    for _ in range(5):
        await anyio.lowlevel.checkpoint()


async def run_in_order(lock: QueriesLast, arrivals: list[tuple[str, bool]]) -> list[str]:
    """Each (name, is_query) queues, in this order, while the lock is held; the order they got it in."""
    order: list[str] = []

    async def take(name: str, query: bool) -> None:
        async with lock.hold(query=query):
            order.append(name)
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group, lock.hold():
        for name, query in arrivals:
            group.start_soon(take, name, query)
            await _settle()  # queued in arrival order
        assert lock.waiting == len(arrivals)
    return order


async def test_a_waiting_operation_goes_before_waiting_queries() -> None:
    order = await run_in_order(QueriesLast(), [("q1", True), ("q2", True), ("write", False), ("q3", True)])
    assert order == ["write", "q1", "q2", "q3"]


async def test_queries_are_not_starved() -> None:
    arrivals = [("q", True)] + [(f"w{i}", False) for i in range(4)]
    assert await run_in_order(QueriesLast(fair_after=2), arrivals) == ["w0", "w1", "q", "w2", "w3"]


async def test_a_cancelled_waiter_leaves_the_queue() -> None:
    lock = QueriesLast()
    order: list[str] = []

    async def take(name: str) -> None:
        async with lock.hold():
            order.append(name)

    cancelled = anyio.CancelScope()

    async def abandoned() -> None:
        with cancelled:
            async with lock.hold():
                order.append("abandoned")

    async with anyio.create_task_group() as group, lock.hold():
        group.start_soon(take, "first")
        await _settle()
        group.start_soon(abandoned)
        await _settle()
        group.start_soon(take, "last")
        await _settle()
        cancelled.cancel()
        await _settle()
        assert lock.waiting == 2
    assert order == ["first", "last"]
    async with lock.hold():  # and the lock is free again
        pass


async def test_a_waiter_cancelled_as_the_lock_reached_it_passes_it_on() -> None:
    lock = QueriesLast()
    order: list[str] = []
    scope = anyio.CancelScope()

    async def unlucky() -> None:
        with scope:
            async with lock.hold():
                order.append("unlucky")

    async def next_one() -> None:
        async with lock.hold():
            order.append("next")

    async with anyio.create_task_group() as group:
        async with lock.hold():
            group.start_soon(unlucky)
            await _settle()
            group.start_soon(next_one)
            await _settle()
        scope.cancel()  # handed the lock (released just above), cancelled before or after it ran
    assert order[-1] == "next"  # the lock went on either way
    with anyio.fail_after(1):
        async with lock.hold():
            assert lock.waiting == 0


async def test_on_sqlite_a_store_operation_overtakes_queued_recall_queries(tmp_path: Path) -> None:
    scope = Scope(user_id="ann")
    now = time.time()
    vector = np.ones(4, np.float32) / 2
    records = [Record(id=f"m{i}", scope=scope, body=b"x", text=f"note {i}", vector=vector, timestamp=now)
               for i in range(50)]  # fmt: skip
    finished: list[str] = []
    async with open_backend(f"sqlite:///{tmp_path / 'q.db'}") as backend:
        await backend.ensure_collection("memories", 4)
        await backend.upsert("memories", records)

        async def recall(n: int) -> None:
            await backend.query("memories", Query(scope=scope, vector=vector, k=5, now=now))
            finished.append(f"query{n}")

        async def write() -> None:
            await backend.get("memories", ["m1"], scope)
            finished.append("get")

        lock: QueriesLast = backend._lock  # type: ignore[attr-defined]
        async with anyio.create_task_group() as group, lock.hold():
            for n in range(3):
                group.start_soon(recall, n)
            await _settle()
            group.start_soon(write)
            await _settle()
            assert lock.waiting == 4
    assert finished[0] == "get" and sorted(finished[1:]) == ["query0", "query1", "query2"]


async def test_on_sqlite_a_store_waits_for_one_slice_of_access_counts_not_all_of_them(tmp_path: Path) -> None:
    """Access statistics are written in slices at a query's priority: 2,000 counts in one transaction held
    the connection for ~80 ms, and a store() arriving then waited for all of it."""
    scope = Scope(user_id="ann")
    now = time.time()
    vector = np.ones(4, np.float32) / 2
    records = [Record(id=f"m{i}", scope=scope, body=b"x", text=f"note {i}", vector=vector, timestamp=now)
               for i in range(1000)]  # fmt: skip
    async with open_backend(f"sqlite:///{tmp_path / 't.db'}") as backend:
        await backend.ensure_collection("memories", 4)
        await backend.upsert("memories", records)
        touched = anyio.Event()

        async def touch_all() -> None:
            await backend.touch("memories", {record.id: 1 for record in records}, now)
            touched.set()

        async with anyio.create_task_group() as group:
            group.start_soon(touch_all)
            await _settle()
            assert backend._lock.waiting == 0 and backend._lock._held  # type: ignore[attr-defined]
            await backend.upsert("memories", [Record(id="new", scope=scope, body=b"y", vector=vector)])
            assert not touched.is_set()  # the store went between two slices
        got = await backend.get("memories", [record.id for record in records], scope)
        assert [record.access_count for record in got] == [1] * len(records)
