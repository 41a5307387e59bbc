"""The conformance suite on the two embedded backends (and float16 / int8 storage)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memkit import open_backend
from memkit.backend import Backend
from memkit.testing import BackendConformance


class TestMemoryBackend(BackendConformance):
    @pytest.fixture
    async def backend(self) -> AsyncIterator[Backend]:
        async with open_backend("memory://") as backend:
            yield backend


class TestMemoryBackendFloat16(BackendConformance):
    @pytest.fixture
    async def backend(self) -> AsyncIterator[Backend]:
        async with open_backend("memory://?dtype=float16") as backend:
            yield backend


class TestMemoryBackendInt8(BackendConformance):
    @pytest.fixture
    async def backend(self) -> AsyncIterator[Backend]:
        async with open_backend("memory://?dtype=int8") as backend:
            yield backend


class TestSQLiteBackend(BackendConformance):
    @pytest.fixture
    async def backend(self, tmp_path: Path) -> AsyncIterator[Backend]:
        async with open_backend(f"sqlite:///{tmp_path / 'conf.db'}") as backend:
            yield backend
