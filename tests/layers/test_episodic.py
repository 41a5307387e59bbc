"""Episodic memory on every backend that stores records: retrieval with the real model, lessons (from a model
over real HTTP, and heuristic), importance, prompt rendering within a budget, and bad input."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memkit import ContentError, ImportanceError, Memkit, ValidationError, open_backend
from memkit.embedders import Embedder
from memkit.layers.episodic import Action, Episode, EpisodicConfig, EpisodicMemory
from memkit.llm import OpenAIChat
from memkit.testing.llm_double import LLMDouble, delayed, json_reply, status_reply, text_reply
from memkit.tokens import EstimateTokenizer

pytestmark = pytest.mark.anyio

FLIGHT_FAILED = Episode(
    trigger="Book a flight from Berlin to Lisbon for the conference",
    outcome="failure",
    actions=[
        Action(tool="search_flights", arguments={"from": "BER", "to": "LIS", "date": "2020-05-01"}, ok=False,
               error="date in the past", latency_s=0.8),
        Action(tool="search_flights", arguments={"from": "BER", "to": "LIS", "date": "2026-05-01"},
               result="3 flights found", latency_s=0.9),
        Action(tool="book_flight", arguments={"flight": "TP571"}, ok=False, error="payment declined"),
    ],
    feedback="The user had to book it themselves.",
    tags=["travel"],
)  # fmt: skip


@pytest.fixture
async def mem(store_url: str) -> AsyncIterator[Memkit]:
    async with Memkit(store_url, embedder="hashing") as client:
        yield client


@pytest.fixture
async def episodic(mem: Memkit) -> EpisodicMemory:
    layer = EpisodicMemory(mem.long_term.backend, mem.embedder)
    await layer.setup()
    return layer


@pytest.fixture
def double() -> Iterator[LLMDouble]:
    with LLMDouble() as served:
        yield served


def _chat(double: LLMDouble) -> OpenAIChat:
    return OpenAIChat("gpt-test", base_url=double.openai_url, api_key="sk-test", backoff_s=0.01, max_backoff_s=0.1,
                      timeout_s=5.0, max_retries=1)  # fmt: skip


async def _with_model(mem: Memkit, double: LLMDouble, **config: Any) -> EpisodicMemory:
    layer = EpisodicMemory(mem.long_term.backend, mem.embedder, EpisodicConfig(**config), llm=_chat(double))
    await layer.setup()
    return layer


# -- retrieval quality, with the packaged model --------------------------------------------------------------
SITUATIONS = [
    ("Book a flight from Berlin to Lisbon for the conference", "failure", ["travel"]),
    ("Book a flight from Paris to Rome for a holiday", "success", ["travel"]),
    ("Cancel the user's gym membership", "success", ["admin"]),
    ("Summarise the quarterly sales report in five bullet points", "success", ["writing"]),
    ("Fix the failing unit tests in the payment module", "failure", ["code"]),
    ("Order a birthday cake for delivery on Saturday", "partial", ["shopping"]),
    ("Find a vegetarian restaurant near the hotel", "success", ["travel", "food"]),
    ("Translate the onboarding email into Spanish", "success", ["writing"]),
]


async def test_the_episode_whose_situation_matches_comes_first(store_url: str, local_embedder: Embedder) -> None:
    async with open_backend(store_url) as backend:
        layer = EpisodicMemory(backend, local_embedder)
        await layer.setup()
        for trigger, outcome, tags in SITUATIONS:
            await layer.record(Episode(trigger=trigger, outcome=outcome, tags=tags), user_id="u")  # type: ignore[arg-type]
        cases = {
            "I need plane tickets to Portugal for a conference": SITUATIONS[0][0],
            "some tests are red in the payments code": SITUATIONS[4][0],
            "end my subscription at the fitness club": SITUATIONS[2][0],
            "get a cake delivered for a birthday party": SITUATIONS[5][0],
        }
        for situation, expected in cases.items():
            assert (await layer.find_similar(situation, user_id="u"))[0].episode.trigger == expected, situation
        wins = await layer.find_similar("book plane tickets", user_id="u", outcome="success", k=3)
        assert wins[0].episode.trigger == SITUATIONS[1][0] and {h.episode.outcome for h in wins} == {"success"}
        travel = await layer.find_similar("translate a text into Spanish", user_id="u", tags=["travel"], k=8)
        assert {h.episode.trigger for h in travel} == {t for t, _, tags in SITUATIONS if "travel" in tags}
        failed = await layer.find_similar("plane tickets", user_id="u", outcome=["failure", "partial"], k=8)
        assert len(failed) == 3 and failed[0].episode.trigger == SITUATIONS[0][0]


# -- importance ------------------------------------------------------------------------------------------------
async def test_importance_grows_with_what_an_episode_teaches(episodic: EpisodicMemory) -> None:
    async def importance(episode: Episode) -> float:
        return (await episodic.get(await episodic.record(episode, user_id="u"), user_id="u")).importance or 0.0

    with_lessons = await importance(Episode(trigger="a", outcome="failure", lessons=["never do a"]))
    heuristic = await importance(Episode(trigger="b", outcome="failure", actions=[Action(tool="t", ok=False)]))
    without = await importance(Episode(trigger="c", outcome="failure"))
    success = await importance(Episode(trigger="d", outcome="success"))
    assert with_lessons > heuristic > without > success
    assert await importance(Episode(trigger="e", outcome="success", importance=0.95)) == pytest.approx(0.95)


async def test_between_two_similar_situations_the_more_important_comes_first(episodic: EpisodicMemory) -> None:
    for importance in (0.1, 0.9, 0.5):
        await episodic.record(Episode(trigger="renew the TLS certificate", outcome="success", importance=importance,
                                      metadata={"i": importance}), user_id="u")  # fmt: skip
    hits = await episodic.find_similar("renew the TLS certificate", user_id="u")
    assert [h.episode.metadata["i"] for h in hits] == [0.9, 0.5, 0.1]


# -- lessons ---------------------------------------------------------------------------------------------------
async def test_heuristic_lessons_name_the_failed_call_its_error_and_its_fix(episodic: EpisodicMemory) -> None:
    stored = await episodic.get(await episodic.record(FLIGHT_FAILED, user_id="u"), user_id="u")
    assert stored.lessons_source == "heuristic"
    fixed, declined, feedback = stored.lessons
    assert fixed == ("search_flights failed with 'date in the past' when called with date='2020-05-01'; "
                     "it worked with date='2026-05-01'")  # fmt: skip
    assert declined == ("book_flight failed with 'payment declined' when called with flight='TP571': "
                        "check its arguments before calling it again")  # fmt: skip
    assert feedback == "Feedback on this failure: The user had to book it themselves."
    success = Episode(trigger="x", outcome="success", feedback="great", actions=[Action(tool="t")])
    plain = await episodic.get(await episodic.record(success, user_id="u"), user_id="u")
    assert plain.lessons == [] and plain.lessons_source is None


async def test_lessons_come_from_the_model_when_one_is_given(mem: Memkit, double: LLMDouble) -> None:
    layer = await _with_model(mem, double, max_lessons=2)
    double.script("openai", json_reply({"lessons": ["Check the date is in the future before searching.", "  ",
                                                    "Confirm the card first.", "A third lesson."]}))  # fmt: skip
    stored = await layer.get(await layer.record(FLIGHT_FAILED, user_id="u"), user_id="u")
    assert stored.lessons == ["Check the date is in the future before searching.", "Confirm the card first."]
    assert stored.lessons_source == "model"
    (request,) = double.requests("openai")
    prompt = request.body["messages"][-1]["content"]
    assert "Berlin to Lisbon" in prompt and "date in the past" in prompt and "FAILED" in prompt
    assert request.body["max_tokens"] == 400
    given = await layer.record(Episode(trigger="y", outcome="success", lessons=["mine"]), user_id="u")
    assert len(double.requests("openai")) == 1 and (await layer.get(given, user_id="u")).lessons == ["mine"]
    hits = await layer.find_similar("card", user_id="u")  # the model's lessons are indexed too
    assert hits[0].episode.id == stored.id and hits[0].lexical > 0


@pytest.mark.parametrize(
    "reply",
    [status_reply(400, "bad request"), text_reply("not json at all"), delayed(3.0, json_reply({"lessons": ["x"]}))],
    ids=["refused", "invalid-json", "too-slow"],
)
async def test_a_model_failure_records_the_episode_without_lessons(
    mem: Memkit, double: LLMDouble, reply: Any, caplog: pytest.LogCaptureFixture
) -> None:
    layer = await _with_model(mem, double, llm_timeout_s=0.5)
    double.script("openai", reply, reply)  # a structured answer gets one repair attempt
    with caplog.at_level(logging.WARNING, logger="memkit"):
        episode_id = await layer.record(FLIGHT_FAILED, user_id="u")
    stored = await layer.get(episode_id, user_id="u")
    assert stored.lessons == [] and stored.lessons_source is None and stored.actions == FLIGHT_FAILED.actions
    assert any("could not derive lessons" in r.getMessage() for r in caplog.records)


# -- rendering for a prompt ------------------------------------------------------------------------------------
async def test_lessons_for_turns_failures_into_avoid_and_successes_into_what_worked(
    episodic: EpisodicMemory,
) -> None:
    assert await episodic.lessons_for("book a flight to Lisbon", user_id="u") == ""
    await episodic.record(FLIGHT_FAILED, user_id="u")
    await episodic.record(Episode(trigger="Book a flight from Paris to Rome", outcome="success", actions=[
        Action(tool="search_flights"), Action(tool="book_flight")], lessons=["Pay with the stored card."]),
        user_id="u")  # fmt: skip
    await episodic.record(Episode(trigger="Book a flight to Oslo", outcome="failure", feedback="too expensive"),
                          user_id="u")  # fmt: skip
    text = await episodic.lessons_for("book a flight", user_id="u", max_tokens=1_000)
    header, *lines = text.splitlines()
    assert header == "Lessons from similar past tasks:" and len(lines) == 3
    berlin = next(line for line in lines if "Berlin" in line)
    assert berlin.startswith("- Avoid: search_flights failed with 'date in the past'") and "TP571" in berlin
    rome = next(line for line in lines if "Rome" in line)
    assert rome == ("- What worked: for 'Book a flight from Paris to Rome', search_flights -> book_flight. "
                    "Lesson: Pay with the stored card.")  # fmt: skip
    oslo = next(line for line in lines if "Oslo" in line)
    assert oslo == "- Avoid: what failed in 'Book a flight to Oslo'. Lesson: Feedback on this failure: too expensive."
    only_wins = await episodic.lessons_for("book a flight", user_id="u", outcome="success")
    assert "Avoid" not in only_wins and "What worked" in only_wins


class WordTokenizer:
    name = "words"

    def count(self, text: str) -> int:
        return len(text.split())


@pytest.mark.parametrize("tokenizer", [EstimateTokenizer(), WordTokenizer()], ids=["estimate", "words"])
async def test_lessons_for_stays_within_the_budget(episodic: EpisodicMemory, tokenizer: Any) -> None:
    for i in range(12):
        lessons = [f"lesson {i}: " + "retry the export with a smaller page size " * (1 + i % 3)]
        await episodic.record(Episode(trigger=f"export report {i} to CSV", outcome="failure", lessons=lessons),
                              user_id="u")  # fmt: skip
    everything = await episodic.lessons_for("export report to CSV", user_id="u", k=12, max_tokens=100_000,
                                            tokenizer=tokenizer)  # fmt: skip
    assert len(everything.splitlines()) == 13
    for budget in (60, 120, 250):
        text = await episodic.lessons_for("export report to CSV", user_id="u", k=12, max_tokens=budget,
                                          tokenizer=tokenizer)  # fmt: skip
        assert 0 < tokenizer.count(text) <= budget and len(text.splitlines()) < 13
        assert all(line in everything.splitlines() for line in text.splitlines())  # whole lines only
    assert await episodic.lessons_for("export report", user_id="u", max_tokens=5, tokenizer=tokenizer) == ""


async def test_the_same_lesson_learned_twice_is_said_once(episodic: EpisodicMemory) -> None:
    for _ in range(3):
        await episodic.record(Episode(trigger="Rotate the API keys", outcome="failure",
                                      lessons=["Revoke the old key last."]), user_id="u")  # fmt: skip
    assert len((await episodic.lessons_for("rotate API keys", user_id="u")).splitlines()) == 2


# -- retention under a race -------------------------------------------------------------------------------------
class _RacingStore:
    """A store whose first ``count`` lets another writer finish its whole trim before answering: the
    interleaving that makes "delete the oldest (count - keep_last)" delete one of the newest."""

    def __init__(self, inner: Any, other_writer: Any) -> None:
        self._inner, self._other_writer = inner, other_writer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def count(self, *args: Any, **kwargs: Any) -> int:
        counted = await self._inner.count(*args, **kwargs)
        if self._other_writer is not None:
            other, self._other_writer = self._other_writer, None
            await other()
        return int(counted)


async def test_retention_never_deletes_one_of_the_newest_under_a_race(episodic: EpisodicMemory) -> None:
    from memkit._time import now_epoch
    from memkit.backend import Scope
    from memkit.layers.episodic._retention import trim

    start = datetime.now(UTC) - timedelta(hours=1)
    await episodic.record_many([Episode(trigger=f"step {i}", outcome="success", ended_at=start + timedelta(minutes=i))
                                for i in range(5)], user_id="u")  # fmt: skip
    backend, collection, owner = episodic.backend, episodic.config.collection, Scope(user_id="u")

    async def other_writer() -> None:  # counted 5 too, and deletes steps 0 and 1 before our scan
        assert await trim(backend, collection, owner, 3, now_epoch()) == 2

    assert await trim(_RacingStore(backend, other_writer), collection, owner, 3, now_epoch()) == 0  # type: ignore[arg-type]
    assert [e.trigger for e in (await episodic.list(user_id="u")).episodes] == ["step 4", "step 3", "step 2"]


# -- bad input -------------------------------------------------------------------------------------------------
NAIVE = datetime(2025, 1, 1, 12, 0)  # the point of the test
AWARE = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("fields", "error", "says"),
    [
        ({"trigger": ""}, ContentError, "trigger is empty"),
        ({"trigger": "x" * 4_001}, ContentError, "trigger has 4001 characters"),
        ({"trigger": 42}, ContentError, "trigger must be a string"),
        ({"trigger": "a\x00b"}, ContentError, "NUL"),
        ({"outcome": "meh"}, ValidationError, "outcome must be one of"),
        ({"actions": [Action(tool="t", latency_s=float("nan"))]}, ValidationError, r"actions\[0\]\.latency_s"),
        ({"actions": [Action(tool="t", latency_s=-1)]}, ValidationError, "latency_s"),
        ({"actions": [Action(tool="")]}, ValidationError, r"actions\[0\]\.tool"),
        ({"actions": [Action(tool="t", arguments={"x": float("inf")})]}, ValidationError, r"\[0\]\['arguments'\]\['x"),
        ({"actions": [Action(tool="t", arguments=object())]}, ValidationError, "arguments cannot be encoded"),
        ({"actions": [Action(tool="t", ok="no")]}, ValidationError, "ok must be True or False"),  # type: ignore[arg-type]
        ({"actions": [Action(tool="t", error="x" * 2_001)]}, ContentError, r"actions\[0\]\.error has 2001"),
        ({"actions": [{"tool": "t"}]}, ValidationError, "must be a memkit Action"),
        ({"actions": "search"}, ValidationError, "actions must be a list"),
        ({"feedback": "x" * 2_001}, ContentError, "feedback has 2001"),
        ({"lessons": ["fine", "  "]}, ContentError, r"lessons\[1\] is empty"),
        ({"tags": ["ok", ""]}, ValidationError, r"tags\[1\]"),
        ({"started_at": NAIVE}, ValidationError, "no timezone"),
        ({"ended_at": AWARE, "started_at": AWARE + timedelta(seconds=1)}, ValidationError, "ended .* before"),
        ({"importance": 1.5}, ImportanceError, "importance"),
        ({"metadata": {"x": object()}}, ValidationError, "metadata"),
        ({"id": "abc"}, ValidationError, "already has an id"),
    ],
)
async def test_bad_episodes_are_refused_and_nothing_is_written(
    episodic: EpisodicMemory, fields: dict[str, Any], error: type[Exception], says: str
) -> None:
    episode = Episode(**{"trigger": "ok", "outcome": "success", **fields})
    with pytest.raises(error, match=says):
        await episodic.record(episode, user_id="u")
    assert (await episodic.list(user_id="u")).episodes == []


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"k": 0}, "k must be an integer"),
        ({"outcome": "won"}, "outcome must be one of"),
        ({"tags": []}, "at least one tag"),
        ({"all_scopes": "yes"}, "all_scopes must be True or False"),
        ({"weights": {"similarity": 1}}, "weights must be"),
        ({"min_score": float("nan")}, "min_score"),
    ],
)
async def test_bad_searches_are_refused(episodic: EpisodicMemory, kwargs: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        await episodic.find_similar("anything", user_id="u", **kwargs)


async def test_bad_calls_are_refused(episodic: EpisodicMemory) -> None:
    with pytest.raises(ContentError, match="situation is empty"):
        await episodic.find_similar(" ", user_id="u")
    with pytest.raises(ValidationError, match="max_tokens"):
        await episodic.lessons_for("x", user_id="u", max_tokens=0)
    with pytest.raises(ValidationError, match="tokenizer"):
        await episodic.lessons_for("x", user_id="u", tokenizer="words")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="list of Episode"):
        await episodic.record_many(Episode(trigger="x", outcome="success"), user_id="u")  # type: ignore[arg-type]
    assert await episodic.record_many([], user_id="u") == []


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"keep_last": 0}, "keep_last"),
        ({"ttl": timedelta(0)}, "ttl"),
        ({"ttl": 60}, "ttl"),
        ({"half_life_days": float("nan")}, "half_life_days"),
        ({"default_k": 500}, "default_k"),
        ({"llm_timeout_s": 0}, "llm_timeout_s"),
        ({"collection": ""}, "collection"),
        ({"max_lessons": True}, "max_lessons"),
    ],
)
def test_bad_settings_are_refused(settings: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        EpisodicConfig(**settings)
