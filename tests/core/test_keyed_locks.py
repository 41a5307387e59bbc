"""KeyedLocks: holders of a key queue, keys are taken in one order, and nothing is left behind."""

from __future__ import annotations

import anyio
import pytest

from memkit.layers._cas import KeyedLocks

pytestmark = pytest.mark.anyio


async def test_holders_of_one_key_queue_and_the_table_empties() -> None:
    locks = KeyedLocks()
    inside = 0
    most = 0

    async def hold(keys: list[str]) -> None:
        nonlocal inside, most
        async with locks.holding(keys):
            inside += 1
            most = max(most, inside)
            await anyio.sleep(0.001)
            inside -= 1

    async with anyio.create_task_group() as group:
        for i in range(20):  # every batch shares "b", in a different order: no deadlock, one at a time
            group.start_soon(hold, ["b", f"k{i}", "a"] if i % 2 else ["a", "b", f"k{i}"])
    assert most == 1 and locks._locks == {}


async def test_a_cancelled_waiter_leaves_nothing_held() -> None:
    locks = KeyedLocks()

    async def waiter() -> None:
        with anyio.move_on_after(0.01):
            async with locks.holding(["y", "x"]):  # takes x first (sorted), waits on it: cancelled there
                pytest.fail("x is held")

    async with locks.holding(["x"]):
        async with anyio.create_task_group() as group:
            group.start_soon(waiter)
        assert set(locks._locks) == {"x"}
    assert locks._locks == {}
    async with locks.holding(["x", "y"]):
        pass
