from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

# Hypothesis imports its optimiser lazily, deep inside a running property test; pytest rewrites
# hypothesis's modules on import (it is a pytest plugin), and CPython 3.11's parser then failed once
# at that depth ("AST constructor recursion depth mismatch"). Imported here, at the top level, instead.
import hypothesis.internal.conjecture.optimiser  # noqa: F401
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["memory", "sqlite"])
def embedded_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'mem.db'}"


@pytest.fixture(scope="session")
def local_embedder() -> AsyncIterator[object]:
    """The packaged all-MiniLM-L6-v2, loaded once per test session."""
    from memkit.embedders import CachedEmbedder, LocalEmbedder

    embedder = LocalEmbedder()
    embedder._load()
    return CachedEmbedder(embedder)  # type: ignore[return-value]


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    from memkit.testing.servers import postgres_server

    # Not under pytest's temporary folder: run as root, the server runs as a user of its own, and any other
    # pytest session starting on the machine makes that folder 0700 again: the server lost its data
    # directory mid-run ("could not open pg_control: Permission denied") and every later test failed.
    folder = Path(tempfile.mkdtemp(prefix="memkit-test-postgres-"))
    try:
        with postgres_server(folder) as url:
            yield url
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def server_folder() -> Iterator[Path]:
    """A folder for a test's own Postgres, outside pytest's temporary folder (see ``postgres_url``)."""
    folder = Path(tempfile.mkdtemp(prefix="memkit-test-server-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from memkit.testing.servers import redis_server

    with redis_server(tmp_path_factory.mktemp("redis-stack"), modules=True) as url:
        yield url


@pytest.fixture(scope="session")
def redis_plain_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from memkit.testing.servers import redis_server

    with redis_server(tmp_path_factory.mktemp("redis-plain"), modules=False) as url:
        yield url


def with_option(url: str, key: str, value: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{key}={value}"


def fresh_postgres_url(url: str, **options: str) -> str:
    """The server's URL with a new, empty schema (tests stay independent) and extra options."""
    import uuid

    url = with_option(url, "schema", f"t_{uuid.uuid4().hex[:12]}")
    for key, value in options.items():
        url = with_option(url, key, value)
    return url


def fresh_redis_url(url: str, **options: str) -> str:
    """The server's URL after emptying its database, with extra options."""
    import redis

    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    for key, value in options.items():
        url = with_option(url, key, value)
    return url


@pytest.fixture(params=["memory", "sqlite", "postgres", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Every backend that stores records: a fresh, empty store per test."""
    if request.param == "memory":
        return "memory://"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'mem.db'}"
    if request.param == "postgres":
        return fresh_postgres_url(request.getfixturevalue("postgres_url"))
    return fresh_redis_url(request.getfixturevalue("redis_url"))


@pytest.fixture(params=["memory", "sqlite", "postgres", "redis", "redis-plain"])
def kv_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Every backend with a key-value face (plain Redis, without modules, included): fresh per test."""
    if request.param == "redis-plain":
        return fresh_redis_url(request.getfixturevalue("redis_plain_url"))
    if request.param == "memory":
        return "memory://"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'kv.db'}"
    if request.param == "postgres":
        return fresh_postgres_url(request.getfixturevalue("postgres_url"))
    return fresh_redis_url(request.getfixturevalue("redis_url"))
