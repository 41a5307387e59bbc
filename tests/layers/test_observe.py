"""mem.observe(): a finished turn queued at once, written in the background (facts, corrections, the graph),
a bounded queue that waits or refuses but never drops, failures reported, read-after-write, and a drain on
close that a new process sees."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from memkit import ContentError, Memkit, NotOpenError, ObserveConfig, ValidationError, WriterBusyError
from memkit.extract import FactEvent, ObservedTurn

pytestmark = pytest.mark.anyio


def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}, {"role": "assistant", "content": "Noted."}]


async def _full_queue(mem: Memkit) -> anyio.Event:
    """With ``max_pending=1``: one turn held by the writer at the returned gate, one queued behind it."""
    gate = _gate(mem)
    await mem.observe(user_id="ada", messages=_user("I live in Lyon."))
    await anyio.sleep(0.01)  # the writer takes it and waits at the gate: the queue is empty again
    await mem.observe(user_id="ada", messages=_user("I work at Acme."))  # the queue is full
    return gate


async def _observe_or_note_refusal(mem: Memkit, refused: list[BaseException], session_id: str | None) -> None:
    try:
        await mem.observe(user_id="ada", session_id=session_id, messages=_user("I like jazz."))
    except NotOpenError as exc:
        refused.append(exc)


def _places_taken(mem: Memkit) -> int:
    observer = mem._observer
    assert observer is not None
    return observer._queued + observer._reserved


def _gate(mem: Memkit) -> anyio.Event:
    """Hold the writer before each turn until the returned event is set."""
    opened = anyio.Event()
    observer = mem._observer
    assert observer is not None
    write: Callable[[ObservedTurn], Awaitable[list[FactEvent]]] = observer._write

    async def gated(turn: ObservedTurn) -> list[FactEvent]:
        await opened.wait()
        return await write(turn)

    observer._write = gated
    return opened


async def test_observe_returns_before_the_writer_and_flush_waits_for_it() -> None:
    events: list[FactEvent] = []
    async with Memkit("memory://", embedder="hashing", observe=ObserveConfig(on_event=events.append)) as mem:
        gate = _gate(mem)
        await mem.observe(user_id="ada", session_id="s1", messages=_user("I am allergic to peanuts."))
        assert mem._observer is not None and mem._observer.pending == 1 and events == []
        session = await mem.short_term.session("s1", user_id="ada").to_messages()
        assert [m["content"] for m in session] == ["I am allergic to peanuts.", "Noted."]  # the session has it now
        gate.set()
        await mem.flush()
        assert any(e.action == "add" and "peanuts" in (e.memory.content if e.memory else "") for e in events)
        [hit] = await mem.long_term.recall("peanuts allergy", user_id="ada", k=1)
        assert "peanuts" in hit.memory.content


async def test_a_full_queue_waits_or_refuses_and_drops_nothing() -> None:
    async with Memkit("memory://", embedder="hashing", observe=ObserveConfig(max_pending=1)) as mem:
        gate = _gate(mem)
        await mem.observe(user_id="ada", messages=_user("I live in Lyon."))
        await anyio.sleep(0.01)  # the writer takes it and waits at the gate: the queue is empty again
        await mem.observe(user_id="ada", messages=_user("I work at Acme."))
        with pytest.raises(WriterBusyError, match="max_pending"):
            await mem.observe(user_id="ada", messages=_user("I like jazz."), wait=False)
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: mem.observe(user_id="ada", messages=_user("I like jazz.")))  # waits for room
            await anyio.sleep(0.05)
            gate.set()
        await mem.flush("ada")
        stored = {m.content for m in (await mem.long_term.list(user_id="ada")).memories}
        assert {"The user lives in Lyon.", "The user works at Acme.", "The user likes jazz."} <= stored


async def test_a_failing_turn_is_reported_and_the_writer_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    failures: list[tuple[ObservedTurn, Exception]] = []
    config = ObserveConfig(on_error=lambda turn, exc: failures.append((turn, exc)))
    async with Memkit("memory://", embedder="hashing", observe=config) as mem:
        observer = mem._observer
        assert observer is not None
        write = observer._write

        async def flaky(turn: ObservedTurn) -> list[FactEvent]:
            if "boom" in str(turn.messages[0]["content"]):
                raise RuntimeError("extractor exploded")
            return await write(turn)

        observer._write = flaky
        with caplog.at_level(logging.ERROR, logger="memkit"):
            await mem.observe(user_id="ada", messages=_user("boom"))
            await mem.observe(user_id="ada", messages=_user("I live in Lyon."))
            await mem.flush()
        assert [str(exc) for _, exc in failures] == ["extractor exploded"] and failures[0][0].user_id == "ada"
        assert "writing a turn of user 'ada' failed" in caplog.text
        assert [h.memory.content for h in await mem.long_term.recall("Lyon", user_id="ada", k=1)] == [
            "The user lives in Lyon."
        ]


async def test_a_correction_supersedes_and_context_reads_after_write() -> None:
    async with Memkit("memory://", embedder="hashing") as mem:
        await mem.observe(user_id="ada", messages=_user("I live in Paris and I'm allergic to peanuts."))
        await mem.observe(user_id="ada", messages=_user("Actually, I moved to Porto last month."))
        ctx = await mem.context(user_id="ada", query="Where do I live now?", wait_for_writes=True)
        assert "Porto" in ctx.text and "Paris" not in ctx.text
        history = await mem.long_term.recall("where the user lives", user_id="ada", include_superseded=True, k=10)
        assert any("Paris" in h.memory.content for h in history)
        assert "user lives in Porto" in await mem.graph.to_context("user", user_id="ada")


async def test_anthropic_shaped_blocks_reach_the_graph_too() -> None:
    """Content as a list of blocks gave facts, but only string content was read into the graph."""
    blocks = [{"role": "user", "content": [{"type": "text", "text": "I live in Paris."}]}]
    async with Memkit("memory://", embedder="hashing") as mem:
        await mem.observe(user_id="ada", messages=blocks)
        await mem.flush()
        assert "user lives in Paris" in await mem.graph.to_context("user", user_id="ada")


async def test_closing_drains_the_queue_for_the_next_process(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'agent.db'}"
    async with Memkit(url, embedder="hashing") as mem:
        for fact in ("I live in Lyon.", "My sister Bea works at Acme.", "I prefer tea to coffee."):
            await mem.observe(user_id="ada", messages=_user(fact))
    async with Memkit(url, embedder="hashing") as mem:  # no flush before closing: the close wrote them
        stored = {m.content for m in (await mem.long_term.list(user_id="ada")).memories}
    assert "The user lives in Lyon." in stored and any("Bea" in s for s in stored) and len(stored) >= 3


@pytest.mark.parametrize(
    "messages", ["hello", [], [{"content": "no role"}], {"role": "user", "content": "a dict, not a list"}]
)
async def test_bad_turns_are_refused(messages: Any) -> None:
    async with Memkit("memory://", embedder="hashing") as mem:
        with pytest.raises(ValidationError):
            await mem.observe(user_id="ada", messages=messages)
        assert mem._observer is not None and mem._observer.pending == 0


@pytest.mark.parametrize("session_id", [None, "s1"])
@pytest.mark.parametrize(
    "message",
    [
        {"role": "bogus", "content": "hi"},
        {"role": "user", "content": 5},
        {"role": "user", "content": "I live in \x00Paris."},
        {"role": "user", "content": "I live in Oslo. I love tea \ud800"},
        {"role": "user", "content": [{"type": "text", "text": "I love tea \udc00"}]},
    ],
)
async def test_a_bad_message_is_refused_with_or_without_a_session(message: Any, session_id: str | None) -> None:
    """Checked as a session would check it even when no session is given: such a turn was queued, then dropped
    by the writer without a word (a NUL reached the writer's recall as "query contains a NUL character")."""
    failures: list[Exception] = []
    config = ObserveConfig(on_error=lambda turn, exc: failures.append(exc))
    async with Memkit("memory://", embedder="hashing", observe=config) as mem:
        with pytest.raises(ContentError):
            await mem.observe(user_id="ada", session_id=session_id, messages=[message])
        assert mem._observer is not None and mem._observer.pending == 0
        assert await mem.short_term.session("s1", user_id="ada").to_messages() == []
        await mem.flush()
        assert failures == []


async def test_a_refused_turn_leaves_the_session_as_it_was() -> None:
    """``wait=False`` on a full queue refuses before the session is written, so retrying the turn, as the error
    says to, does not keep it twice."""
    async with Memkit("memory://", embedder="hashing", observe=ObserveConfig(max_pending=1)) as mem:
        gate = _gate(mem)
        await mem.observe(user_id="ada", session_id="s", messages=_user("I live in Lyon."))
        await anyio.sleep(0.01)  # the writer takes it and waits at the gate
        await mem.observe(user_id="ada", session_id="s", messages=_user("I work at Acme."))
        with pytest.raises(WriterBusyError, match="nothing was queued or written"):
            await mem.observe(user_id="ada", session_id="s", messages=_user("I like jazz."), wait=False)
        gate.set()
        await mem.observe(user_id="ada", session_id="s", messages=_user("I like jazz."))  # the retry
        contents = [m["content"] for m in await mem.short_term.session("s", user_id="ada").to_messages()]
        assert contents == ["I live in Lyon.", "Noted.", "I work at Acme.", "Noted.", "I like jazz.", "Noted."]


async def test_two_turns_racing_for_the_last_place_one_is_queued_one_refused_at_once() -> None:
    """``wait=False`` never waits: the place is taken before the session is written, so of two calls that both
    found one place free, the second is refused at once and its session is left as it was."""
    async with Memkit("memory://", embedder="hashing", observe=ObserveConfig(max_pending=1)) as mem:
        gate = _gate(mem)
        await mem.observe(user_id="ada", messages=_user("I live in Lyon."))
        await anyio.sleep(0.01)  # the writer holds it at the gate: one place free
        outcome: dict[str, str] = {}

        async def observe(name: str, text: str) -> None:
            try:
                with anyio.fail_after(1):
                    await mem.observe(user_id="ada", session_id=name, messages=_user(text), wait=False)
                outcome[name] = "queued"
            except WriterBusyError:
                outcome[name] = "refused"

        async with anyio.create_task_group() as group:
            group.start_soon(observe, "a", "I work at Acme.")
            group.start_soon(observe, "b", "I like jazz.")
        assert sorted(outcome.values()) == ["queued", "refused"]
        refused = next(name for name, result in outcome.items() if result == "refused")
        assert await mem.short_term.session(refused, user_id="ada").to_messages() == []
        gate.set()
        await mem.flush()
        assert mem._observer is not None and _places_taken(mem) == 0


async def test_a_turn_cancelled_while_waiting_for_room_gives_its_place_back() -> None:
    async with Memkit("memory://", embedder="hashing", observe=ObserveConfig(max_pending=1)) as mem:
        gate = await _full_queue(mem)
        with anyio.move_on_after(0.05):
            await mem.observe(user_id="ada", session_id="s", messages=_user("I like jazz."))
        assert await mem.short_term.session("s", user_id="ada").to_messages() == []  # not written
        gate.set()
        await mem.flush()
        assert mem._observer is not None and _places_taken(mem) == 0 and mem._observer.pending == 0
        await mem.observe(user_id="ada", messages=_user("I like jazz."), wait=False)  # room again


@pytest.mark.parametrize(
    "extra",
    [
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "Noted."}]},
        {"role": "user", "content": [{"type": "image", "source": {}}, {"type": "text", "text": "Look."}]},
        {"role": "assistant", "content": ""},
    ],
)
async def test_turns_a_session_would_refuse_are_still_observed_without_one(extra: dict[str, Any]) -> None:
    """The writer reads the text: blocks a session does not keep (thinking, images) do not stop it."""
    async with Memkit("memory://", embedder="hashing") as mem:
        await mem.observe(user_id="ada", messages=[{"role": "user", "content": "I live in Lyon."}, extra])
        await mem.flush()
        stored = {m.content for m in (await mem.long_term.list(user_id="ada")).memories}
        assert "The user lives in Lyon." in stored


async def test_a_turn_waiting_for_room_when_the_client_closes_is_refused_with_a_memkit_error(tmp_path: Path) -> None:
    """Closing drains the queue; a call still waiting for a place is then refused (it was anyio's
    ClosedResourceError after its session had been written), and its session is left as it was."""
    url = f"sqlite:///{tmp_path / 'agent.db'}"
    mem = await Memkit(url, embedder="hashing", observe=ObserveConfig(max_pending=1)).open()
    gate = await _full_queue(mem)
    outcome: list[BaseException] = []
    async with anyio.create_task_group() as group:
        group.start_soon(_observe_or_note_refusal, mem, outcome, "s")
        await anyio.sleep(0.01)
        group.start_soon(mem.aclose)
        await anyio.sleep(0.01)
        gate.set()
    assert len(outcome) == 1 and "closing" in str(outcome[0])
    async with Memkit(url, embedder="hashing") as again:
        assert await again.short_term.session("s", user_id="ada").to_messages() == []
        stored = {m.content for m in (await again.long_term.list(user_id="ada")).memories}
        assert {"The user lives in Lyon.", "The user works at Acme."} <= stored  # the queue was drained


async def test_a_turn_whose_session_is_being_written_when_the_client_closes_is_still_queued(tmp_path: Path) -> None:
    """Closing waits for calls that have their place and are writing their session (the turn was written
    to the session, then refused by the closed queue: anyio's ClosedResourceError)."""
    url = f"sqlite:///{tmp_path / 'agent.db'}"
    mem = await Memkit(url, embedder="hashing").open()
    session = mem.short_term.session("s", user_id="ada")
    add_many = session.add_many

    async def slow_add_many(messages: Any) -> None:
        await anyio.sleep(0.05)
        await add_many(messages)

    session.add_many = slow_add_many  # type: ignore[method-assign]
    async with anyio.create_task_group() as group:
        group.start_soon(lambda: mem.observe(user_id="ada", session_id="s", messages=_user("I live in Lyon.")))
        await anyio.sleep(0.01)  # the call has its place and is writing the session
        group.start_soon(mem.aclose)
    async with Memkit(url, embedder="hashing") as again:
        assert [m["content"] for m in await again.short_term.session("s", user_id="ada").to_messages()] == [
            "I live in Lyon.", "Noted."]  # fmt: skip
        assert "The user lives in Lyon." in {m.content for m in (await again.long_term.list(user_id="ada")).memories}


async def test_a_turn_waiting_for_room_is_refused_when_the_close_gives_up_on_a_stuck_writer() -> None:
    """The writer never finishes, close_timeout runs out: a call waiting for room is refused, not left waiting
    for a place no one will free."""
    config = ObserveConfig(max_pending=1)
    mem = await Memkit("memory://", embedder="hashing", observe=config, close_timeout=0.2).open()
    await _full_queue(mem)  # its gate never opened
    refused: list[BaseException] = []
    with anyio.fail_after(3), pytest.warns(RuntimeWarning, match="gave up writing"):
        async with anyio.create_task_group() as group:
            group.start_soon(_observe_or_note_refusal, mem, refused, None)
            await anyio.sleep(0.01)
            await mem.aclose()
    assert len(refused) == 1
