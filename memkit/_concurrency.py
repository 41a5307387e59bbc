"""Independent awaitables run side by side, a few at a time, failing as one call would."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import anyio

__all__ = ["gather_bounded"]

T = TypeVar("T")


async def gather_bounded(calls: Sequence[Callable[[], Awaitable[T]]], limit: int) -> list[T]:
    """Each call's result, in order, with at most ``limit`` running at once. The first exception is raised as
    it is (a task group would wrap it in an ExceptionGroup, which ``except SomeError:`` around a memkit call
    never catches) and the calls still running are cancelled."""
    if len(calls) <= 1:
        return [await call() for call in calls]
    results: list[T | None] = [None] * len(calls)
    failures: list[Exception] = []
    limiter = anyio.CapacityLimiter(limit)

    async def run(at: int, call: Callable[[], Awaitable[T]], group: anyio.abc.TaskGroup) -> None:
        try:
            async with limiter:
                results[at] = await call()
        except Exception as exc:  # cancellation is a BaseException: it goes through the group untouched
            failures.append(exc)
            group.cancel_scope.cancel()

    async with anyio.create_task_group() as group:
        for at, call in enumerate(calls):
            group.start_soon(run, at, call, group)
    if failures:
        raise failures[0]
    return results  # type: ignore[return-value]  # every slot was filled: no call failed
