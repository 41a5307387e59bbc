"""Long-term memory over both embedded backends (hashing embedder; retrieval tests use the real model)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import timedelta

import anyio
import numpy as np
import pytest

from memkit import (
    ContentError,
    ImportanceError,
    InvalidVectorError,
    LongTermConfig,
    Memkit,
    NotFoundError,
    ScopeError,
    ValidationError,
)
from memkit.embedders import HashingEmbedder

# anyio's pytest plugin runs an async fixture's setup and teardown in one task, which
# anything holding a task group (like Memkit) needs.
pytestmark = pytest.mark.anyio


@pytest.fixture
async def mem(store_url: str) -> AsyncIterator[Memkit]:
    async with Memkit(store_url, embedder=HashingEmbedder(64)) as client:
        yield client


async def test_store_and_recall_with_scores(mem: Memkit) -> None:
    lt = mem.long_term
    result = await lt.store("Ada prefers window seats", user_id="ada", kind="preference", importance=0.7)
    assert result.status == "stored" and result.memory is not None
    await lt.store("Ada's daughter is called Lina", user_id="ada")
    hits = await lt.recall("window seats", user_id="ada")
    assert hits[0].memory.content == "Ada prefers window seats"
    top = hits[0]
    assert top.similarity > 0 and top.lexical == pytest.approx(1.0) and 0.99 < top.recency <= 1.0
    assert top.importance == pytest.approx(0.7)
    weights = mem.long_term.config.weights
    expected = (weights.similarity * top.similarity + weights.lexical * top.lexical
                + weights.recency * top.recency + weights.importance * top.importance)  # fmt: skip
    assert top.score == pytest.approx(expected, rel=1e-4)


async def test_default_limit_is_five(mem: Memkit) -> None:
    for i in range(12):
        await mem.long_term.store(f"note number {i} about gardening topic {i * 7}", user_id="u")
    assert len(await mem.long_term.recall("gardening", user_id="u")) == 5
    assert len(await mem.long_term.recall("gardening", user_id="u", k=8)) == 8


async def test_users_are_isolated(mem: Memkit) -> None:
    await mem.long_term.store("my bank PIN hint is the cat's name", user_id="alice")
    await mem.long_term.store("I like hiking", user_id="bob")
    hits = await mem.long_term.recall("bank PIN hint cat", user_id="bob", k=10)
    assert all(hit.memory.scope.user_id == "bob" for hit in hits)
    stored = (await mem.long_term.list(user_id="alice")).memories[0]
    with pytest.raises(NotFoundError):
        await mem.long_term.get(stored.id, user_id="bob")
    assert await mem.long_term.forget(stored.id, user_id="bob") is False
    assert (await mem.long_term.get(stored.id, user_id="alice")).content.startswith("my bank")


async def test_scope_required_unless_opted_in(mem: Memkit) -> None:
    with pytest.raises(ScopeError):
        await mem.long_term.store("orphan", user_id=None)
    with pytest.raises(ScopeError):
        await mem.long_term.recall("anything")
    await mem.long_term.store("a", user_id="x")
    await mem.long_term.store("a b", user_id="y")
    hits = await mem.long_term.recall("a", all_scopes=True, k=10)
    assert {h.memory.scope.user_id for h in hits} == {"x", "y"}


async def test_importance_gate(store_url: str) -> None:
    config = LongTermConfig(min_importance=0.3)
    async with Memkit(store_url, embedder=HashingEmbedder(64), long_term=config) as mem:
        result = await mem.long_term.store("trivia", user_id="u", importance=0.1)
        assert result.status == "rejected" and result.memory is None and "0.3" in (result.reason or "")
        assert (await mem.long_term.list(user_id="u")).memories == []


async def test_exact_duplicate_and_near_duplicate_merge(mem: Memkit) -> None:
    lt = mem.long_term
    first = await lt.store("I live in Berlin.", user_id="u", importance=0.4)
    again = await lt.store("  i live in BERLIN ", user_id="u")
    assert again.status == "duplicate" and again.memory is not None and first.memory is not None
    assert again.memory.id == first.memory.id
    merged = await lt.store("I live in Berlin now", user_id="u", importance=0.9, metadata={"src": "chat"})
    assert merged.status == "merged" and merged.memory is not None
    assert merged.memory.id == first.memory.id and merged.memory.content == "I live in Berlin now"
    assert merged.memory.importance == 0.9 and merged.memory.metadata == {"src": "chat"}
    assert len((await lt.list(user_id="u")).memories) == 1
    other_user = await lt.store("I live in Berlin.", user_id="v")
    assert other_user.status == "stored"


async def test_update_forget_forget_all(mem: Memkit) -> None:
    lt = mem.long_term
    stored = (await lt.store("likes green tea", user_id="u")).memory
    assert stored is not None
    updated = await lt.update(stored.id, user_id="u", content="likes black tea", importance=0.8)
    assert updated.content == "likes black tea" and updated.updated_at >= stored.updated_at
    assert (await lt.recall("black tea", user_id="u"))[0].memory.content == "likes black tea"
    assert await lt.forget(stored.id, user_id="u") is True
    with pytest.raises(NotFoundError):
        await lt.get(stored.id, user_id="u")
    assert await lt.recall("black tea", user_id="u") == []
    for i in range(7):
        await lt.store(f"memory {i} alpha{i}", user_id="u")
    await lt.store("keep me", user_id="w")
    assert await lt.forget_all(user_id="u") == 7
    assert (await lt.list(user_id="u")).memories == []
    assert len((await lt.list(user_id="w")).memories) == 1


async def test_list_filters_and_pagination(mem: Memkit) -> None:
    lt = mem.long_term
    for i in range(9):
        kind = "preference" if i % 3 == 0 else "fact"
        await lt.store(f"entry {i} word{i}", user_id="u", kind=kind, metadata={"topic": "t" + str(i % 2)})
    seen, cursor = [], None
    while True:
        page = await lt.list(user_id="u", limit=4, cursor=cursor)
        seen += page.memories
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert len(seen) == 9 and len({m.id for m in seen}) == 9
    assert len((await lt.list(user_id="u", kinds=["preference"])).memories) == 3
    assert len((await lt.list(user_id="u", metadata={"topic": "t0"})).memories) == 5
    hits = await lt.recall("entry", user_id="u", kinds=["preference"], k=10)
    assert {h.memory.kind for h in hits} == {"preference"}


async def test_expired_not_recalled_before_sweep(mem: Memkit) -> None:
    lt = mem.long_term
    await lt.store("temporary door code 4411", user_id="u", ttl=timedelta(milliseconds=200))
    await lt.store("permanent address", user_id="u")
    assert len(await lt.recall("door code", user_id="u", k=10)) == 2
    await anyio.sleep(0.3)
    hits = await lt.recall("door code", user_id="u", k=10)
    assert [h.memory.content for h in hits] == ["permanent address"]
    assert await lt.sweep_expired() == 1


async def test_relevance_threshold(mem: Memkit) -> None:
    await mem.long_term.store("quantum chromodynamics lecture notes", user_id="u", importance=0.0)
    await mem.long_term.store("grocery list: eggs, milk", user_id="u", importance=0.0)
    hits = await mem.long_term.recall("quantum chromodynamics", user_id="u", min_score=0.3)
    assert [h.memory.content for h in hits] == ["quantum chromodynamics lecture notes"]


async def test_access_statistics_updated_in_background(mem: Memkit) -> None:
    stored = (await mem.long_term.store("the wifi password is on the fridge", user_id="u")).memory
    assert stored is not None and stored.access_count == 0
    await mem.long_term.recall("wifi password", user_id="u")
    await mem.long_term.recall("wifi password", user_id="u")
    await mem._access.flush()
    again = await mem.long_term.get(stored.id, user_id="u")
    assert again.access_count == 2 and again.last_accessed_at is not None


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"content": ""}, ContentError),
        ({"content": "   "}, ContentError),
        ({"content": "x" * 8001}, ContentError),
        ({"content": 42}, ContentError),
        ({"content": "ok", "importance": 1.5}, ImportanceError),
        ({"content": "ok", "importance": float("nan")}, ImportanceError),
        ({"content": "ok", "importance": -0.1}, ImportanceError),
        ({"content": "ok", "metadata": {"x": object()}}, ValidationError),
        ({"content": "ok", "ttl": -5}, ValidationError),
        ({"content": "ok", "kind": ""}, ValidationError),
    ],
)
async def test_bad_input_rejected_and_nothing_written(mem: Memkit, kwargs: dict[str, object], error: type) -> None:
    with pytest.raises(error):
        await mem.long_term.store(user_id="u", **kwargs)  # type: ignore[arg-type]
    assert (await mem.long_term.list(user_id="u")).memories == []


class BrokenEmbedder:
    """Test double: returns NaN (or wrong-sized) vectors, as a faulty remote model might."""

    def __init__(self, vector: list[float]) -> None:
        self.vector = vector

    @property
    def dim(self) -> int:
        return len(self.vector)

    @property
    def model_id(self) -> str:
        return "broken"

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.array([self.vector] * len(texts), dtype=np.float32)


@pytest.mark.parametrize("vector", [[float("nan"), 1.0], [float("inf"), 0.0], [0.0, 0.0]])
async def test_bad_vectors_rejected(store_url: str, vector: list[float]) -> None:
    async with Memkit(store_url, embedder=BrokenEmbedder(vector)) as mem:
        with pytest.raises(InvalidVectorError):
            await mem.long_term.store("hello", user_id="u")
        assert (await mem.long_term.list(user_id="u")).memories == []


async def test_wrong_dimension_rejected(store_url: str) -> None:
    from memkit import DimensionMismatchError

    async with Memkit(store_url, embedder=HashingEmbedder(64)) as mem:
        await mem.long_term.store("first", user_id="u")
        mem.long_term.embedder = HashingEmbedder(32)
        with pytest.raises(DimensionMismatchError):
            await mem.long_term.store("second", user_id="u")
        assert len((await mem.long_term.list(user_id="u")).memories) == 1


async def test_two_clients_never_lose_each_others_writes(store_url: str) -> None:
    """Two clients (as two processes would) touch and update one memory at once: nothing is lost."""
    if store_url.startswith("memory://"):
        pytest.skip("memory:// is private to one client")
    embedder = HashingEmbedder(64)
    async with Memkit(store_url, embedder=embedder) as a, Memkit(store_url, embedder=embedder) as b:
        stored = (await a.long_term.store("shared fact about the garden shed", user_id="u")).memory
        assert stored is not None
        collection = a.long_term.config.collection
        async with anyio.create_task_group() as group:
            for client in (a, b):
                for _ in range(10):
                    group.start_soon(client.long_term.backend.touch, collection, {stored.id: 1}, 1e9)
            group.start_soon(lambda: b.long_term.update(stored.id, user_id="u", importance=0.9))
        final = await a.long_term.get(stored.id, user_id="u")
        assert final.access_count == 20
        assert final.importance == pytest.approx(0.9)


async def test_a_users_records_in_memory_share_one_scope() -> None:
    """memory:// holds each memory's record with its scope: one (frozen) Scope a user, not ~95 bytes a record."""
    from memkit.layers.longterm import NewMemory

    async with Memkit("memory://", embedder=HashingEmbedder(64)) as mem:
        await mem.long_term.store_many([NewMemory(content=f"note {i} about {i * 7}", user_id="ada") for i in range(5)])
        await mem.long_term.store("one more note", user_id="ada")
        await mem.long_term.store("bob's note", user_id="bob")
        collection = mem.backend._store.collection(mem.long_term.config.collection)  # type: ignore[attr-defined]
        scopes = {id(record.scope) for record in collection._records if record is not None}
        assert len(scopes) == 2
