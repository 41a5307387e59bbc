"""Retrieval levers of long-term memory: long turns as passages, time windows in a query, sessions as units,
facts as extra keys; and that none of them lets one user's turns reach another."""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memkit import ContentError, LongTermConfig, Memkit, Turn, ValidationError, Weights
from memkit.embedders import CachedEmbedder, HashingEmbedder
from memkit.layers.longterm._passages import DEFAULT_PASSAGE_WORDS, keys_collection, passage_words, passages
from memkit.layers.longterm._when import query_windows

pytestmark = pytest.mark.anyio

DAY = datetime(2024, 3, 1, 12, tzinfo=UTC)
TAIL = "the violet submarine leaves Oslo harbour at dawn"
DENSE = Weights(similarity=1.0, lexical=0.0, recency=0.0, importance=0.0)
"""Dense only: a long turn's tail is found by its passages or not at all."""


class WindowedEmbedder:
    """A hashing embedder that, like a transformer, sees only the first ``window`` words of a text."""

    def __init__(self, window: int = 64) -> None:
        self.window = window
        self._inner = HashingEmbedder(256)
        self.dim = 256
        self.model_id = f"windowed-hashing-{window}"

    async def embed(self, texts: Sequence[str]) -> np.ndarray:  # type: ignore[type-arg]
        return await self._inner.embed([" ".join(t.split()[: self.window]) for t in texts])


def filler(words: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(3000)]
    return " ".join(rng.choice(vocabulary) for _ in range(words))


def session(long_text: str) -> list[Turn]:
    texts = ["We talked about the trip to Norway.", long_text, "Thanks, that was all for today."]
    return [Turn(speaker="user", text=t, at=DAY + timedelta(minutes=i)) for i, t in enumerate(texts)]


def test_passages_cover_every_word_within_the_window() -> None:
    text = filler(1000)
    found = passages(text, 100)
    assert all(len(p.split()) <= 100 for p in found)
    assert found[0].split()[0] == text.split()[0] and found[-1].split()[-1] == text.split()[-1]
    covered = {w for p in found for w in p.split()}
    assert covered == set(text.split())
    assert passages("a short turn", 100) == ["a short turn"]


def test_passage_words_follow_the_embedders_window() -> None:
    assert passage_words(WindowedEmbedder(200), None) == 120  # a window in tokens, read conservatively
    assert passage_words(CachedEmbedder(WindowedEmbedder(200)), None) == 120  # through a wrapper
    assert passage_words(HashingEmbedder(), None) == DEFAULT_PASSAGE_WORDS
    assert passage_words(WindowedEmbedder(200), 40) == 40


async def test_long_turn_is_stored_whole_and_found_by_its_tail(store_url: str) -> None:
    long_text = f"{filler(3700)} {TAIL}"
    assert len(long_text) > 20_000
    config = LongTermConfig(weights=DENSE, neighbour_weight=0.0)
    async with Memkit(store_url, embedder=WindowedEmbedder(), long_term=config) as mem:
        stored = await mem.long_term.add_turns(session(long_text), user_id="jo", thread="s1")
        assert [m.metadata["position"] for m in stored] == [0, 1, 2]  # nothing of the session lost
        listed = (await mem.long_term.list(user_id="jo")).memories
        assert len(listed) == 3 and stored[1].content == f"user: {long_text}"  # the turn whole, keys not listed
        hits = await mem.long_term.recall(TAIL, user_id="jo", k=3)
        assert hits[0].memory.id == stored[1].id and hits[0].memory.content == stored[1].content
        assert len({h.memory.id for h in hits}) == len(hits)  # the turn once, not once per passage
        assert hits[0].similarity > 0.5
    plain = LongTermConfig(weights=DENSE, neighbour_weight=0.0, passage_words=100_000)
    async with Memkit("memory://", embedder=WindowedEmbedder(), long_term=plain) as mem:  # the same without them
        stored = await mem.long_term.add_turns(session(long_text), user_id="jo", thread="s1")
        hits = await mem.long_term.recall(TAIL, user_id="jo", k=3)
        assert hits[0].memory.id != stored[1].id or hits[0].similarity < 0.5


async def test_store_keeps_its_limit_for_single_memories() -> None:
    async with Memkit("memory://", embedder=HashingEmbedder(64)) as mem:
        with pytest.raises(ContentError):
            await mem.long_term.store("x " * 5000, user_id="jo")


async def test_forgetting_or_changing_a_long_turn_removes_its_passages(store_url: str) -> None:
    config = LongTermConfig(weights=DENSE, neighbour_weight=0.0)
    async with Memkit(store_url, embedder=WindowedEmbedder(), long_term=config) as mem:
        lt = mem.long_term
        first = await lt.add_turns(session(f"{filler(2000)} {TAIL}"), user_id="jo", thread="s1")
        second = await lt.add_turns(session(f"{filler(2000, seed=8)} {TAIL}"), user_id="jo", thread="s2")
        keys = keys_collection(lt.config.collection)
        assert await mem.backend.count(keys, first[1].scope) > 0
        assert await lt.forget(first[1].id, user_id="jo")
        hits = await lt.recall(TAIL, user_id="jo", k=5)
        assert first[1].id not in {h.memory.id for h in hits} and hits[0].memory.id == second[1].id
        await lt.update(second[1].id, user_id="jo", content="user: nothing about boats any more")
        hits = await lt.recall(TAIL, user_id="jo", k=5)
        assert not hits or hits[0].memory.id != second[1].id or hits[0].similarity < 0.5
        await lt.forget_all(user_id="jo")
        assert await mem.backend.count(keys, first[1].scope) == 0


async def test_other_users_passages_never_come_back(store_url: str) -> None:
    config = LongTermConfig(weights=DENSE, session_weight=0.5, time_weight=0.3, fact_keys=True)
    async with Memkit(store_url, embedder=WindowedEmbedder(), long_term=config) as mem:
        await mem.long_term.add_turns(session(f"{filler(2000)} {TAIL}. I love sailing."), user_id="ann", thread="s")
        mine = await mem.long_term.add_turns(session("I cook pasta on Sundays."), user_id="bob", thread="s")
        hits = await mem.long_term.recall(f"{TAIL} sailing yesterday", user_id="bob", k=10, as_of=DAY)
        assert hits and {h.memory.id for h in hits} <= {m.id for m in mine}
        assert all(h.memory.scope.user_id == "bob" for h in hits)


AS_OF = datetime(2023, 3, 9, 15, 47, tzinfo=UTC)  # a Thursday


def days(windows: list[tuple[float, float]]) -> list[tuple[str, str]]:
    return [tuple(datetime.fromtimestamp(t, UTC).date().isoformat() for t in w) for w in windows]  # type: ignore[misc]


@pytest.mark.parametrize(
    ("query", "inside", "outside"),
    [
        ("Who gave me jewelry last Saturday?", "2023-03-04", "2023-02-25"),
        ("What did I cook two weeks ago?", "2023-02-23", "2023-03-06"),
        ("Where did I travel in May?", "2022-05-15", "2023-05-15"),  # the latest May that has begun
        ("What happened on May 3rd?", "2022-05-03", "2022-05-10"),
        ("What did I buy yesterday?", "2023-03-08", "2023-03-01"),
        ("Which films did I watch last month?", "2023-02-14", "2023-03-05"),
        ("What did I do on 2023-01-15?", "2023-01-15", "2023-01-20"),
        ("What happened a few days ago?", "2023-03-06", "2023-02-20"),
    ],
)
def test_time_expressions_resolve_against_as_of(query: str, inside: str, outside: str) -> None:
    windows = query_windows(query, AS_OF)
    assert windows, query

    def covered(day: str) -> bool:
        moment = datetime.fromisoformat(day).replace(tzinfo=UTC, hour=12).timestamp()
        return any(start <= moment < end for start, end in windows)

    assert covered(inside) and not covered(outside), days(windows)


_TIME_WORDS = ["last", "this", "past", "on", "in", "of", "the", "before", "a", "few", "couple", "two", "3", "12th",
               "2023", "2023-05-03", "ago", "days", "weeks", "month", "year", "weekend", "today", "tonight",
               "yesterday", "night", "Saturday", "Sundays", "May", "March", "Sept.", "Dec", "early", "I", "cooked",
               "what", "did", "Mar", "2nd", "of", "during"]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_TIME_WORDS), min_size=1, max_size=6))
def test_the_quick_check_never_hides_a_time_the_patterns_find(words: list[str]) -> None:
    """``query_windows`` searches once for what every pattern needs before running the eight patterns."""
    from memkit.layers.longterm._when import _windows

    query = " ".join(words)
    assert query_windows(query, AS_OF) == _windows(query, AS_OF)


@pytest.mark.parametrize("query", ["May I ask what you recommend?", "How do I march in step?", "What is my name?"])
def test_queries_without_time_get_no_window(query: str) -> None:
    assert query_windows(query, AS_OF) == []


async def test_time_weight_lifts_turns_said_in_the_named_window() -> None:
    saturday, earlier = datetime(2023, 3, 4, 18, tzinfo=UTC), datetime(2023, 1, 10, 18, tzinfo=UTC)
    said = [Turn(speaker="user", text="I got a silver necklace as a gift.", at=at) for at in (earlier, saturday)]
    for weight, expected in ((0.0, None), (0.3, saturday)):
        config = LongTermConfig(time_weight=weight, neighbour_weight=0.0)
        async with Memkit("memory://", embedder=HashingEmbedder(64), long_term=config) as mem:
            for i, turn in enumerate(said):
                await mem.long_term.add_turns([turn], user_id="jo", thread=f"s{i}")
            hits = await mem.long_term.recall("Who gave me a necklace last Saturday?", user_id="jo", k=2, as_of=AS_OF)
            if expected is None:
                assert all(h.time == 0 for h in hits)
            else:
                assert hits[0].memory.created_at == expected and hits[0].time == pytest.approx(0.3)
                assert hits[1].time == 0 and hits[0].score > hits[1].score


async def test_speaker_weight_lifts_turns_of_the_speaker_the_query_names(store_url: str) -> None:
    said = [Turn(speaker="Melanie", text="I went camping by the lake with the kids.", at=DAY),
            Turn(speaker="Caroline", text="I went camping by the lake with the kids.", at=DAY)]  # fmt: skip
    for weight in (0.0, 0.3):
        config = LongTermConfig(speaker_weight=weight, neighbour_weight=0.0, fact_keys=False)
        async with Memkit(store_url, embedder=HashingEmbedder(64), long_term=config) as mem:
            await mem.long_term.forget_all(user_id="jo")
            for i, turn in enumerate(said):
                await mem.long_term.add_turns([turn], user_id="jo", thread=f"s{i}")
            await mem.long_term.store("Caroline went camping by the lake.", user_id="jo", source="Caroline")
            hits = await mem.long_term.recall("Where did Caroline go camping?", user_id="jo", k=3)
            by_source = {h.memory.source: h for h in hits if h.memory.kind == "turn"}
            if weight == 0.0:
                assert all(h.speaker == 0 for h in hits)
            else:
                assert by_source["Caroline"].speaker == pytest.approx(0.3) and by_source["Melanie"].speaker == 0
                assert by_source["Caroline"].score > by_source["Melanie"].score
                stored = [h for h in hits if h.memory.kind != "turn"]
                assert stored and all(h.speaker == 0 for h in stored)  # only turns have speakers


async def test_neighbour_before_scales_the_lift_from_the_turn_before() -> None:
    """The turn after a strong match takes ``neighbour_before`` of its lift; the turn before takes it whole."""
    said = ["Chatter about the weather today.", "I adopted a greyhound called Pixel.", "More chatter, nothing else."]
    for share in (1.0, 0.5):
        config = LongTermConfig(neighbour_before=share, session_weight=0.0, speaker_weight=0.0, fact_keys=False,
                                feedback_terms=0)  # fmt: skip
        async with Memkit("memory://", embedder=HashingEmbedder(64), long_term=config) as mem:
            await mem.long_term.add_turns([Turn(speaker="Jo", text=t, at=DAY) for t in said], user_id="jo")
            hits = {h.memory.content: h for h in await mem.long_term.recall("greyhound Pixel", user_id="jo", k=3)}
            before, after = hits["Jo: " + said[0]], hits["Jo: " + said[2]]
            assert after.neighbour == pytest.approx(share * before.neighbour) and before.neighbour > 0


def test_neighbour_before_must_be_a_share() -> None:
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValidationError, match="neighbour_before"):
            LongTermConfig(neighbour_before=bad)


def test_speaker_weight_must_be_a_non_negative_number() -> None:
    for bad in (-0.1, float("nan")):
        with pytest.raises(ValidationError, match="speaker_weight"):
            LongTermConfig(speaker_weight=bad)


async def test_session_weight_lifts_turns_of_a_session_with_strong_evidence() -> None:
    config = LongTermConfig(session_weight=0.5, neighbour_weight=0.0)
    strong = ["I adopted a greyhound called Pixel.", "Unrelated chatter about weather.", "Pixel eats salmon kibble."]
    weak = ["My neighbour's cat eats salmon kibble."]
    async with Memkit("memory://", embedder=HashingEmbedder(64), long_term=config) as mem:
        a = await mem.long_term.add_turns([Turn(speaker="user", text=t, at=DAY) for t in strong], user_id="jo",
                                          thread="a")  # fmt: skip
        b = await mem.long_term.add_turns(
            [Turn(speaker="user", text=t, at=DAY) for t in weak], user_id="jo", thread="b"
        )
        hits = await mem.long_term.recall("what does my greyhound Pixel eat, salmon kibble?", user_id="jo", k=4)
        order = [h.memory.id for h in hits]
        assert order.index(a[2].id) < order.index(b[0].id)
        assert hits[order.index(a[2].id)].session > hits[order.index(b[0].id)].session


async def test_fact_keys_index_what_the_extractor_reads() -> None:
    async with Memkit("memory://", embedder=HashingEmbedder(64), long_term=LongTermConfig(fact_keys=True)) as mem:
        [turn] = await mem.long_term.add_turns([Turn(speaker="user", text="Actually, I moved to Porto.", at=DAY)],
                                               user_id="jo")  # fmt: skip
        page = await mem.backend.scan(keys_collection(mem.long_term.config.collection), turn.scope, limit=10)
        assert page.records and all(r.fields["parent"] == turn.id for r in page.records)
        assert any("Porto" in (r.text or "") for r in page.records)
        hits = await mem.long_term.recall("where does the user live?", user_id="jo", k=1)
        assert hits[0].memory.id == turn.id


async def test_clipped_context_is_forgotten_with_its_turn(store_url: str) -> None:
    config = LongTermConfig(context_words=5)
    said = ["one two three four five six seven eight nine ten", "the answer is a teapot", "a third turn"]
    async with Memkit(store_url, embedder=HashingEmbedder(64), long_term=config) as mem:
        stored = await mem.long_term.add_turns([Turn(speaker="Sam", text=t, at=DAY) for t in said], user_id="jo")
        assert stored[1].context == "six seven eight nine ten"  # the end of the turn before, where a question is
        assert await mem.long_term.forget(stored[0].id, user_id="jo")
        after = await mem.long_term.get(stored[1].id, user_id="jo")
        assert after.context is None
        hits = await mem.long_term.recall("six seven eight nine ten", user_id="jo", k=3)
        assert all("seven" not in (h.memory.context or "") + h.memory.content for h in hits)
