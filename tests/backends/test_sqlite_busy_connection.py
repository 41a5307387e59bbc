"""A read the event loop answers from SQLite's in-process copy asks the file whether it changed (``PRAGMA
data_version``): never while a worker thread still uses the connection (a call the loop gave up on, e.g.
after Ctrl-C under asyncio, may still be running there)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from memkit_backends.sqlite import SQLiteBackend

from memkit.backend import Record, Scope, StorageURL

pytestmark = pytest.mark.anyio


async def test_a_loop_read_leaves_a_connection_in_use_alone(tmp_path: Path) -> None:
    record = Record(id="a", scope=Scope(user_id="ada"), body=b"{}", text="likes tea",
                    vector=np.ones(3, np.float32) / np.sqrt(3), importance=0.5, timestamp=1.0)  # fmt: skip
    async with SQLiteBackend(StorageURL(f"sqlite:///{tmp_path / 'a.db'}")) as backend:
        await backend.upsert("c", [record])
        await backend.get("c", ["a"])  # loaded: later small reads are answered on the loop
        held_then: list[bool] = []
        current = backend._cache.current

        def spy(conn: Any, name: str) -> Any:
            held_then.append(backend._in_use.locked())  # by this read, or by a worker (then it must not run)
            return current(conn, name)

        backend._cache.current = spy  # type: ignore[method-assign]
        assert [r.id for r in await backend.get("c", ["a"])] == ["a"]
        assert held_then == [True]  # the read took the connection for its one PRAGMA
        taken, release = threading.Event(), threading.Event()

        def worker() -> None:
            with backend._in_use:
                taken.set()
                release.wait(10)

        thread = threading.Thread(target=worker)
        thread.start()
        taken.wait(10)
        found: list[list[Record]] = []
        async with anyio.create_task_group() as group:

            async def read() -> None:
                found.append(await backend.get("c", ["a"]))

            group.start_soon(read)
            await anyio.sleep(0.3)
            assert not found  # it waits for the worker, in a thread of its own
            release.set()
        thread.join(10)
        assert [r.id for r in found[0]] == ["a"] and held_then == [True]  # no PRAGMA under the worker
