"""The long-term layer's per-scope write locks: serialised per scope, released whatever happens."""

from __future__ import annotations

import anyio
import pytest

from memkit.backend import Scope
from memkit.layers.longterm._locks import ScopeLocks

pytestmark = pytest.mark.anyio

A, B = Scope(user_id="a"), Scope(user_id="b")


async def test_a_scope_is_written_by_one_holder_at_a_time() -> None:
    locks, inside, most = ScopeLocks(), [0], [0]

    async def write() -> None:
        async with locks.hold(A):
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            await anyio.sleep(0.001)
            inside[0] -= 1

    async with anyio.create_task_group() as group:
        for _ in range(5):
            group.start_soon(write)
    assert most[0] == 1
    assert locks._locks == {} and locks.turns.active == 0  # entries dropped once nobody holds or waits


async def test_a_holder_cancelled_while_waiting_leaves_every_lock_free() -> None:
    """Waiting for B with A taken, cancelled: A is released (another writer gets it), nothing is left held."""
    locks, got_b, release_b = ScopeLocks(), anyio.Event(), anyio.Event()

    async def hold_b() -> None:
        async with locks.hold(B):
            got_b.set()
            await release_b.wait()

    async with anyio.create_task_group() as group:
        group.start_soon(hold_b)
        await got_b.wait()
        with anyio.move_on_after(0.05) as waited:
            async with locks.hold_many([A, B]):
                pytest.fail("B is held by another writer")
        assert waited.cancelled_caught
        with anyio.fail_after(1):
            async with locks.hold(A):  # A was taken, then released when the wait for B was cancelled
                pass
        release_b.set()
    assert locks._locks == {} and locks.turns.active == 0 and locks.turns.waiting == 0


async def test_an_error_in_the_body_releases_the_locks() -> None:
    locks = ScopeLocks()
    with pytest.raises(KeyError):
        async with locks.hold_many([A, B]):
            raise KeyError("x")
    assert locks._locks == {} and locks.turns.active == 0
    with anyio.fail_after(1):
        async with locks.hold_many([A, B]):
            pass


async def test_cancelled_at_its_turn_a_write_leaves_no_trace() -> None:
    locks = ScopeLocks()
    with anyio.CancelScope() as scope:
        scope.cancel()
        async with locks.hold(A):
            pytest.fail("cancelled before its turn")
    assert locks._locks == {} and locks.turns.active == 0 and locks.turns.waiting == 0
