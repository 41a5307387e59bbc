"""The offline fact extractor: kinds, importance, third-person wording, filler, questions and what it skips."""

from __future__ import annotations

from typing import Any

import pytest

from memkit.extract import Fact, HeuristicConfig, HeuristicFactExtractor, ObservedTurn
from memkit.extract._wording import third_person

pytestmark = pytest.mark.anyio


def _turn(*texts: str, name: str | None = None, assistant: str = "Noted.") -> ObservedTurn:
    messages: list[dict[str, Any]] = []
    for text in texts:
        messages.append({"role": "user", "content": text, **({"name": name} if name else {})})
        messages.append({"role": "assistant", "content": assistant})
    return ObservedTurn(messages=messages, user_id="u", session_id="s")


def _facts(*texts: str, **config: Any) -> list[Fact]:
    return HeuristicFactExtractor(HeuristicConfig(**config)).read(_turn(*texts)).facts


@pytest.mark.parametrize(
    ("said", "kind", "text"),
    [
        ("I love hiking in the mountains.", "preference", "The user loves hiking in the mountains."),
        ("I prefer window seats on long flights", "preference", "The user prefers window seats on long flights"),
        ("I'm a big fan of Japanese jazz", "preference", "The user is a big fan of Japanese jazz"),
        ("I hate cilantro", "dislike", "The user hates cilantro"),
        ("I don't like horror movies", "dislike", "The user doesn't like horror movies"),
        ("I'm not a fan of early meetings", "dislike", "The user is not a fan of early meetings"),
        ("My sister Bea lives in Porto", "fact", "The user's sister Bea lives in Porto"),
        ("My name is Ada Lovelace", "fact", "The user's name is Ada Lovelace"),
        ("I work at Globex as a data engineer", "fact", "The user works at Globex as a data engineer"),
        ("I'm allergic to peanuts", "fact", "The user is allergic to peanuts"),
        ("I have two kids and a dog", "fact", "The user has two kids and a dog"),
        ("I ran a charity race last Saturday", "fact", "The user ran a charity race last Saturday"),
        ("I'm going to visit Kyoto in April", "plan", "The user is going to visit Kyoto in April"),
        ("Gonna check out career options", "plan", "The user is gonna check out career options"),
        ("We're thinking about going camping next month", "plan",
         "The user and others are thinking about going camping next month"),
        ("I've decided to take the job in Berlin", "decision", "The user has decided to take the job in Berlin"),
        ("Let's go with the blue logo for the launch", "decision", "Let's go with the blue logo for the launch"),
        ("Remember that my door code is 4411", "remember", "The user's door code is 4411"),
        ("Please remember I take my coffee black", "remember", "The user takes the user's coffee black"),
        ("Actually, I moved to Porto last month", "correction", "The user moved to Porto last month"),
        ("I no longer eat meat", "correction", "The user no longer eats meat"),
    ],
)  # fmt: skip
def test_kinds_and_wording(said: str, kind: str, text: str) -> None:
    [fact] = _facts(said)
    assert (fact.kind, fact.text) == (kind, text)
    assert 0 < fact.importance <= 1 and fact.message_index == 0 and fact.quote


@pytest.mark.parametrize(
    "said",
    ["ok", "Thanks!", "got it", "ok thanks", "Sounds good, thanks a lot!", "Haha yes", "👍", "Hey Mel!", "cool cool",
     "Thank you so much!", "Good morning", "Will do"],
)  # fmt: skip
def test_filler_is_never_a_fact(said: str) -> None:
    extraction = HeuristicFactExtractor().read(_turn(said))
    assert extraction.facts == []
    assert [s.reason for s in extraction.skipped] == ["filler"]


@pytest.mark.parametrize(
    "said",
    [
        "What's the weather like in Lisbon?",
        "Can you book me a table for two?",
        "Could you suggest some games for the kids",
        "Do you have any tips for a first marathon?",
        "I was wondering if you could help me with my CV",
        "The weather was lovely today.",  # not about the speaker, and no relation between named things
        "That's a great point.",
        "It was so much fun!",
        "I loved it!",  # nothing specific: "it" is not a memory on its own
        "You'd be a great counselor!",
    ],
)
def test_what_it_cannot_classify_is_not_stored(said: str) -> None:
    extraction = HeuristicFactExtractor().read(_turn(said))
    assert extraction.facts == [] and extraction.skipped


def test_a_long_message_is_read_sentence_by_sentence() -> None:
    said = ("Can you recommend a good cobbler? By the way, I just wore my new black Converse to run errands "
            "yesterday. I'm also planning a road trip to the coast. Thanks!")  # fmt: skip
    extraction = HeuristicFactExtractor().read(_turn(said))
    assert [(f.kind, f.text) for f in extraction.facts] == [
        ("fact", "The user just wore the user's new black Converse to run errands yesterday."),
        ("plan", "The user is also planning a road trip to the coast."),
    ]
    assert {s.reason for s in extraction.skipped} == {"a question or a request", "filler"}


def test_one_sentence_stating_two_things_gives_two_facts_with_their_relations() -> None:
    name, home = _facts("My name is Ada and I live in Paris.")
    assert (name.text, name.slot, name.value, name.functional) == ("The user's name is Ada", "is_named", "Ada", True)
    assert (home.text, home.slot, home.value, home.subject) == ("The user lives in Paris.", "lives_in", "Paris",
                                                                 "the user")  # fmt: skip


def test_relations_of_other_people_and_tastes_have_slots() -> None:
    [sister] = _facts("My sister Bea lives in Porto.")
    assert (sister.subject, sister.slot, sister.value, sister.functional) == ("Bea", "lives_in", "Porto", True)
    [moved] = _facts("Bea moved to Lisbon")  # third person: read by the graph's relation patterns
    assert (moved.subject, moved.slot, moved.value) == ("Bea", "lives_in", "Lisbon")
    [likes] = _facts("I love sushi")
    [stopped] = _facts("I don't like sushi anymore")
    assert likes.slot == stopped.slot == "taste:sushi" and (likes.value, stopped.value) == ("likes", "dislikes")
    assert stopped.kind == "correction" and stopped.memory_kind == "preference"


def test_names_and_listener() -> None:
    turn = ObservedTurn(messages=[{"role": "assistant", "name": "Melanie", "content": "How are you?"},
                                  {"role": "user", "name": "Caroline",
                                   "content": "Melanie, I told you about my trip and you loved it. I went to a "
                                              "support group yesterday."}], user_id="u")  # fmt: skip
    texts = [f.text for f in HeuristicFactExtractor().read(turn).facts]
    assert texts == ["Caroline told Melanie about Caroline's trip and Melanie loved it.",
                     "Caroline went to a support group yesterday."]  # fmt: skip
    named = HeuristicFactExtractor(HeuristicConfig(user_name="Ada")).read(_turn("I love tea")).facts
    assert [f.text for f in named] == ["Ada loves tea"]
    verbatim = _facts("I love tea", wording="verbatim")
    assert [f.text for f in verbatim] == ["The user: I love tea"]


def test_importance_reflects_the_kind_and_the_wording() -> None:
    def importance(said: str) -> float:
        [fact] = _facts(said)
        return fact.importance

    assert importance("Remember that my door code is 4411") >= 0.9
    assert importance("I'm allergic to peanuts") > importance("I went to the beach with friends")
    assert importance("I really love jazz") > importance("I like jazz")
    assert importance("Maybe I'll try the new ramen place") < importance("I'll try the new ramen place")
    assert importance("Actually, I moved to Porto") >= 0.8


def test_only_the_users_messages_are_read_unless_configured() -> None:
    turn = ObservedTurn(messages=[{"role": "user", "content": "Book it please"},
                                  {"role": "assistant", "content": "I booked the 7:45 flight to Lisbon for you."},
                                  {"role": "tool", "content": "I love JSON"}], user_id="u")  # fmt: skip
    assert HeuristicFactExtractor().read(turn).facts == []
    both = HeuristicFactExtractor(HeuristicConfig(roles=("user", "assistant"))).read(turn).facts
    assert [(f.message_index, f.kind) for f in both] == [(1, "decision")]


def test_content_parts_and_empty_messages() -> None:
    turn = ObservedTurn(messages=[{"role": "user", "content": [{"type": "text", "text": "I love tea."},
                                                               {"type": "image_url", "image_url": {"url": "x"}}]},
                                  {"role": "user", "content": None}, {"role": "user"}], user_id="u")  # fmt: skip
    assert [f.text for f in HeuristicFactExtractor().read(turn).facts] == ["The user loves tea."]


async def test_a_long_turn_is_read_off_the_event_loop() -> None:
    long = " ".join(["I went to the museum in Lyon with my cousin."] * 200)
    extraction = await HeuristicFactExtractor(HeuristicConfig(offload_chars=1_000)).extract(_turn(long))
    assert [f.text for f in extraction.facts] == ["The user went to the museum in Lyon with the user's cousin."]


@pytest.mark.parametrize(
    ("first", "third"),
    [
        ("I have a dog", "The user has a dog"),
        ("I do yoga every morning", "The user does yoga every morning"),
        ("I go to the gym", "The user goes to the gym"),
        ("I watch a lot of movies", "The user watches a lot of movies"),
        ("I try to study every day", "The user tries to study every day"),
        ("I don't eat pork", "The user doesn't eat pork"),
        ("I haven't been to Spain", "The user hasn't been to Spain"),
        ("I'd never been there", "The user had never been there"),
        ("I'd love to go", "The user would love to go"),
        ("I'll call my mom", "The user will call the user's mom"),
        ("I'm from Lyon", "The user is from Lyon"),
        ("I went there with my friends", "The user went there with the user's friends"),
        ("I told you my plan", "The user told the assistant the user's plan"),
    ],
)
def test_third_person(first: str, third: str) -> None:
    assert third_person(first) == third
