"""memkit under pytest-asyncio (strict mode), the way a user tests an agent: an async fixture that opens
memkit and yields it, tests marked ``asyncio``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from memkit import ContentError, Memkit, MemkitError


@pytest_asyncio.fixture
async def mem(tmp_path: Path) -> AsyncIterator[Memkit]:
    async with Memkit(f"sqlite:///{tmp_path / 'agent.db'}", embedder="hashing") as client:
        yield client


@pytest.mark.asyncio
async def test_store_and_recall(mem: Memkit) -> None:
    await mem.long_term.store("The user's favourite colour is teal.", user_id="ada")
    hits = await mem.long_term.recall("favourite colour", user_id="ada")
    assert hits and "teal" in hits[0].memory.content


@pytest.mark.asyncio
async def test_memkit_errors_are_catchable(mem: Memkit) -> None:
    with pytest.raises(ContentError):
        await mem.long_term.store("", user_id="ada")
    try:
        await mem.long_term.recall("x" * 10_000, user_id="ada")
    except MemkitError as exc:
        assert "limit" in str(exc)
    else:  # pragma: no cover - reported by the assertion
        pytest.fail("an oversized query must raise a memkit error")


@pytest.mark.asyncio
async def test_open_and_aclose_as_framework_hooks(tmp_path: Path) -> None:
    mem = Memkit(f"sqlite:///{tmp_path / 'hooks.db'}", embedder="hashing")
    await mem.open()
    try:
        await mem.long_term.store("opened by a start-up hook", user_id="u")
    finally:
        await mem.aclose()
