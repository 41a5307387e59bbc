"""Query-side lexical rules: conversational filler and pseudo-relevance feedback (``_feedback``)."""

from __future__ import annotations

import anyio
import pytest

from memkit import LongTermConfig, Memkit, Turn, ValidationError
from memkit.backend import Hit, Query, Record, Scope, Scores
from memkit.embedders import HashingEmbedder
from memkit.layers.longterm._feedback import _QUERY_REPEAT, expanded, without_filler
from memkit.text import tokenize


def _hit(text: str, score: float) -> Hit:
    record = Record(id=text[:8], scope=Scope(user_id="u"), body=b"", text=text)
    scores = Scores(final=score, similarity=0.0, lexical=score, recency=0.0, importance=0.0)
    return Hit(record=record, scores=scores)


def test_filler_is_dropped_but_content_kept() -> None:
    text = without_filler("What hotel did I mention in our previous chat?")
    assert "hotel" in text
    assert "mention" not in text and "previous" not in text and "chat" not in text


def test_a_query_of_only_filler_is_kept_whole() -> None:
    assert without_filler("Can you remind me?") == "Can you remind me?"


def test_feedback_adds_the_best_turns_shared_words_not_the_querys() -> None:
    query = Query(scope=Scope(user_id="u"), text="hotel booking", k=5)
    hits = [_hit("booked the Ritz hotel in Paris", 0.9), _hit("Paris in June, the Ritz again", 0.8),
            _hit("my dog Rex", 0.01)]  # fmt: skip
    grown = expanded(query, hits, 2)
    assert grown.text is not None
    added = set(tokenize(grown.text)) - set(tokenize("hotel booking"))
    assert added == set(tokenize("Ritz Paris"))
    assert tokenize(grown.text).count(tokenize("hotel")[0]) == _QUERY_REPEAT > 1  # the question keeps most weight


def test_only_turns_that_share_a_word_with_the_query_feed_back() -> None:
    query = Query(scope=Scope(user_id="u"), text="peanuts allergy", k=5)
    recent = Hit(record=Record(id="t", scope=Scope(user_id="u"), body=b"", text="I moved to Porto last spring"),
                 scores=Scores(final=0.6, similarity=0.0, lexical=0.0, recency=1.0, importance=0.5))  # fmt: skip
    assert expanded(query, [recent], 5) is query
    grown = expanded(query, [recent, _hit("peanuts gave me hives", 0.5)], 5)
    assert grown.text is not None and "hives" in grown.text and "Porto" not in grown.text


def test_a_recent_turn_that_matches_nothing_is_not_lifted_above_the_answer() -> None:
    async def main() -> list[str]:
        async with Memkit("memory://", embedder="hashing") as mem:  # feedback on: the default
            lt = mem.long_term
            await lt.store("Ada is allergic to peanuts.", user_id="ada", kind="fact")
            await lt.add_turns([Turn(speaker="Ada", text="I moved to Porto last spring.")], user_id="ada", thread="t")
            await lt.store("Bob likes peanuts.", user_id="bob")  # another user's: the words' statistics move
            return [hit.memory.content for hit in await lt.recall("peanuts allergy", user_id="ada")]

    assert anyio.run(main)[0] == "Ada is allergic to peanuts."


def test_feedback_without_hits_or_terms_leaves_the_query() -> None:
    query = Query(scope=Scope(user_id="u"), text="hotel", k=5)
    assert expanded(query, [], 5) is query
    assert expanded(query, [_hit("the Ritz", 1.0)], 0) is query


def test_config_checks_the_new_settings() -> None:
    with pytest.raises(ValidationError):
        LongTermConfig(feedback_terms=-1)
    with pytest.raises(ValidationError):
        LongTermConfig(drop_filler="yes")  # type: ignore[arg-type]


def test_recall_with_both_rules_finds_the_turn_and_stored_memories_are_not_expanded() -> None:
    async def main() -> list[str]:
        config = LongTermConfig(drop_filler=True, feedback_terms=5)
        async with Memkit("memory://", embedder=HashingEmbedder(), long_term=config) as mem:
            for i, text in enumerate(("I booked the Ritz hotel in Paris", "my dog is Rex", "my cat is Tom")):
                await mem.long_term.add_turns([Turn(speaker="user", text=text)], user_id="u", thread=f"s{i}")
            hits = await mem.long_term.recall("Which hotel did I mention before?", user_id="u", k=1)
            await mem.long_term.store("Ada prefers window seats", user_id="ada")
            await mem.long_term.store("Ada likes the aisle on trains", user_id="ada")
            [stored] = await mem.long_term.recall("window seats", user_id="ada", k=1)
            assert stored.lexical == pytest.approx(1.0)  # the statements' words were not added to the query
            return [h.memory.content for h in hits]

    assert "Ritz" in anyio.run(main)[0]
