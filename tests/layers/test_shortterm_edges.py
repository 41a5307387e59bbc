"""Short-term memory against what an adversarial review threw at it (each test failed before its fix)."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memkit import Memkit
from memkit.errors import ConfigurationError, ContentError, ValidationError
from memkit.layers.shortterm import Message, SessionSnapshot, ShortTermConfig, ToolCall, rendered_tokens
from memkit.tokens import EstimateTokenizer

from .test_shortterm import GatedSummarizer, assert_tool_exchanges_whole

pytestmark = pytest.mark.anyio
TOKENS = EstimateTokenizer()


def config(**overrides: Any) -> ShortTermConfig:
    return ShortTermConfig(**{"max_tokens": 256, "keep_last": 2, "tokenizer": "estimate", **overrides})


@pytest.fixture
async def mem() -> AsyncIterator[Memkit]:
    async with Memkit("memory://", embedder="hashing", short_term=config()) as mem:
        yield mem


def exchange(ids: list[str], arguments: str = '{"q": "x"}', result: str = "ok") -> list[dict[str, Any]]:
    calls = [{"id": i, "type": "function", "function": {"name": "search", "arguments": arguments}} for i in ids]
    return [{"role": "assistant", "content": None, "tool_calls": calls},
            *({"role": "tool", "tool_call_id": i, "content": result} for i in ids)]  # fmt: skip


async def test_a_fold_from_before_clear_or_restore_never_lands_on_the_new_session() -> None:
    for reset in ("clear", "restore"):
        gate = GatedSummarizer()
        async with Memkit("memory://", embedder="hashing", short_term=config(summarizer=gate)) as mem:
            session = mem.short_term.session("s")
            for i in range(12):
                await session.add({"role": "user", "content": f"OLD secret: my PIN is 4{i}21. " * 2})
            with anyio.fail_after(5):
                await gate.started.wait()
            await (session.clear() if reset == "clear" else session.restore(SessionSnapshot()))
            for i in range(12):
                await session.add({"role": "user", "content": f"NEW conversation message number {i}."})
            gate.release.set()
            await session.wait_idle()
            state = await session.snapshot()
            assert "OLD" not in state.summary and not any("OLD" in m.content for m in state.messages), reset
            assert state.folded + len(state.messages) == 12, reset  # every NEW message: kept or folded


async def test_a_message_struct_with_wrong_fields_is_refused_and_the_session_stays_readable(mem: Memkit) -> None:
    session = mem.short_term.session("structs")
    for bad in [Message(role="user", content="hi", name=5),  # type: ignore[arg-type]
                Message(role="tool", content="r", tool_call_id=123),  # type: ignore[arg-type]
                Message(role="assistant", tool_calls=(ToolCall(id=1, name="f"),)),  # type: ignore[arg-type]
                Message(role="user", content="x", tool_calls=None)]:  # type: ignore[arg-type]  # fmt: skip
        with pytest.raises(ContentError):
            await session.add(bad)
    await session.add(Message(role="user", content="word " * 3000, tokens=1))  # its count is not trusted
    assert rendered_tokens(await session.to_messages(), TOKENS) <= 256
    assert len(await session.history()) == 1


@pytest.mark.parametrize(
    "turn",
    [
        exchange(["c1"], arguments=json.dumps({"q": "word " * 3000})),
        exchange([f"c{i}" for i in range(50)]),
        exchange(["c1", "c2"], arguments=json.dumps({"q": "\u00e9\u4e16\U0001f600" * 40})),
        exchange(["c1"], result="x" * 20_000),
    ],
    ids=["huge arguments", "50 parallel calls", "unicode arguments", "huge result"],
)
async def test_a_wide_or_heavy_tool_exchange_still_fits_the_budget(mem: Memkit, turn: list[dict[str, Any]]) -> None:
    session = mem.short_term.session("wide")
    await session.add({"role": "user", "content": "search for me"})
    await session.add_many(turn)
    out = await session.to_messages()
    assert rendered_tokens(out, TOKENS) <= 256
    assert_tool_exchanges_whole(out)
    anthropic = await session.to_messages(format="anthropic")
    assert anthropic[0]["role"] == "user"


message_strategy = st.one_of(
    st.builds(lambda t: [{"role": "user", "content": t}], st.text(min_size=1, max_size=3000).filter(str.strip)),
    st.builds(lambda t: [{"role": "system", "content": t}], st.text(min_size=1, max_size=400).filter(str.strip)),
    st.builds(lambda n, a, r: exchange([f"id{n}-{i}" for i in range(n)], json.dumps({"q": a}), r or "ok"),
              st.integers(1, 12), st.text(max_size=2000), st.text(max_size=2000)),
)  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(message_strategy, min_size=1, max_size=12), budget=st.integers(256, 900))
def test_any_session_renders_within_its_budget_in_both_shapes(turns: list[list[dict[str, Any]]], budget: int) -> None:
    async def run() -> None:
        async with Memkit("memory://", embedder="hashing", short_term=config(max_tokens=budget)) as mem:
            session = mem.short_term.session("prop")
            for i, turn in enumerate(turns):  # ids made unique per turn
                await session.add_many([_unique(m, i) for m in turn])
            await session.wait_idle()
            out = await session.to_messages()
            assert rendered_tokens(out, TOKENS) <= budget
            assert_tool_exchanges_whole(out)
            anthropic = await session.to_messages(format="anthropic")
            roles = [m["role"] for m in anthropic]
            assert not roles or roles[0] == "user"
            assert all(a != b for a, b in itertools.pairwise(roles))

    anyio.run(run)


def _unique(message: dict[str, Any], turn: int) -> dict[str, Any]:
    if message["role"] == "tool":
        return {**message, "tool_call_id": f"t{turn}-{message['tool_call_id']}"}
    if message.get("tool_calls"):
        calls = [{**c, "id": f"t{turn}-{c['id']}"} for c in message["tool_calls"]]
        return {**message, "tool_calls": calls}
    return message


async def test_counts_made_by_another_tokenizer_are_redone(tmp_path: Path) -> None:
    class Words:
        name = "words"

        def count(self, text: str) -> int:
            return len(text.split())

    url = f"sqlite:///{tmp_path / 's.db'}"
    async with Memkit(url, embedder="hashing", short_term=config(max_tokens=1000, tokenizer=Words())) as mem:
        for i in range(20):
            await mem.short_term.session("s").add({"role": "user", "content": f"{i}: " + "abcdefghijklmnop," * 20})
    async with Memkit(url, embedder="hashing", short_term=config(max_tokens=1000)) as mem:
        assert rendered_tokens(await mem.short_term.session("s").to_messages(), TOKENS) <= 1000


async def test_small_talk_folds_instead_of_failing_forever(mem: Memkit) -> None:
    session = mem.short_term.session("chatter")
    for i in range(60):
        await session.add({"role": "user" if i % 2 else "assistant", "content": "ok cool, sounds good to me"})
        await session.wait_idle()
    assert len(await session.history()) < 30
    assert "nothing to keep" in await session.summary()


async def test_a_changed_preference_replaces_the_old_one_in_the_summary(mem: Memkit) -> None:
    session = mem.short_term.session("changes")
    await session.add({"role": "user", "content": "For the flight I prefer the aisle seat near the front."})
    await session.add({"role": "user", "content": "For the flight I prefer the window seat near the front."})
    for i in range(16):
        await session.add({"role": "assistant", "content": f"Noted, I am looking at the options for flight {i}."})
    await session.compact()
    summary = await session.summary()
    assert "window" in summary and "aisle" not in summary


async def test_tool_results_out_of_place_are_refused_and_nothing_is_written(mem: Memkit) -> None:
    session = mem.short_term.session("order")
    with pytest.raises(ContentError, match="answers no waiting call"):
        await session.add({"role": "tool", "tool_call_id": "nobody", "content": "orphan"})
    await session.add(exchange(["c1"])[0])
    with pytest.raises(ContentError, match="still wait"):
        await session.add({"role": "user", "content": "never mind"})
    with pytest.raises(ContentError, match="answers no waiting call"):
        await session.add_many([{"role": "tool", "tool_call_id": "c1", "content": "a"},
                                {"role": "tool", "tool_call_id": "c1", "content": "twice"}])  # fmt: skip
    assert [m.role for m in await session.history()] == ["assistant"]
    await session.add({"role": "system", "content": "a system note may come between"})
    await session.add({"role": "tool", "tool_call_id": "c1", "content": "answered"})
    assert [m.role for m in await session.history()] == ["system", "assistant", "tool"]


async def test_many_system_messages_are_cut_with_a_marker_not_dropped(mem: Memkit) -> None:
    session = mem.short_term.session("rules")
    for i in range(100):
        await session.add({"role": "system", "content": f"Rule {i}: be nice."})
    await session.add({"role": "user", "content": "hello"})
    out = await session.to_messages()
    assert rendered_tokens(out, TOKENS) <= 256
    system = "\n".join(m["content"] for m in out if m["role"] == "system")
    assert "Rule 0:" in system and "Rule 99:" in system and "cut by memkit" in system


async def test_two_processes_folding_one_session_lose_nothing_and_do_not_conflict(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'two.db'}"
    options = {"embedder": "hashing", "short_term": config(max_tokens=600)}
    async with Memkit(url, **options) as a, Memkit(url, **options) as b:  # type: ignore[arg-type]

        async def write(mem: Memkit, who: str) -> None:
            for i in range(15):
                await mem.short_term.session("busy").add({"role": "user", "content": f"{who} says {i} thing."})

        async with anyio.create_task_group() as tg:
            for n in range(4):
                tg.start_soon(write, a if n % 2 else b, f"w{n}")
        session = a.short_term.session("busy")
        await session.wait_idle()
        state = await session.snapshot()
        assert state.folded + len(state.messages) == 60


def test_settings_and_arguments_that_would_lose_data_are_refused() -> None:
    for kwargs in ({"ttl_s": 0}, {"ttl_s": -1}, {"ttl_s": float("nan")}, {"summary_timeout_s": 0},
                   {"tokenizer": EstimateTokenizer}, {"summarizer": GatedSummarizer}):  # fmt: skip
        with pytest.raises(ConfigurationError):
            ShortTermConfig(**kwargs)


async def test_odd_inputs_are_memkit_errors(mem: Memkit) -> None:
    session = mem.short_term.session("odd")
    for bad in [{"role": ["user"], "content": "x"}, {"role": "assistant", "tool_calls": 5},
                {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": object()}}]},
                {"role": "user", "content": "   "}, {"role": "user", "content": "x", "name": "Ada\n- injected"},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": "no"}]},
                ]:  # fmt: skip
        with pytest.raises(ContentError):
            await session.add(bad)  # type: ignore[arg-type]
    for bad_call in (session.add_many("not a list"), session.to_messages(format="xml"),  # type: ignore[arg-type]
                     session.restore({"messages": []})):  # type: ignore[arg-type]  # fmt: skip
        with pytest.raises(ValidationError):
            await bad_call
    with pytest.raises(ValidationError):
        await session.restore(SessionSnapshot(summary=5))  # type: ignore[arg-type]
    assert await session.history() == []


async def test_working_memory_refuses_values_and_ttls_that_would_be_lost(mem: Memkit) -> None:
    task = mem.working.task("t")
    deep: list[Any] = []
    for _ in range(3000):
        deep = [deep]
    for call in (task.set("k", 1, ttl_s=0), task.update("k", lambda v: 1, ttl_s=-1),
                 task.set("k", 1, ttl_s=True), task.set("deep", deep)):  # fmt: skip
        with pytest.raises(ValidationError):
            await call
    await task.set("a", "x" * 50)
    assert await task.to_context(max_tokens=5) == ""
