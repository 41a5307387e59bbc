"""Checkpoints on every backend with a key-value face, used as an agent saves and resumes its state."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import AsyncIterator
from typing import Any
from unittest import mock

import anyio
import msgspec
import pytest

from memkit import Memkit
from memkit.errors import CorruptDataError, NotFoundError, ScopeError, SerializationError, ValidationError
from memkit.layers.checkpoints import AgentState, CheckpointConfig, CheckpointInfo, Checkpoints
from memkit.layers.checkpoints import _layer as layer_module
from memkit.layers.checkpoints._layer import NAMESPACE

pytestmark = pytest.mark.anyio


class Plan(msgspec.Struct):
    steps: list[str]
    done: int = 0


@dataclasses.dataclass
class Progress:
    found: list[str]
    page: int


@pytest.fixture
async def mem(kv_url: str) -> AsyncIterator[Memkit]:
    async with Memkit(kv_url, embedder="hashing", layer_urls={"long_term": "memory://"}) as mem:
        yield mem


@pytest.fixture
def cp(mem: Memkit) -> Checkpoints:
    return Checkpoints(mem.short_term.backend)


async def _blob_keys(cp: Checkpoints) -> list[str]:
    page = await cp.backend.kv_scan(NAMESPACE, limit=1000)
    return [key for key, _ in page.items if "||cp:" in key]


async def test_save_load_list_prune_delete(cp: Checkpoints) -> None:
    first = await cp.save("t", {"turn": 1}, metadata={"step": "search"})
    second = await cp.save("t", Plan(steps=["flight", "hotel"], done=1))
    assert await cp.load("t") == {"steps": ["flight", "hotel"], "done": 1}
    assert await cp.load("t", type=Plan) == Plan(steps=["flight", "hotel"], done=1)
    assert await cp.load("t", first) == {"turn": 1}
    infos = await cp.list("t")
    assert [i.id for i in infos] == [second, first]
    assert isinstance(infos[0], CheckpointInfo)
    assert infos[0].parent_id == first and infos[1].parent_id is None
    assert infos[1].metadata == {"step": "search"} and infos[0].metadata == {}
    assert infos[0].created_at >= infos[1].created_at and infos[0].created_at.tzinfo is not None
    assert infos[0].serializer == "msgpack" and infos[0].size_bytes > 44 and not infos[0].encrypted
    assert await cp.prune("t", keep_last=1) == 1
    assert [i.id for i in await cp.list("t")] == [second]
    with pytest.raises(NotFoundError):
        await cp.load("t", first)
    assert len(await _blob_keys(cp)) == 1  # the pruned blob is gone too
    assert await cp.delete("t") == 1
    assert await cp.list("t") == []
    assert await _blob_keys(cp) == []
    with pytest.raises(NotFoundError, match="no checkpoint"):
        await cp.load("t")
    assert await cp.load("t", default=None) is None


async def test_a_damaged_or_missing_blob_is_an_error_never_a_state(cp: Checkpoints) -> None:
    good = await cp.save("t", Progress(found=["a"], page=1))
    await cp.save("t", {"turn": 2, "pad": "x" * 5000})
    assert await cp.load("t", good, type=Progress) == Progress(found=["a"], page=1)
    (newest,) = [key for key in await _blob_keys(cp) if not key.endswith(good)]
    stored = await cp.backend.kv_get(NAMESPACE, newest)
    assert stored is not None
    await cp.backend.kv_set(NAMESPACE, newest, stored[:-10])  # a torn write
    with pytest.raises(SerializationError, match="truncated"):
        await cp.load("t")
    await cp.backend.kv_set(NAMESPACE, newest, stored[:60] + bytes([stored[60] ^ 4]) + stored[61:])
    with pytest.raises(SerializationError, match="checksum"):
        await cp.load("t")
    await cp.backend.kv_delete(NAMESPACE, newest)
    with pytest.raises(CorruptDataError, match="data is gone"):
        await cp.load("t")
    assert await cp.load("t", good, type=Progress) == Progress(found=["a"], page=1)  # the previous one still loads


async def test_a_large_state_round_trips_off_the_event_loop(cp: Checkpoints) -> None:
    state = {"blob": random.Random(1).randbytes(2 << 20), "text": "turn " * 100_000}  # past the 1 MiB threshold
    await cp.save("big", state)
    assert await cp.load("big") == state
    assert (await cp.list("big"))[0].size_bytes < (2 << 20) + 50_000  # the text compressed, the bytes could not


async def test_retention_keeps_the_newest_and_deletes_the_rest(mem: Memkit) -> None:
    cp = Checkpoints(mem.short_term.backend, CheckpointConfig(keep_last=3))
    ids = [await cp.save("t", {"turn": n}) for n in range(5)]
    assert [i.id for i in await cp.list("t")] == ids[:1:-1]
    assert len(await _blob_keys(cp)) == 3
    assert await cp.load("t") == {"turn": 4}
    for gone in ids[:2]:
        with pytest.raises(NotFoundError):
            await cp.load("t", gone)


async def test_parents_chain_by_default_and_branch_when_asked(cp: Checkpoints) -> None:
    a = await cp.save("t", "a")
    b = await cp.save("t", "b")
    branch = await cp.save("t", "a2", parent_id=a)
    after = await cp.save("t", "next")
    parents = {i.id: i.parent_id for i in await cp.list("t")}
    assert parents == {a: None, b: a, branch: a, after: branch}
    with pytest.raises(NotFoundError, match="no checkpoint"):
        await cp.save("t", "x", parent_id="0" * 24)
    assert len(await _blob_keys(cp)) == 4  # the refused save wrote nothing
    with pytest.raises(NotFoundError):
        await cp.save("other-thread", "x", parent_id=a)  # a parent from another thread is not one


async def test_users_agents_and_threads_never_see_each_other(cp: Checkpoints) -> None:
    await cp.save("t", "ada's", user_id="ada")
    await cp.save("t", "bob's", user_id="bob")
    await cp.save("t", "ada's agent", user_id="ada", agent_id="planner")
    await cp.save("t2", "ada's other", user_id="ada")
    assert await cp.load("t", user_id="bob") == "bob's"
    assert await cp.load("t", user_id="ada") == "ada's"
    assert await cp.load("t", user_id="ada", agent_id="planner") == "ada's agent"
    assert await cp.list("t") == []  # no user is not "every user"
    bobs = (await cp.list("t", user_id="bob"))[0].id
    with pytest.raises(NotFoundError):
        await cp.load("t", bobs, user_id="ada")  # an id does not cross users
    assert await cp.delete("t", user_id="ada") == 1
    assert await cp.load("t", user_id="bob") == "bob's"
    assert await cp.load("t2", user_id="ada") == "ada's other"
    assert await cp.load("t", user_id="ada", agent_id="planner") == "ada's agent"


async def test_two_clients_saving_to_one_thread_both_land(kv_url: str, mem: Memkit) -> None:
    config = CheckpointConfig(keep_last=None)
    async with Memkit(kv_url, embedder="hashing", layer_urls={"long_term": "memory://"}) as other:
        # memory:// is one store per client: there the "two clients" share it
        backend = mem.short_term.backend if kv_url == "memory://" else other.short_term.backend
        clients = [Checkpoints(mem.short_term.backend, config), Checkpoints(backend, config)]
        saved: list[str] = []

        async def saver(client: Checkpoints, name: str) -> None:
            for n in range(8):
                saved.append(await client.save("shared", {"by": name, "n": n}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(saver, clients[0], "one")
            tg.start_soon(saver, clients[1], "two")
        infos = await clients[1].list("shared")
    assert sorted(i.id for i in infos) == sorted(saved) and len(saved) == 16
    newest_first = [i.id for i in infos]
    assert [i.parent_id for i in infos] == [*newest_first[1:], None]  # one chain, nothing lost
    assert {(await clients[0].load("shared", i))["n"] for i in saved} == set(range(8))


async def test_a_crash_between_blob_and_index_leaves_the_previous_checkpoint(
    cp: Checkpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = await cp.save("t", {"turn": 1})

    async def crash(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the process died here")

    with monkeypatch.context() as patch:
        patch.setattr(layer_module, "update_kv", crash)
        with pytest.raises(RuntimeError, match="died"):
            await cp.save("t", {"turn": 2})
    assert len(await _blob_keys(cp)) == 2  # the orphan blob is there...
    assert [i.id for i in await cp.list("t")] == [before]  # ...and nothing lists it
    assert await cp.load("t") == {"turn": 1}
    after = await cp.save("t", {"turn": 2})
    assert (await cp.list("t"))[0].parent_id == before  # the orphan is nobody's parent
    assert await cp.prune("t", keep_last=5) == 0
    assert len(await _blob_keys(cp)) == 3  # too young to be judged an orphan: a save may be on its way
    sweeper = Checkpoints(cp.backend, CheckpointConfig(orphan_grace_s=0))
    assert await sweeper.prune("t", keep_last=5) == 0
    assert len(await _blob_keys(cp)) == 2
    assert [i.id for i in await cp.list("t")] == [after, before]
    assert await cp.load("t", before) == {"turn": 1}


async def test_a_crash_after_the_index_write_leaves_the_new_checkpoint(
    mem: Memkit, monkeypatch: pytest.MonkeyPatch
) -> None:
    cp = Checkpoints(mem.short_term.backend, CheckpointConfig(keep_last=1, orphan_grace_s=0))
    await cp.save("t", 1)

    async def crash(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the process died before deleting what retention dropped")

    with monkeypatch.context() as patch:
        patch.setattr(Checkpoints, "_forget", crash)
        with pytest.raises(RuntimeError):
            await cp.save("t", 2)
    assert await cp.load("t") == 2 and len(await cp.list("t")) == 1
    assert len(await _blob_keys(cp)) == 2
    await cp.prune("t", keep_last=1)
    assert len(await _blob_keys(cp)) == 1


async def test_an_agent_resumes_its_session_and_task(mem: Memkit, cp: Checkpoints) -> None:
    session = mem.short_term.session("chat", user_id="ada")
    task = mem.working.task("trip", user_id="ada")
    await session.add({"role": "system", "content": "You are a travel agent."})
    await session.add({"role": "user", "content": "Find me a hotel in Lisbon."})
    call = {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"city": "Lisbon"}'}}
    await session.add({"role": "assistant", "content": "", "tool_calls": [call]})
    await session.add({"role": "tool", "tool_call_id": "call_1", "content": "Hotel Avenida, 120 EUR"})
    await session.add({"role": "assistant", "content": "Hotel Avenida costs 120 EUR a night."})
    await task.set("city", "Lisbon", importance=0.9)
    await task.set("plan", Plan(steps=["hotel", "flight"]))
    agent = await cp.capture(session=session, task=task, state=Progress(found=["Avenida"], page=2), turn=3)
    saved_id = await cp.save("run-1", agent, user_id="ada")
    messages, items = await session.to_messages(), await task.items()

    await session.add({"role": "user", "content": "Actually, Porto."})  # the run goes on, then crashes
    await task.set("city", "Porto")
    loaded = await cp.load("run-1", user_id="ada")
    assert isinstance(loaded, AgentState) and loaded.turn == 3
    assert loaded.session == agent.session and loaded.working == agent.working
    assert msgspec.convert(loaded.state, Progress) == Progress(found=["Avenida"], page=2)
    await cp.resume(loaded, session=session, task=task)
    assert await session.to_messages() == messages
    assert await task.items() == items
    assert (await cp.list("run-1", user_id="ada"))[0].id == saved_id


async def test_encrypted_json_checkpoints_round_trip(mem: Memkit) -> None:
    config = CheckpointConfig(serializer="json", encryption_key=bytes(range(32)), min_compress_bytes=0)
    cp = Checkpoints(mem.short_term.backend, config)
    await cp.save("t", {"secret": "the user's passport number", "n": list(range(500))})
    assert (await cp.load("t"))["secret"] == "the user's passport number"
    info = (await cp.list("t"))[0]
    assert info.encrypted and info.serializer == "json" and info.compression in ("zstd", "zlib")
    stored = (await cp.backend.kv_scan(NAMESPACE, prefix="", limit=10)).items
    assert all(b"passport" not in value for _, value in stored)
    with pytest.raises(SerializationError, match="does not decrypt"):
        await Checkpoints(cp.backend, CheckpointConfig(encryption_key=b"\x01" * 32)).load("t")


async def test_bad_inputs_are_refused_saying_what(cp: Checkpoints) -> None:
    with pytest.raises(ValidationError, match="object"):
        await cp.save("t", {"handle": object()})
    with pytest.raises(ValidationError, match="encode"):
        await cp.save("t", lambda: None)
    for bad in ("", "a\x00b", 42, None, "x" * 513, "\ud800"):
        with pytest.raises(ScopeError, match="thread_id"):
            await cp.save(bad, 1)  # type: ignore[arg-type]
    with pytest.raises(ScopeError, match="user_id"):
        await cp.list("t", user_id="")
    with pytest.raises(ScopeError, match="agent_id"):
        await cp.load("t", agent_id="a\x00")
    with pytest.raises(ValidationError, match="metadata"):
        await cp.save("t", 1, metadata={"bad": float("nan")})
    with pytest.raises(ValidationError, match="checkpoint_id"):
        await cp.load("t", 7)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="keep_last"):
        await cp.prune("t", keep_last=-1)
    with pytest.raises(ValidationError, match="limit"):
        await Checkpoints(cp.backend, CheckpointConfig(max_bytes=100)).save("t", "x" * 200)
    assert await _blob_keys(cp) == [] and await cp.list("t") == []  # nothing refused was written
    await cp.save("t", Plan(steps=["a"]))
    with pytest.raises(SerializationError, match="does not hold"):
        await cp.load("t", type=Progress)


async def test_resume_refuses_layers_the_checkpoint_did_not_capture(mem: Memkit, cp: Checkpoints) -> None:
    session = mem.short_term.session("chat")
    task = mem.working.task("trip")
    with pytest.raises(ValidationError, match="no short-term session"):
        await cp.resume(AgentState(working=[]), session=session)
    with pytest.raises(ValidationError, match="no working-memory task"):
        await cp.resume(AgentState(session=None), task=task)
    with pytest.raises(ValidationError, match="AgentState"):
        await cp.resume({"session": None}, session=session)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="ShortTermSession"):
        await cp.capture(session=task)  # type: ignore[arg-type]


async def test_a_delete_during_a_save_never_leaves_a_listed_checkpoint_without_its_data(cp: Checkpoints) -> None:
    await cp.save("t", {"turn": 0})
    backend = cp.backend
    real = backend.kv_get
    index_reads = 0

    async def slow_index(namespace: str, key: str, **kwargs: Any) -> bytes | None:
        nonlocal index_reads
        found = await real(namespace, key, **kwargs)
        if key.endswith("||index"):
            index_reads += 1
            if index_reads == 1:  # the save's read, after its blob is written: the delete runs meanwhile
                await anyio.sleep(0.1)
        return found

    backend.kv_get = slow_index  # type: ignore[method-assign]
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(cp.save, "t", {"turn": 1})
            await anyio.sleep(0.03)
            group.start_soon(cp.delete, "t")
    finally:
        backend.kv_get = real  # type: ignore[method-assign]
    for info in await cp.list("t"):  # whatever is listed loads
        assert await cp.load("t", info.id) in ({"turn": 0}, {"turn": 1})


async def test_forty_saves_to_one_thread_at_once_from_two_clients_all_land(kv_url: str) -> None:
    if kv_url == "memory://":
        pytest.skip("memory:// is one process's store")
    clients = [
        Checkpoints(backend, CheckpointConfig(keep_last=None)) for backend in [await _open(kv_url) for _ in range(2)]
    ]
    try:
        async with anyio.create_task_group() as group:
            for n in range(40):
                group.start_soon(clients[n % 2].save, "busy", {"n": n})
        assert len(await clients[0].list("busy")) == 40
    finally:
        for client in clients:
            await client.backend.aclose()


async def _open(url: str) -> Any:
    from memkit import open_backend

    backend = open_backend(url)
    await backend.open()
    return backend


async def test_a_damaged_index_is_corrupt_data_not_a_value_error(cp: Checkpoints) -> None:
    await cp.save("t", {"turn": 0})
    index_key = next(k for k, _ in (await cp.backend.kv_scan(NAMESPACE, limit=100)).items if k.endswith("||index"))
    index = msgspec.msgpack.decode(await cp.backend.kv_get(NAMESPACE, index_key) or b"")
    index["entries"][0]["created_at"] = 1e300  # decodes, but is no time
    await cp.backend.kv_set(NAMESPACE, index_key, msgspec.msgpack.encode(index))
    with pytest.raises(CorruptDataError, match=r"damaged.*delete\(\) the thread"):
        await cp.list("t")


async def test_delete_starts_a_thread_with_an_unreadable_index_again(cp: Checkpoints) -> None:
    """What the error says to do: delete() raised the same error, and only forget_user cleared the thread."""
    await cp.save("t", {"turn": 0})
    await cp.save("t", {"turn": 1})
    index_key = next(k for k, _ in (await cp.backend.kv_scan(NAMESPACE, limit=100)).items if k.endswith("||index"))
    await cp.backend.kv_set(NAMESPACE, index_key, b"\xc1 not msgpack")
    with pytest.raises(CorruptDataError, match="cannot be read"):
        await cp.load("t")
    assert await cp.delete("t") == 2  # both blobs, by the thread's prefix
    assert (await cp.backend.kv_scan(NAMESPACE, limit=100)).items == [(index_key, mock.ANY)]  # the empty index
    await cp.save("t", {"turn": 2})
    assert (await cp.load("t")) == {"turn": 2} and len(await cp.list("t")) == 1


async def test_no_save_lands_between_a_damaged_threads_blobs_going_and_its_index(
    cp: Checkpoints, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    """The blobs go while the index is still unreadable, so a save can only fail: after the index was reset, a
    save listed in it had its blob deleted ("listed but its data is gone")."""
    await cp.save("t", {"turn": 0})
    index_key = next(k for k, _ in (await cp.backend.kv_scan(NAMESPACE, limit=100)).items if k.endswith("||index"))
    await cp.backend.kv_set(NAMESPACE, index_key, b"\xc1 not msgpack")
    delete_prefix = cp.backend.kv_delete_prefix

    async def a_save_meanwhile(namespace: str, prefix: str = "") -> int:
        with pytest.raises(CorruptDataError):
            await cp.save("t", {"turn": 1})
        return await delete_prefix(namespace, prefix)

    monkeypatch.setattr(cp.backend, "kv_delete_prefix", a_save_meanwhile)
    assert await cp.delete("t") == 1
    monkeypatch.undo()
    await cp.save("t", {"turn": 2})
    assert await cp.load("t") == {"turn": 2}
