"""Leaving ``async with Memkit(...)`` is bounded by ``close_timeout`` when the server is gone.

A private server is started per test, the session stores and recalls (so access statistics are pending:
the flush delay is held long, so none is written before the server goes), then the server is killed
(SIGKILL: connections reset, reconnects refused) or hung (SIGSTOP: connections open, nothing answers).
Redis retries a lost connection 6 times with backoff (3.2 s in all), longer than the ``close_timeout`` of 2 s
used here, so leaving must give up on the statistics with a warning, at ``close_timeout`` plus a little.
Measured here (close_timeout=2): 2.002 s for Redis killed, 2.003 s hung; 2.002 s for Postgres killed, 2.255 s
hung (the 0.25 s every backend gets to release its connections; 4.005 s before one budget covered it all).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memkit import Memkit
from memkit.testing.servers import free_port, start_postgres, start_redis

pytestmark = pytest.mark.anyio

CLOSE_TIMEOUT = 2.0
SLACK = 1.0
"""What "a little" may be: closing connections, cancelling the flush, a loaded 2-core machine."""
GAVE_UP = "gave up writing access statistics"


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    process = start_redis(tmp_path / "redis", modules=True, port=port)
    try:
        yield f"redis://127.0.0.1:{port}/0", process
    finally:
        process.kill()  # SIGKILL ends a stopped process too
        process.wait()


@pytest.fixture
def private_postgres(server_folder: Path) -> Iterator[Any]:
    server_folder.chmod(0o777)  # the embedded server may run as a user of its own
    server = start_postgres(server_folder / "pg")
    try:
        yield server
    finally:
        for pid in server_pids(server.get_pid()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        server._cleanup()


def server_pids(postmaster: int) -> list[int]:
    """The postmaster and its children, the backends serving each connection among them."""
    import psutil  # type: ignore[import-untyped]

    return [postmaster, *(child.pid for child in psutil.Process(postmaster).children(recursive=True))]


async def exit_after_server_goes(url: str, go: signal.Signals, pids: Callable[[], list[int]]) -> tuple[float, str]:
    """Seconds spent leaving ``async with`` after signalling ``pids()`` with ``go``, and the warning given."""
    with pytest.warns(RuntimeWarning, match=GAVE_UP) as caught:
        async with Memkit(url, embedder="hashing", close_timeout=CLOSE_TIMEOUT) as mem:
            mem._access._delay_s = 3600.0  # hold the statistics: still pending when the server goes
            await mem.long_term.store("the deploy key lives in the vault", user_id="ann")
            assert await mem.long_term.recall("deploy key", user_id="ann")
            assert mem._access.pending == 1
            for pid in pids():  # asked now: the processes serving this client's connections exist by now
                os.kill(pid, go)
            started = time.monotonic()
        elapsed = time.monotonic() - started
    return elapsed, next(str(w.message) for w in caught if GAVE_UP in str(w.message))


@pytest.mark.parametrize("go", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "hung"])
async def test_leaving_is_bounded_when_redis_is_gone(
    private_redis: tuple[str, subprocess.Popen[bytes]], go: signal.Signals
) -> None:
    url, server = private_redis
    elapsed, _ = await exit_after_server_goes(url, go, lambda: [server.pid])
    assert elapsed < CLOSE_TIMEOUT + SLACK, f"leaving took {elapsed:.2f} s with close_timeout={CLOSE_TIMEOUT}"


# Found here: the warning said "0 dropped", the counts being written having been taken off the tracker.
async def test_the_warning_counts_the_statistics_it_dropped(
    private_redis: tuple[str, subprocess.Popen[bytes]],
) -> None:
    url, server = private_redis
    _, warning = await exit_after_server_goes(url, signal.SIGKILL, lambda: [server.pid])
    assert re.search(r"\b1 dropped", warning), warning


# Found here: the flush and then each backend's close each got a close_timeout of their own; with Postgres
# hung, asyncpg's graceful pool close waited the second one out (4.0 s for close_timeout=2).
@pytest.mark.slow  # a private Postgres: ~5 s to start
async def test_leaving_is_bounded_when_postgres_hangs(private_postgres: Any) -> None:
    url, postmaster = private_postgres.get_uri(), private_postgres.get_pid()
    elapsed, _ = await exit_after_server_goes(url, signal.SIGSTOP, lambda: server_pids(postmaster))
    assert elapsed < CLOSE_TIMEOUT + SLACK, f"leaving took {elapsed:.2f} s with close_timeout={CLOSE_TIMEOUT}"
