from __future__ import annotations

import os
from collections.abc import AsyncIterator
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
