"""A memory's content is stored once: in its record's text, which its body points to (on every backend)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import pytest

from memkit import Memkit
from memkit._time import utcnow
from memkit.backend import Record, Scope
from memkit.embedders import HashingEmbedder
from memkit.errors import CorruptDataError
from memkit.layers.longterm._codec import to_record
from memkit.layers.longterm._records import Memory

pytestmark = pytest.mark.anyio


@pytest.fixture
async def mem(store_url: str) -> AsyncIterator[Memkit]:
    async with Memkit(store_url, embedder=HashingEmbedder(64)) as client:
        yield client


async def _record(mem: Memkit, memory_id: str) -> Record:
    [record] = await mem.backend.get(mem.long_term.config.collection, [memory_id])
    return record


async def test_content_is_kept_in_the_text_alone_and_read_back(mem: Memkit) -> None:
    lt = mem.long_term
    plain = await lt.store("Ada prefers window seats on long flights", user_id="ada")
    told = await lt.store("and aisle seats on short ones", user_id="ada", context="Ada on seats")
    assert plain.memory is not None and told.memory is not None
    record = await _record(mem, plain.memory.id)
    assert b"window seats" not in record.body and record.text == "Ada prefers window seats on long flights"
    assert b'"content"' not in record.body  # a memkit from before refuses the body, rather than show ""
    with_context = await _record(mem, told.memory.id)
    assert b"aisle seats on short ones" in with_context.body  # the text is context and content: kept
    assert (await lt.get(plain.memory.id, user_id="ada")).content == "Ada prefers window seats on long flights"
    assert (await lt.get(told.memory.id, user_id="ada")).content == "and aisle seats on short ones"
    hits = await lt.recall("window seats", user_id="ada")
    assert hits[0].memory.content == "Ada prefers window seats on long flights"
    merged = await lt.store("Ada prefers window seats on long flights!", user_id="ada")  # an exact duplicate
    assert merged.status != "stored"
    assert [m.content for m in (await lt.list(user_id="ada")).memories].count(
        "Ada prefers window seats on long flights"
    ) == 1


async def test_a_body_written_with_its_content_reads_as_before(mem: Memkit) -> None:
    """Stores written before keep the content in the body (and no mark): read unchanged."""
    now = utcnow()
    memory = Memory(id="legacy-1", scope=Scope(user_id="ada"), kind="fact", content="a note from an older memkit",
                    created_at=now, updated_at=now)  # fmt: skip
    record = to_record(memory, (await HashingEmbedder(64).embed([memory.content]))[0])
    legacy = msgspec.json.encode(memory)[:-1] + b',"_w":"0123456789abcdef"}'
    await mem.backend.upsert(mem.long_term.config.collection, [msgspec.structs.replace(record, body=legacy)])
    assert (await mem.long_term.get("legacy-1", user_id="ada")).content == "a note from an older memkit"


async def test_a_body_pointing_at_a_missing_text_is_reported_not_guessed(mem: Memkit) -> None:
    stored = await mem.long_term.store("Ada's daughter is called Lina", user_id="ada")
    assert stored.memory is not None
    record = await _record(mem, stored.memory.id)
    await mem.backend.upsert(mem.long_term.config.collection, [msgspec.structs.replace(record, text=None)])
    with pytest.raises(CorruptDataError, match="content in its text"):
        await mem.long_term.get(stored.memory.id, user_id="ada")


async def test_id_and_scope_are_kept_by_the_record_alone_and_read_back(mem: Memkit) -> None:
    """The body leaves out the id and scope its record holds (~70 bytes a memory); decoding puts them back,
    on every backend, for a memory with its content in the text and for one with context."""
    lt = mem.long_term
    plain = await lt.store("Ada's flight leaves at nine", user_id="ada", agent_id="planner")
    told = await lt.store("from gate 12", user_id="ada", context="Ada's flight")
    for stored in (plain, told):
        assert stored.memory is not None
        record = await _record(mem, stored.memory.id)
        assert stored.memory.id.encode() not in record.body and b'"scope"' not in record.body
        got = await lt.get(stored.memory.id, user_id="ada")
        assert (got.id, got.scope, got.content) == (stored.memory.id, stored.memory.scope, stored.memory.content)
    assert (await lt.get(plain.memory.id, user_id="ada")).scope == Scope(user_id="ada", agent_id="planner")  # type: ignore[union-attr]


async def test_a_body_with_its_id_and_scope_reads_as_before(mem: Memkit) -> None:
    """Bodies written before ids and scopes were left out (content in the text, mark ``t``) read unchanged."""
    now = utcnow()
    memory = Memory(id="older-1", scope=Scope(user_id="ada"), kind="fact", content="a note kept in its text",
                    created_at=now, updated_at=now)  # fmt: skip
    record = to_record(memory, (await HashingEmbedder(64).embed([memory.content]))[0])
    older = msgspec.json.encode(msgspec.structs.replace(memory, content="")).replace(b'"content":"",', b"", 1)
    older = older[:-1] + b',"_w":"t0123456789abcdef"}'
    await mem.backend.upsert(mem.long_term.config.collection, [msgspec.structs.replace(record, body=older)])
    got = await mem.long_term.get("older-1", user_id="ada")
    assert (got.id, got.scope, got.content) == ("older-1", Scope(user_id="ada"), "a note kept in its text")
