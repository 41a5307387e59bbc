"""LLMFactExtractor over real HTTP (the loopback double): extraction, reconciliation (ADD, UPDATE, SUPERSEDE, NOOP)
against recalled memories, the call budget, batches and the batching window, and falling back when the model fails."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest

from memkit import Memkit
from memkit.extract import (
    FactBatcher,
    FactEvent,
    FactWriter,
    LLMExtractionConfig,
    LLMFactExtractor,
    ObservedTurn,
)
from memkit.llm import OpenAIChat
from memkit.testing.llm_double import LLMDouble, json_reply, status_reply, text_reply

pytestmark = pytest.mark.anyio


@pytest.fixture
def double() -> Iterator[LLMDouble]:
    with LLMDouble() as served:
        yield served


@pytest.fixture
async def mem(embedded_url: str) -> AsyncIterator[Memkit]:
    async with Memkit(embedded_url, embedder="hashing") as client:
        yield client


def _chat(double: LLMDouble) -> OpenAIChat:
    return OpenAIChat("gpt-test", base_url=double.openai_url, api_key="sk-test", backoff_s=0.01, max_backoff_s=0.1,
                      timeout_s=5.0, max_retries=0)  # fmt: skip


def _turn(text: str, *, user: str = "ada", **extra: Any) -> ObservedTurn:
    return ObservedTurn(messages=[{"role": "user", "content": text}, {"role": "assistant", "content": "Noted."}],
                        user_id=user, session_id="s1", **extra)  # fmt: skip


def _facts(*facts: tuple[str, str, float, int]) -> Any:
    return json_reply({"facts": [{"text": t, "kind": k, "importance": i, "message": m} for t, k, i, m in facts]})


def _prompt(double: LLMDouble, at: int) -> str:
    return str(double.requests("openai")[at].body["messages"][-1]["content"])


async def test_extraction_is_one_call_and_inspectable(double: LLMDouble) -> None:
    extractor = LLMFactExtractor(_chat(double), LLMExtractionConfig(max_facts_per_turn=2, extract_max_tokens=321))
    double.script("openai", _facts(("The user's sister Bea lives in Porto", "fact", 0.8, 0),
                                   ("The user likes jazz", "preference", 7.0, 0),  # importance clamped
                                   ("Something from nowhere", "fact", 0.5, 9),  # no message 9: dropped, noted
                                   ("The user hates mornings", "weird-kind", 0.4, 0)))  # fmt: skip
    turn = _turn("My sister Bea lives in Porto. I like jazz. I hate mornings.")
    extraction = await extractor.extract(turn)
    assert [(f.text, f.kind, f.importance, f.message_index) for f in extraction.facts] == [
        ("The user's sister Bea lives in Porto", "fact", 0.8, 0),
        ("The user likes jazz", "preference", 1.0, 0),
    ]
    assert extraction.extractor == "model:" + extractor.llm.model_id and extraction.facts[1].memory_kind == "preference"
    assert any("message 9" in note for note in extraction.notes)
    (request,) = double.requests("openai")
    assert request.body["max_tokens"] == 321
    assert extraction.prompt == extractor.extraction_messages([turn]) == request.body["messages"][:2]
    assert "[0] user: My sister Bea lives in Porto." in _prompt(double, 0)
    assert "[1] assistant: Noted." in _prompt(double, 0)  # fmt: skip


async def test_reconciliation_adds_updates_supersedes_and_ignores(mem: Memkit, double: LLMDouble) -> None:
    lt = mem.long_term
    paris = (await lt.store("The user lives in Paris", user_id="ada")).memory
    jazz = (await lt.store("The user likes jazz", user_id="ada", kind="preference")).memory
    tea = (await lt.store("The user drinks green tea", user_id="ada")).memory
    assert paris is not None and jazz is not None and tea is not None
    seen: list[FactEvent] = []
    writer = FactWriter(lt, LLMFactExtractor(_chat(double)), on_event=seen.append)
    double.script(
        "openai",
        _facts(("The user moved to Porto", "correction", 0.8, 0), ("The user likes jazz, Coltrane above all",
               "preference", 0.6, 0), ("The user drinks green tea", "fact", 0.4, 0), ("The user has a cat named Io",
               "fact", 0.6, 0)),
        json_reply({"decisions": [
            {"fact": 0, "action": "SUPERSEDE", "target": "m1", "reason": "the user moved"},
            {"fact": 1, "action": "UPDATE", "target": "m2", "text": "The user likes jazz, Coltrane above all",
             "reason": "more precise"},
            {"fact": 2, "action": "NOOP", "target": "m3", "reason": "already known"},
            {"fact": 3, "action": "ADD", "reason": "new"},
        ]}),
    )  # fmt: skip
    events = await writer.write(_turn("I moved to Porto! I like jazz, Coltrane above all. Green tea, as always. "
                                      "And I got a cat, Io."))  # fmt: skip
    assert seen == events
    assert [(e.action, e.reason) for e in events] == [("supersede", "the user moved"), ("update", "more precise"),
                                                      ("noop", "already known"), ("add", "new")]  # fmt: skip
    assert all(e.decided_by.startswith("model:") for e in events)
    moved, better, known, added = events
    assert moved.previous is not None and moved.previous.id == paris.id and moved.previous.superseded_by is not None
    assert better.previous is not None and better.previous.content == "The user likes jazz"
    assert better.memory is not None and better.memory.id == jazz.id
    assert better.memory.content == "The user likes jazz, Coltrane above all"
    assert known.memory is not None and known.memory.id == tea.id
    assert added.memory is not None and added.memory.content == "The user has a cat named Io"
    prompt = _prompt(double, 1)  # the reconciliation: each fact with its similar memories, by handle
    assert "[f0] (correction) The user moved to Porto" in prompt and "[m1] (fact) The user lives in Paris" in prompt
    contents = [h.memory.content for h in await lt.recall("where does the user live", user_id="ada", k=10)]
    assert "The user lives in Paris" not in contents and "The user moved to Porto" in contents


async def test_unusable_decisions_fall_back_to_the_rules(mem: Memkit, double: LLMDouble) -> None:
    await mem.long_term.store("The user lives in Paris", user_id="ada")
    writer = FactWriter(mem.long_term, LLMFactExtractor(_chat(double)))
    double.script("openai", _facts(("The user lives in Paris", "fact", 0.5, 0), ("The user likes tea", "fact", 0.5, 0),
                                   ("The user likes coffee", "fact", 0.5, 0)),
                  json_reply({"decisions": [{"fact": 0, "action": "SUPERSEDE", "target": "m99", "reason": "?"},
                                            {"fact": 1, "action": "MERGE", "reason": "?"}]}))  # fmt: skip
    events = await writer.write(_turn("I live in Paris and I like tea and coffee"))
    assert [e.action for e in events] == ["noop", "add", "add"]
    assert "'m99', which is not a memory shown" in events[0].reason and "rule: already stored" in events[0].reason
    assert "'MERGE'" in events[1].reason and "the model gave no decision" in events[2].reason


async def test_no_similar_memory_or_a_budget_of_one_makes_no_second_call(mem: Memkit, double: LLMDouble) -> None:
    writer = FactWriter(mem.long_term, LLMFactExtractor(_chat(double)))
    double.script("openai", _facts(("The user lives in Paris", "fact", 0.5, 0)))
    [event] = await writer.write(_turn("I live in Paris"))
    assert event.action == "add" and len(double.requests("openai")) == 1  # nothing stored yet: nothing to weigh
    one = FactWriter(mem.long_term, LLMFactExtractor(_chat(double), LLMExtractionConfig(max_calls_per_turn=1)))
    double.script("openai", _facts(("The user lives in Rome", "correction", 0.8, 0)))
    [moved] = await one.write(_turn("Actually, I live in Rome"))
    assert len(double.requests("openai")) == 2 and moved.action == "supersede" and moved.decided_by == "heuristic"


@pytest.mark.parametrize(
    "reply", [status_reply(500, "boom"), text_reply("not json"), status_reply(429, "slow down")],
    ids=["server-error", "invalid-json", "rate-limited"],
)  # fmt: skip
async def test_a_failing_model_falls_back_and_says_so(
    mem: Memkit, double: LLMDouble, reply: Any, caplog: pytest.LogCaptureFixture
) -> None:
    writer = FactWriter(mem.long_term, LLMFactExtractor(_chat(double)))
    double.script("openai", reply, reply)  # a structured answer gets one repair attempt
    with caplog.at_level(logging.WARNING, logger="memkit"):
        events = await writer.write(_turn("I love hiking. ok thanks"))
    assert [(e.action, e.text) for e in events if e.action != "ignore"] == [("add", "The user loves hiking.")]
    notes = [e.reason for e in events if e.action == "ignore" and e.message_index is None]
    assert len(notes) == 1 and "the model failed" in notes[0] and "the offline extractor read it" in notes[0]
    assert any("using the offline extractor" in r.getMessage() for r in caplog.records)


async def test_a_failing_reconciliation_leaves_the_rules_to_decide(mem: Memkit, double: LLMDouble) -> None:
    await mem.long_term.store("The user lives in Paris", user_id="ada")
    writer = FactWriter(mem.long_term, LLMFactExtractor(_chat(double)))
    double.script(
        "openai", _facts(("The user lives in Rome", "correction", 0.8, 0)), status_reply(500), status_reply(500)
    )
    [event] = await writer.write(_turn("Actually, I live in Rome"))
    assert event.action == "supersede" and event.reason.startswith("the model failed")


async def test_a_batch_is_one_extraction_and_one_reconciliation(mem: Memkit, double: LLMDouble) -> None:
    await mem.long_term.store("The user lives in Paris", user_id="ada")
    writer = FactWriter(mem.long_term, LLMFactExtractor(_chat(double)))
    double.script(
        "openai",
        _facts(("The user lives in Lyon", "correction", 0.8, 0), ("The user lives in Rome", "correction", 0.8, 4)),
        json_reply({"decisions": [{"fact": 0, "action": "SUPERSEDE", "target": "m1", "reason": "moved"},
                                  {"fact": 1, "action": "SUPERSEDE", "target": "f0", "reason": "moved again"}]}),
    )  # fmt: skip
    turns = [_turn("I live in Lyon now", metadata={"n": 1}), _turn("ok", metadata={"n": 2}),
             _turn("Actually, Rome", metadata={"n": 3})]  # fmt: skip
    events = await writer.write_many(turns)
    assert len(double.requests("openai")) == 2
    assert "Turn 1:" in _prompt(double, 0) and "[4] user: Actually, Rome" in _prompt(double, 0)
    lyon, rome = [e for e in events if e.action != "ignore"]
    assert lyon.memory is not None and lyon.memory.metadata["n"] == 1
    assert rome.memory is not None and rome.memory.metadata["n"] == 3 and rome.message_index == 0
    assert rome.action == "supersede" and rome.previous is not None and rome.previous.id == lyon.memory.id
    contents = [h.memory.content for h in await mem.long_term.recall("user lives", user_id="ada", k=10)]
    assert contents == ["The user lives in Rome"]


async def test_the_batching_window_groups_a_users_turns(mem: Memkit, double: LLMDouble) -> None:
    def answer(body: dict[str, Any]) -> Any:
        said = body["messages"][-1]["content"]
        facts = [{"text": f"The user said {n}", "kind": "fact", "importance": 0.5, "message": 0}
                 for n in ("one", "two", "three") if n in said]  # fmt: skip
        return json_reply({"facts": facts} if "New facts" not in said else {"decisions": []})

    double.handler("openai", answer)
    batches: list[list[FactEvent]] = []
    writer = FactWriter(mem.long_term, LLMFactExtractor(_chat(double)))
    async with FactBatcher(writer, window_s=0.5, max_turns=10, on_events=batches.append) as batcher:
        for word in ("one", "two", "three"):
            await batcher.add(_turn(f"I said {word}"))
        await batcher.add(_turn("I said one", user="bob"))
        assert double.requests("openai") == []  # add() returns at once; the window is still open
        await batcher.flush()
        extraction_calls = [r for r in double.requests("openai") if "New facts" not in json.dumps(r.body)]
        assert len(extraction_calls) == 2  # one per user
        async with anyio.create_task_group() as group:  # max_turns closes a window early
            small = FactBatcher(writer, window_s=30, max_turns=2)
            async with small:
                await small.add(_turn("one", user="cy"))
                await small.add(_turn("two", user="cy"))
                with anyio.fail_after(5):
                    await small.flush()
            group.cancel_scope.cancel()
    assert sorted(len(b) for b in batches) == [1, 3]


async def test_a_failed_batch_reaches_on_error(
    mem: Memkit, double: LLMDouble, caplog: pytest.LogCaptureFixture
) -> None:
    failures: list[tuple[Exception, list[ObservedTurn]]] = []
    writer = FactWriter(mem.long_term)
    async with FactBatcher(writer, window_s=0.01, on_error=lambda e, t: failures.append((e, t))) as batcher:
        with caplog.at_level(logging.ERROR, logger="memkit"):
            await batcher.add(ObservedTurn(messages=[{"role": "user", "content": "I love tea"}], agent_id="a"))
            await batcher.flush()
    assert len(failures) == 1 and "user_id" in str(failures[0][0])
    assert any("writing a batch" in r.getMessage() for r in caplog.records)
