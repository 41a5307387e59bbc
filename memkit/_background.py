"""A background task that belongs to no caller's task group.

``Memkit`` is opened and closed by frameworks in different tasks (a pytest-asyncio fixture, a FastAPI
lifespan, a worker's start-up and shut-down hooks). A task group entered in ``open()`` and left in
``aclose()`` breaks there ("exit cancel scope in a different task") and wraps every exception of the
``async with`` body in an ``ExceptionGroup``. So background work runs as a task of the event loop
itself (asyncio) or as a trio system task, and ``aclose()`` cancels and awaits it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import anyio

__all__ = ["BackgroundTask"]

log = logging.getLogger("memkit")
_RECANCEL_S = 0.05
"""How long ``stop`` waits for a cancelled task before cancelling it again."""


class BackgroundTask:
    """``task = BackgroundTask.start(fn)``; later ``await task.stop()``. ``fn`` must not raise: what it raises
    is logged and the task ends."""

    def __init__(self, fn: Callable[[], Awaitable[None]]) -> None:
        self._fn = fn
        self._done = anyio.Event()
        self._cancel: Callable[[], object] = lambda: None
        self._asyncio_task: asyncio.Task[None] | None = None

    @classmethod
    def start(cls, fn: Callable[[], Awaitable[None]]) -> BackgroundTask:
        task = cls(fn)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio: trio
            task._start_trio()
        else:
            task._asyncio_task = loop.create_task(task._run())
            task._cancel = task._asyncio_task.cancel
        return task

    def _start_trio(self) -> None:
        import trio

        scope = trio.CancelScope()
        self._cancel = scope.cancel

        async def run() -> None:
            with scope:
                await self._run()

        trio.lowlevel.spawn_system_task(run)

    async def _run(self) -> None:
        try:
            await self._fn()
        except anyio.get_cancelled_exc_class():
            raise
        except Exception:
            log.exception("memkit: background task %s failed", getattr(self._fn, "__qualname__", self._fn))
        finally:
            self._done.set()

    async def wait(self) -> None:
        """Wait until the task has ended on its own."""
        if self._asyncio_task is not None:
            await asyncio.wait({self._asyncio_task})
            return
        await self._done.wait()

    async def stop(self) -> None:
        """Cancel the task and wait until it has ended."""
        self._cancel()
        task = self._asyncio_task
        if task is None:
            await self._done.wait()
            return
        # A task cancelled before it first ran never runs its body (nor its finally): wait for the task, not
        # for ``_done``. An asyncio cancellation is delivered once, and code under the task may swallow it:
        # the access statistics' flusher, cancelled during a Redis touch, went back to waiting for work, and
        # leaving ``async with Memkit("redis://...")`` hung for good (peers benchmark, 2 runs of 2 at 100k).
        # So it is cancelled again until it ends, as trio's (and anyio's) cancellation would persist.
        while not task.done():
            await asyncio.wait({task}, timeout=_RECANCEL_S)
            if not task.done():
                task.cancel()
