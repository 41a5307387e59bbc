"""memkit's background task: stopped for good, even when code under it swallows a cancellation."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from memkit._background import BackgroundTask

pytestmark = pytest.mark.anyio


async def test_stop_ends_a_task_that_swallowed_its_cancellation() -> None:
    """An asyncio cancellation is delivered once; a library under the task may turn it into something it
    handles (the access statistics' flusher, cancelled during a Redis touch, went back to waiting for work and
    closing Memkit hung for good). ``stop`` cancels again until the task ends."""
    swallowed: list[int] = []

    async def work() -> None:
        while True:  # as the flusher: wait for work, do it, wait again
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if not swallowed:
                    swallowed.append(1)  # the library's swallow: once
                    continue
                raise

    task = BackgroundTask.start(work)
    await asyncio.sleep(0)  # it runs and waits
    with anyio.fail_after(5):
        await task.stop()
    assert swallowed == [1]


async def test_stop_ends_a_task_cancelled_before_it_ran() -> None:
    ran: list[int] = []

    async def work() -> None:
        ran.append(1)

    task = BackgroundTask.start(work)
    with anyio.fail_after(5):
        await task.stop()
    assert ran == []
