"""Working memory on every backend with a key-value face, used as an agent's task loop uses it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import anyio
import msgspec
import pytest

from memkit import Memkit
from memkit.errors import CorruptDataError, ScopeError, ValidationError
from memkit.layers.working import NAMESPACE, WorkingItem

pytestmark = pytest.mark.anyio


class Plan(msgspec.Struct):
    steps: list[str]
    done: int = 0


@pytest.fixture
async def mem(kv_url: str) -> AsyncIterator[Memkit]:
    async with Memkit(kv_url, embedder="hashing", layer_urls={"long_term": "memory://"}) as mem:
        yield mem


async def test_values_of_any_encodable_type_come_back(mem: Memkit) -> None:
    task = mem.working.task("trip-42", user_id="ada")
    when = datetime(2026, 5, 1, 9, 30, tzinfo=UTC)
    await task.set("destination", "Lisbon")
    await task.set("budget", 1284.5)
    await task.set("plan", Plan(steps=["flight", "hotel"]))
    await task.set("when", when)
    assert await task.get("destination") == "Lisbon"
    assert await task.get("budget") == 1284.5
    assert await task.get("plan") == {"steps": ["flight", "hotel"], "done": 0}
    assert await task.get("plan", type=Plan) == Plan(steps=["flight", "hotel"])
    assert await task.get("when", type=datetime) == when
    assert await task.get("missing", "fallback") == "fallback"
    with pytest.raises(ValidationError, match="does not hold"):
        await task.get("destination", type=Plan)


async def test_tasks_and_users_never_see_each_other(mem: Memkit) -> None:
    await mem.working.task("t", user_id="ada").set("secret", "ada's")
    await mem.working.task("t", user_id="bob").set("secret", "bob's")
    await mem.working.task("t2", user_id="ada").set("other", 1)
    assert await mem.working.task("t", user_id="bob").get("secret") == "bob's"
    assert [i.key for i in await mem.working.task("t", user_id="ada").items()] == ["secret"]
    assert await mem.working.task("t").items() == []  # no user is not "every user"
    assert await mem.working.task("t", user_id="ada").clear() == 1
    assert await mem.working.task("t", user_id="bob").get("secret") == "bob's"


async def test_to_context_puts_the_important_and_the_new_first_within_the_budget(mem: Memkit) -> None:
    task = mem.working.task("render")
    await task.set("old_note", "checked the first three hotels", importance=0.5)
    await anyio.sleep(0.01)
    await task.set("new_note", "the user wants a pool", importance=0.5)
    await task.set("goal", "book a hotel in Lisbon for 3 nights", importance=0.9)
    text = await task.to_context(max_tokens=500)
    lines = text.splitlines()
    assert lines[0] == "Current task state:"
    assert [line.split(":")[0] for line in lines[1:]] == ["- goal", "- new_note", "- old_note"]
    small = await task.to_context(max_tokens=40)
    assert "- goal" in small and "more entries not shown" in small
    assert mem.working.tokenizer.count(small) + 4 <= 40


async def test_an_entry_too_big_for_the_budget_leaves_room_to_the_smaller_ones(mem: Memkit) -> None:
    task = mem.working.task("big")
    await task.set("transcript", "word " * 2000, importance=0.9)
    await task.set("city", "Porto", importance=0.5)
    text = await task.to_context(max_tokens=200)
    assert "- city: Porto" in text and "(1 more entries not shown)" in text and "transcript" not in text


async def test_a_key_expires_after_its_ttl(mem: Memkit) -> None:
    task = mem.working.task("ttl")
    await task.set("lease", "worker-1", ttl_s=0.2)
    await task.set("keep", "forever")
    assert await task.get("lease") == "worker-1"
    await anyio.sleep(0.4)
    assert await task.get("lease") is None
    assert [i.key for i in await task.items()] == ["keep"]


async def test_update_keeps_the_keys_importance_and_expiry(mem: Memkit) -> None:
    """They were reset to 0.5 and none: a lease renewed by update() never expired."""
    task = mem.working.task("lease")
    await task.set("goal", "book a hotel", importance=0.9)
    await task.update("goal", lambda goal: f"{goal} in Lisbon")
    await task.set("lease", 1, ttl_s=0.3)
    await task.update("lease", lambda n: n + 1)
    assert [(i.key, i.value, i.importance) for i in await task.items()] == [("goal", "book a hotel in Lisbon", 0.9),
                                                                           ("lease", 2, 0.5)]  # fmt: skip
    await anyio.sleep(0.5)
    assert await task.get("lease") is None  # the expiry set before the update
    await task.update("goal", lambda goal: goal, importance=0.2)  # given: changed
    await task.update("fresh", lambda none: "new")  # a new key: 0.5, no expiry
    assert [(i.key, i.importance) for i in await task.items()] == [("fresh", 0.5), ("goal", 0.2)]


async def test_concurrent_updates_from_two_clients_lose_nothing(kv_url: str) -> None:
    if kv_url == "memory://":
        pytest.skip("memory:// is one process's store; two clients would not share it")
    other = {"long_term": "memory://"}
    async with (
        Memkit(kv_url, embedder="hashing", layer_urls=other) as a,
        Memkit(kv_url, embedder="hashing", layer_urls=other) as b,
    ):

        async def append(mem: Memkit, who: str) -> None:
            task = mem.working.task("crawl", agent_id="crawler")
            for i in range(15):
                await task.update("visited", lambda seen, i=i: [*(seen or []), f"{who}{i}"])
                await task.set(f"{who}-last", i)

        async with anyio.create_task_group() as tg:
            tg.start_soon(append, a, "a")
            tg.start_soon(append, b, "b")
        visited = await a.working.task("crawl", agent_id="crawler").get("visited")
        assert sorted(visited) == sorted([f"a{i}" for i in range(15)] + [f"b{i}" for i in range(15)])
        assert await b.working.task("crawl", agent_id="crawler").get("a-last") == 14


async def test_bad_input_is_refused_and_a_corrupt_entry_is_named(mem: Memkit) -> None:
    task = mem.working.task("bad")
    with pytest.raises(ValidationError, match="msgspec can encode"):
        await task.set("sock", object())
    with pytest.raises(ValidationError, match="limit"):
        await task.set("huge", "x" * (2 << 20))
    with pytest.raises(ValidationError):
        await task.set("k", 1, importance=2.0)
    with pytest.raises(ScopeError):
        mem.working.task("")
    assert await task.items() == []
    await task.set("fine", 1)
    prefix = task._prefix  # an entry damaged outside memkit
    await mem.working.backend.kv_set(NAMESPACE, task._key("fine"), b"\xc1garbage")
    with pytest.raises(CorruptDataError, match="'fine'"):
        await task.get("fine")
    assert prefix.endswith("||")


async def test_a_snapshot_restores_the_task_exactly(mem: Memkit) -> None:
    task = mem.working.task("snap", user_id="ada")
    await task.set("goal", "Lisbon", importance=0.9)
    await task.set("plan", Plan(steps=["a", "b"]))
    saved = msgspec.json.encode(await task.snapshot())  # what a checkpoint keeps
    await task.set("goal", "changed")
    await task.set("extra", 1)
    await task.restore(msgspec.json.decode(saved, type=list[WorkingItem]))
    assert await task.get("goal") == "Lisbon" and await task.get("extra") is None
    assert await task.get("plan", type=Plan) == Plan(steps=["a", "b"])
    assert [i.key for i in await task.items()] == ["goal", "plan"]
