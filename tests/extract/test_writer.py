"""FactWriter with the offline extractor on every backend: what is added, updated, superseded or ignored (and why),
corrections superseding what they correct, recall leaving the superseded out unless asked, and bad input."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from memkit import Memkit, ScopeError
from memkit.extract import FactEvent, FactWriter, FactWriterConfig, ObservedTurn

pytestmark = pytest.mark.anyio


@pytest.fixture
async def mem(store_url: str) -> AsyncIterator[Memkit]:
    async with Memkit(store_url, embedder="hashing") as client:
        yield client


def _turn(text: str, *, user: str = "ada", session: str = "s1", **extra: Any) -> ObservedTurn:
    messages = [{"role": "user", "content": text}, {"role": "assistant", "content": "Noted!"}]
    return ObservedTurn(messages=messages, user_id=user, session_id=session, **extra)


def _done(events: list[FactEvent]) -> list[tuple[str, str]]:
    return [(e.action, e.text) for e in events if e.action != "ignore"]


async def _current(mem: Memkit, query: str, **options: Any) -> list[str]:
    return [h.memory.content for h in await mem.long_term.recall(query, user_id="ada", k=20, **options)]


async def test_a_turn_is_written_and_every_decision_reported(mem: Memkit) -> None:
    seen: list[FactEvent] = []
    writer = FactWriter(mem.long_term, on_event=seen.append)
    at = datetime(2025, 3, 1, 12, tzinfo=UTC)
    events = await writer.write(_turn("Hi! My name is Ada and I live in Paris. I love hiking. What time is it?",
                                      at=at, metadata={"turn": "t1"}))  # fmt: skip
    assert seen == events
    assert _done(events) == [("add", "The user's name is Ada"), ("add", "The user lives in Paris."),
                             ("add", "The user loves hiking.")]  # fmt: skip
    assert [(e.action, e.reason) for e in events if e.action == "ignore"] == [
        ("ignore", "filler"), ("ignore", "a question or a request")]  # fmt: skip
    added = [e.memory for e in events if e.action == "add"]
    assert all(m is not None and m.created_at == at and m.scope.session_id is None for m in added)
    home = next(m for m in added if m is not None and "Paris" in m.content)
    assert home.kind == "fact" and home.source == "observed:heuristic"
    assert home.metadata == {"turn": "t1", "fact_kind": "fact", "extracted_by": "heuristic", "message_index": 0,
                             "session_id": "s1", "fact_slot": "lives_in", "fact_subject": "the user",
                             "fact_value": "Paris"}  # fmt: skip
    hiking = next(m for m in added if m is not None and "hiking" in m.content)
    assert hiking.kind == "preference"
    # Indexed with its relation in plain words and the words around it in its message, never shown.
    said = "Hi! My name is Ada and I live in Paris. I love hiking. What time is it?"
    assert home.context == f"the user lives in Paris. {said}"
    assert hiking.context == f"the user likes hiking. {said}"
    hits = await mem.long_term.recall("what time is it", user_id="ada", k=3)
    assert hits and hits[0].memory.content in {m.content for m in added if m is not None}
    bare = FactWriter(mem.long_term, config=FactWriterConfig(context="none"))
    [plain] = _events(await bare.write(_turn("I have a cat named Io", user="bob")))
    assert plain.memory is not None and plain.memory.context is None

    # The same turn again stores nothing new, and says so.
    again = await writer.write(_turn("My name is Ada and I live in Paris. I love hiking."))
    assert {e.action for e in again} == {"noop"} and len(again) == 3
    assert all(e.memory is not None and e.reason for e in again)


async def test_filler_is_never_stored(mem: Memkit) -> None:
    writer = FactWriter(mem.long_term)
    for said in ("ok", "thanks!", "got it", "Sounds good, thank you", "haha"):
        events = await writer.write(_turn(said))
        assert [(e.action, e.reason) for e in events] == [("ignore", "filler")]
    assert (await mem.long_term.list(user_id="ada")).memories == []


async def test_a_correction_supersedes_and_recall_keeps_the_history_on_request(mem: Memkit) -> None:
    writer = FactWriter(mem.long_term)
    await writer.write(_turn("I live in Paris."))
    [event] = _events(await writer.write(_turn("Actually, I moved to Porto last month.")))
    assert event.action == "supersede" and event.fact is not None and event.fact.kind == "correction"
    assert event.previous is not None and event.memory is not None
    assert event.previous.content == "The user lives in Paris." and event.previous.superseded_by == event.memory.id
    assert "lives_in was Paris, now Porto" in event.reason
    assert await _current(mem, "where does the user live") == ["The user moved to Porto last month."]
    history = await _current(mem, "where does the user live", include_superseded=True)
    assert set(history) == {"The user moved to Porto last month.", "The user lives in Paris."}
    assert [m.content for m in await mem.long_term.history(event.previous.id, user_id="ada")] == [
        "The user moved to Porto last month.", "The user lives in Paris."]  # fmt: skip


async def test_a_memory_stored_by_hand_is_superseded_too(mem: Memkit) -> None:
    stored = (await mem.long_term.store("The user lives in Paris", user_id="ada")).memory
    assert stored is not None
    [event] = _events(await FactWriter(mem.long_term).write(_turn("Actually, I moved to Porto")))
    assert event.action == "supersede" and event.previous is not None and event.previous.id == stored.id


async def test_one_value_at_a_time_and_changes_of_taste(mem: Memkit) -> None:
    writer = FactWriter(mem.long_term)
    await writer.write(_turn("I work at Acme. I love sushi. My sister Bea lives in Lyon."))
    moved = _events(await writer.write(_turn("I work at Globex now.")))
    assert [(e.action, e.previous.content if e.previous else None) for e in moved] == [
        ("supersede", "The user works at Acme.")]  # fmt: skip
    taste = _events(await writer.write(_turn("I don't like sushi anymore")))
    assert [(e.action, e.previous.content if e.previous else None) for e in taste] == [
        ("supersede", "The user loves sushi.")]  # fmt: skip
    sister = _events(await writer.write(_turn("Bea moved to Lisbon")))  # another person's relation
    assert [(e.action, e.previous.content if e.previous else None) for e in sister] == [
        ("supersede", "The user's sister Bea lives in Lyon.")]  # fmt: skip
    second = _events(await writer.write(_turn("My sister Cleo is a pilot")))  # two sisters: added beside
    assert [e.action for e in second] == ["add"]
    current = await _current(mem, "user")
    assert "The user works at Acme." not in current and "The user works at Globex now." in current


async def test_a_batch_is_applied_in_order(mem: Memkit) -> None:
    writer = FactWriter(mem.long_term)
    events = await writer.write_many([_turn("I live in Paris"), _turn("ok"), _turn("Actually, I live in Rome")])
    assert [e.action for e in events if e.action != "ignore"] == ["add", "supersede"]
    assert await _current(mem, "the user lives in") == ["The user lives in Rome"]


async def test_users_are_kept_apart(mem: Memkit) -> None:
    writer = FactWriter(mem.long_term)
    await writer.write(_turn("I live in Paris", user="ada"))
    [event] = _events(await writer.write(_turn("Actually, I live in Rome", user="bob")))
    assert event.action == "add"  # bob's correction never touches ada's memories
    assert await _current(mem, "lives") == ["The user lives in Paris"]


async def test_importance_gate_session_scope_and_callback_failures(
    mem: Memkit, caplog: pytest.LogCaptureFixture
) -> None:
    gated = FactWriter(mem.long_term, config=FactWriterConfig(min_importance=0.7, report_skipped=False))
    events = await gated.write(_turn("I went to the beach. Remember that my door code is 4411."))
    assert [(e.action, e.text) for e in events] == [
        ("ignore", "The user went to the beach."), ("add", "The user's door code is 4411.")]  # fmt: skip
    assert "below 0.7" in events[0].reason

    def broken(event: FactEvent) -> None:
        raise RuntimeError("callback bug")

    scoped = FactWriter(mem.long_term, config=FactWriterConfig(session_scoped=True), on_event=broken)
    with caplog.at_level(logging.ERROR, logger="memkit"):
        [event] = _events(await scoped.write(_turn("I love tea", session="s9")))
    assert event.memory is not None and event.memory.scope.session_id == "s9"
    assert any("on_event callback raised" in r.getMessage() for r in caplog.records)


async def test_bad_input(mem: Memkit) -> None:
    writer = FactWriter(mem.long_term)
    with pytest.raises(ScopeError):
        await writer.write(ObservedTurn(messages=[{"role": "user", "content": "I love tea"}], agent_id="a"))
    with pytest.raises(TypeError):
        await writer.write_many(["I love tea"])  # type: ignore[list-item]
    assert await writer.write(ObservedTurn(messages=[], user_id="ada")) == []


def _events(events: list[FactEvent]) -> list[FactEvent]:
    return [e for e in events if e.action != "ignore"]


async def test_a_fact_can_be_indexed_with_the_question_it_answers(mem: Memkit) -> None:
    writer = FactWriter(mem.long_term, config=FactWriterConfig(context="previous", context_chars=40))
    question = "That sounds lovely. " * 5 + "Where did you grow up?"
    turn = ObservedTurn(messages=[{"role": "assistant", "content": question},
                                  {"role": "user", "content": "I grew up in Lyon."}], user_id="ada")  # fmt: skip
    [event] = _events(await writer.write(turn))
    assert event.memory is not None and event.memory.content == "The user grew up in Lyon."
    assert event.memory.context == "the user grew up in Lyon. …" + question[-40:]
