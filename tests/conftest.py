from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

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
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.servers import postgres_server

    with postgres_server(tmp_path_factory.mktemp("postgres")) as url:
        yield url


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.servers import redis_server

    with redis_server(tmp_path_factory.mktemp("redis-stack"), modules=True) as url:
        yield url


@pytest.fixture(scope="session")
def redis_plain_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.servers import redis_server

    with redis_server(tmp_path_factory.mktemp("redis-plain"), modules=False) as url:
        yield url


def with_option(url: str, key: str, value: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{key}={value}"
