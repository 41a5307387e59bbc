"""Short-term memory as an agent loop uses it: messages in (OpenAI or Anthropic shape), messages out."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from memkit import Memkit
from memkit.errors import ConfigurationError, ContentError, CorruptDataError, SummarizerError
from memkit.layers.shortterm import ExtractiveSummarizer, Message, ShortTermConfig, rendered_tokens
from memkit.layers.shortterm._state import SESSION_NAMESPACE
from memkit.tokens import EstimateTokenizer

pytestmark = pytest.mark.anyio
TOKENS = EstimateTokenizer()


def count(messages: list[dict[str, Any]]) -> int:
    return rendered_tokens(messages, TOKENS)


def text_of(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") + json.dumps(m.get("tool_calls") or "") for m in messages)


@pytest.fixture
async def mem() -> AsyncIterator[Memkit]:
    config = ShortTermConfig(max_tokens=600, keep_last=4, tokenizer="estimate")
    async with Memkit("memory://", embedder="hashing", short_term=config) as mem:
        yield mem


def weather_exchange(i: int) -> list[dict[str, Any]]:
    """An OpenAI-shape tool exchange with two parallel calls."""
    calls = [
        {"id": f"c{i}{x}", "type": "function", "function": {"name": "weather", "arguments": json.dumps({"city": city})}}
        for x, city in (("a", "Oslo"), ("b", "Rome"))
    ]
    return [
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": f"c{i}a", "content": f"Oslo: {i} degrees, rain"},
        {"role": "tool", "tool_call_id": f"c{i}b", "content": f"Rome: {20 + i} degrees, sun"},
    ]


async def test_messages_come_back_in_order_with_system_pinned(mem: Memkit) -> None:
    session = mem.short_term.session("chat", user_id="ada")
    await session.add({"role": "system", "content": "You are a travel agent."})
    await session.add({"role": "user", "content": "Find me a flight to Lisbon."})
    await session.add_many(weather_exchange(1))
    out = await session.to_messages()
    assert [m["role"] for m in out] == ["system", "user", "assistant", "tool", "tool"]
    assert out[2]["tool_calls"][1]["id"] == "c1b" and out[4]["tool_call_id"] == "c1b"


async def test_anthropic_shape_in_and_out(mem: Memkit) -> None:
    session = mem.short_term.session("chat", user_id="ada")
    await session.add({"role": "user", "content": [{"type": "text", "text": "Weather in Oslo and Rome?"}]})
    await session.add({"role": "assistant", "content": [
        {"type": "text", "text": "Checking both."},
        {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}},
        {"type": "tool_use", "id": "t2", "name": "weather", "input": {"city": "Rome"}}]})  # fmt: skip
    await session.add({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "4 degrees"},
        {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "24 degrees"}]},
        {"type": "text", "text": "Thanks, and tomorrow?"}]})  # fmt: skip
    openai = await session.to_messages("openai")
    assert [m["role"] for m in openai] == ["user", "assistant", "tool", "tool", "user"]
    assert json.loads(openai[1]["tool_calls"][0]["function"]["arguments"]) == {"city": "Oslo"}
    anthropic = await session.to_messages(format="anthropic")
    assert anthropic.system == ""
    assert [m["role"] for m in anthropic] == ["user", "assistant", "user"]
    assert [b["type"] for b in anthropic[2]["content"]] == ["tool_result", "tool_result", "text"]
    assert anthropic[1]["content"][1] == {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}}


async def test_the_rendered_session_always_fits_the_budget(mem: Memkit) -> None:
    session = mem.short_term.session("long", user_id="ada")
    await session.add({"role": "system", "content": "Be brief. " * 30})
    for i in range(40):
        await session.add({"role": "user", "content": f"Question {i}: what about option {i}? " * 3})
        await session.add_many(weather_exchange(i))
        assert count(await session.to_messages()) <= 600
    await session.wait_idle()
    assert await session.summary()  # it folded


async def test_a_message_larger_than_the_budget_is_cut_with_a_marker_and_kept_whole(mem: Memkit) -> None:
    session = mem.short_term.session("huge", user_id="ada")
    huge = "The log line says the disk is full. " * 400
    await session.add({"role": "user", "content": huge})
    out = await session.to_messages()
    assert count(out) <= 600
    assert "tokens cut by memkit to fit the budget" in out[-1]["content"]
    assert out[-1]["content"].startswith("The log line")
    assert (await session.history())[-1].content == huge  # only the rendering is cut


async def test_older_turns_that_do_not_fit_are_named_not_dropped() -> None:
    stuck = ShortTermConfig(max_tokens=600, keep_last=40, tokenizer="estimate")  # nothing may fold
    async with Memkit("memory://", embedder="hashing", short_term=stuck) as mem:
        session = mem.short_term.session("s")
        for i in range(39):
            await session.add({"role": "user", "content": f"Point number {i} is about the quarterly report."})
        out = await session.to_messages()
        assert count(out) <= 600
        assert out[0]["role"] == "system" and "earlier messages are not shown" in out[0]["content"]
        assert out[-1]["content"].startswith("Point number 38")
        assert len(await session.history()) == 39


def assert_tool_exchanges_whole(messages: list[dict[str, Any]]) -> None:
    """Every tool result right after its call's assistant message (or a sibling result), every call answered."""
    open_calls: set[str] = set()
    for m in messages:
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_calls, f"a result without its call before it: {m}"
            open_calls.discard(m["tool_call_id"])
            continue
        assert not open_calls, f"calls {open_calls} were separated from their results"
        open_calls = {call["id"] for call in m.get("tool_calls") or ()}
    assert not open_calls


async def test_a_tool_exchange_is_never_split_by_a_fold(mem: Memkit) -> None:
    session = mem.short_term.session("tools")
    for i in range(25):
        await session.add({"role": "user", "content": f"Check the weather, round {i}."})
        await session.add_many(weather_exchange(i))
        await session.compact()
    out = await session.to_messages()
    assert_tool_exchanges_whole(out)
    assert "Tool weather" in await session.summary()


async def test_an_open_tool_exchange_is_never_folded() -> None:
    config = ShortTermConfig(max_tokens=300, keep_last=1, compact_at=0.5, fold_to=0.3, tokenizer="estimate")
    async with Memkit("memory://", embedder="hashing", short_term=config) as mem:
        session = mem.short_term.session("open")
        for i in range(10):
            await session.add({"role": "user", "content": f"Tell me about item {i} in the catalogue please."})
        await session.add(weather_exchange(0)[0])  # the calls, no results yet
        await session.compact()
        history = await session.history()
        assert [m.role for m in history] == ["assistant"] and history[0].tool_calls  # the rest was folded
        assert "item 9" in await session.summary()
        await session.add_many(weather_exchange(0)[1:])
        assert [m.role for m in (await session.history())[-3:]] == ["assistant", "tool", "tool"]


class GatedSummarizer:
    """A summariser that waits until the test lets it finish (to see what add does meanwhile)."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.release = anyio.Event()
        self.calls = 0

    async def summarize(self, previous: str, messages: Any, *, max_tokens: int, tokenizer: Any) -> str:
        self.calls += 1
        self.started.set()
        await self.release.wait()
        return (previous + "\n" if previous else "") + f"- folded {len(messages)} messages"


async def test_add_never_waits_for_a_fold_and_what_arrives_meanwhile_is_kept() -> None:
    gate = GatedSummarizer()
    config = ShortTermConfig(max_tokens=400, keep_last=2, summarizer=gate, tokenizer="estimate")
    async with Memkit("memory://", embedder="hashing", short_term=config) as mem:
        session = mem.short_term.session("bg")
        i = 0
        while not gate.started.is_set():
            await session.add({"role": "user", "content": f"Message {i}: some words to fill the budget up."})
            i += 1
            await anyio.lowlevel.checkpoint()
        with anyio.fail_after(1):  # the fold is blocked; adds still return
            for j in range(5):
                await session.add({"role": "user", "content": f"Meanwhile {j}"})
        gate.release.set()
        await session.wait_idle()
        assert "folded" in await session.summary()
        contents = [m.content for m in await session.history()]
        assert contents[-5:] == [f"Meanwhile {j}" for j in range(5)]
        seqs = [m.seq for m in await session.history()]
        assert seqs == sorted(seqs)


class BrokenSummarizer:
    async def summarize(self, previous: str, messages: Any, *, max_tokens: int, tokenizer: Any) -> str:
        raise RuntimeError("the model is down")


async def test_a_failing_summarizer_loses_nothing_and_reports(caplog: pytest.LogCaptureFixture) -> None:
    errors: list[SummarizerError] = []
    config = ShortTermConfig(max_tokens=300, keep_last=2, summarizer=BrokenSummarizer(), tokenizer="estimate",
                             on_error=errors.append)  # fmt: skip
    async with Memkit("memory://", embedder="hashing", short_term=config) as mem:
        session = mem.short_term.session("broken")
        with caplog.at_level(logging.WARNING, logger="memkit"):
            for i in range(30):
                await session.add({"role": "user", "content": f"Fact {i}: the answer is {i * 7}."})
                await session.wait_idle()
        assert [m.content for m in await session.history()] == [f"Fact {i}: the answer is {i * 7}." for i in range(30)]
        assert errors and "the model is down" in str(errors[0])
        assert "folding short-term session" in caplog.text
        with pytest.raises(SummarizerError, match="the model is down"):
            await session.compact()
        assert count(await session.to_messages()) <= 300


async def test_the_session_continues_in_another_process(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    async with Memkit(url, embedder="hashing") as first:
        await first.short_term.session("s1", user_id="ada").add({"role": "user", "content": "Remember my seat: 14C."})
    async with Memkit(url, embedder="hashing") as second:
        session = second.short_term.session("s1", user_id="ada")
        await session.add({"role": "assistant", "content": "Noted, 14C."})
        assert [m["content"] for m in await session.to_messages()] == ["Remember my seat: 14C.", "Noted, 14C."]
        assert await second.short_term.session("s1", user_id="bob").to_messages() == []  # another user's session


async def test_two_writers_on_one_session_lose_nothing(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    config = ShortTermConfig(max_tokens=100_000, tokenizer="estimate")
    async with (
        Memkit(url, embedder="hashing", short_term=config) as a,
        Memkit(url, embedder="hashing", short_term=config) as b,
    ):

        async def write(mem: Memkit, who: str) -> None:
            session = mem.short_term.session("shared")
            for i in range(20):
                await session.add({"role": "user", "content": f"{who} {i}"})

        async with anyio.create_task_group() as tg:
            tg.start_soon(write, a, "a")
            tg.start_soon(write, b, "b")
        contents = [m.content for m in await a.short_term.session("shared").history()]
        assert sorted(contents) == sorted([f"a {i}" for i in range(20)] + [f"b {i}" for i in range(20)])
        assert [c for c in contents if c.startswith("a")] == [f"a {i}" for i in range(20)]  # each writer's order


async def test_bad_messages_are_refused_and_nothing_is_written(mem: Memkit) -> None:
    session = mem.short_term.session("bad")
    for bad, match in [
        ({"role": "robot", "content": "hi"}, "role must be"),
        ({"role": "user", "content": 42}, "content must be"),
        ({"role": "tool", "content": "orphan"}, "tool_call_id"),
        ({"role": "user", "content": [{"type": "image", "source": {}}]}, "unsupported content block 'image'"),
        ({"role": "user", "content": ""}, "empty"),
        ({"role": "user", "content": "x" * 1_000_001}, "max_message_chars"),
        ({"role": "user", "content": "\ud800"}, "cannot be stored"),
        ("just a string", "must be a dict"),
    ]:
        with pytest.raises(ContentError, match=match):
            await session.add_many([{"role": "user", "content": "fine"}, bad])  # type: ignore[list-item]
    assert await session.history() == []


async def test_a_corrupt_session_is_a_clear_error(mem: Memkit) -> None:
    session = mem.short_term.session("corrupt", user_id="ada")
    await session.add({"role": "user", "content": "hello"})
    key = session._key
    await mem.short_term.backend.kv_set(SESSION_NAMESPACE, key, b"\xc1 not msgpack")
    with pytest.raises(CorruptDataError, match="clear"):
        await session.to_messages()
    await session.clear()
    assert await session.to_messages() == []


def test_bad_settings_fail_when_built() -> None:
    for kwargs, match in [
        ({"max_tokens": 10}, "max_tokens"),
        ({"keep_last": 0}, "keep_last"),
        ({"compact_at": 1.5}, "compact_at"),
        ({"fold_to": 0.9, "compact_at": 0.8}, "fold_to"),
        ({"summarizer": "gpt"}, "summarizer"),
        ({"tokenizer": "gpt2"}, "tokenizer"),
    ]:
        with pytest.raises(ConfigurationError, match=match):
            ShortTermConfig(**kwargs)


async def test_a_message_struct_can_be_added_directly(mem: Memkit) -> None:
    session = mem.short_term.session("structs")
    await session.add(Message(role="user", content="from a Message"))
    assert (await session.history())[0].content == "from a Message"
    assert isinstance(mem.short_term.summarizer, ExtractiveSummarizer)


async def test_a_snapshot_round_trips_through_msgspec_into_another_session(mem: Memkit) -> None:
    import msgspec

    from memkit import SessionSnapshot

    source = mem.short_term.session("source", user_id="ada")
    await source.add({"role": "system", "content": "Be terse."})
    for i in range(30):
        await source.add({"role": "user", "content": f"Fact {i}: the locker code is {1000 + i}."})
        await source.add_many(weather_exchange(i))
    await source.wait_idle()
    await source.compact()
    snapshot = await source.snapshot()
    assert snapshot.summary and snapshot.folded > 0
    saved = msgspec.json.encode(snapshot)  # what a checkpoint keeps
    target = mem.short_term.session("target", user_id="ada")
    await target.add({"role": "user", "content": "replaced by the restore"})
    await target.restore(msgspec.json.decode(saved, type=SessionSnapshot))
    assert await target.to_messages() == await source.to_messages()
    assert await target.summary() == await source.summary()
    with pytest.raises(ContentError):
        await target.restore(SessionSnapshot(messages=[Message(role="tool", content="no call id")]))
    assert await target.to_messages() == await source.to_messages()  # a bad snapshot changes nothing
