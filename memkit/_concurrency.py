"""Independent awaitables run side by side, a few at a time, failing as one call would."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import anyio

__all__ = ["both", "gather_bounded"]

T = TypeVar("T")
U = TypeVar("U")


async def gather_bounded(calls: Sequence[Callable[[], Awaitable[T]]], limit: int) -> list[T]:
    """Each call's result, in order, with at most ``limit`` running at once. The first exception is raised as
    it is (a task group would wrap it in an ExceptionGroup, which ``except SomeError:`` around a memkit call
    never catches) and the calls still running are cancelled."""
    if len(calls) <= 1 or limit <= 1:  # one at a time needs no tasks
        return [await call() for call in calls]
    results: list[T | None] = [None] * len(calls)
    failures: list[Exception] = []
    pending = iter(enumerate(calls))

    # ``limit`` workers taking the next call, not a task per call waiting on a limiter: a batch of ten
    # thousand quick calls spent most of its time starting tasks and queueing on the limiter.
    async def worker(group: anyio.abc.TaskGroup) -> None:
        for at, call in pending:
            try:
                results[at] = await call()
            except Exception as exc:  # cancellation is a BaseException: it goes through the group untouched
                failures.append(exc)
                group.cancel_scope.cancel()
                return

    async with anyio.create_task_group() as group:
        for _ in range(min(limit, len(calls))):
            group.start_soon(worker, group)
    if failures:
        raise failures[0]
    return results  # type: ignore[return-value]  # every slot was filled: no call failed


async def both(first: Callable[[], Awaitable[T]], second: Callable[[], Awaitable[U]]) -> tuple[T, U]:
    """Two calls of different result types side by side (``gather_bounded``'s failure rules)."""
    a, b = await gather_bounded([first, second], limit=2)
    return a, b  # type: ignore[return-value]  # in order: the first call's result, then the second's
