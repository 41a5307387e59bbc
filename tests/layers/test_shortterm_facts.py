"""A 30-turn conversation with planted facts, folded several times: every fact is still in what is sent.

Also: the session works the same on every backend with a key-value face (plain Redis included).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from memkit import Memkit
from memkit.layers.shortterm import ShortTermConfig

pytestmark = pytest.mark.anyio

FILLER = [
    "Hi there, how is your day going so far? Mine has been a little hectic but fine overall.",
    "Pretty good, thanks for asking. Busy morning with emails, and the coffee machine broke again.",
    "Sounds good to me. Let me think about it for a moment and get back to you in a bit.",
    "Okay, that makes sense, thank you. It is a lot to take in but we will get there somehow.",
    "Sure, happy to help with that. Just tell me whenever you are ready to continue with it.",
    "Great, talk soon about the rest of it. I will be around most of the afternoon anyway.",
]
# (where in the conversation, the message, what must survive)
PLANTED: list[tuple[int, dict[str, Any], str]] = [
    (
        2,
        {"role": "user", "content": "My manager is called Ingrid Svensson, she signs off the purchase."},
        "Ingrid Svensson",
    ),
    (5, {"role": "user", "content": "I prefer green tea over coffee in the mornings."}, "green tea"),
    (8, {"role": "assistant", "content": "Decision: we go with the blue logo for the launch."}, "blue logo"),
    (11, {"role": "user", "content": "The total budget is 4,750 dollars for the offsite."}, "4,750"),
    (14, {"role": "user", "content": "We need 12 chairs in the main room."}, "12 chairs"),
    (17, {"role": "user", "content": "The kickoff meeting starts at 15:30 on Thursday."}, "15:30"),
]
TOOL_FACTS = ["18 C and sunny in Lisbon", "TP1351 departs 07:45"]


def tool_turn(i: int, name: str, result: str) -> list[dict[str, Any]]:
    call = {"id": f"call{i}", "type": "function", "function": {"name": name, "arguments": json.dumps({"q": name})}}
    return [{"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call{i}", "content": result}]  # fmt: skip


def conversation() -> list[list[dict[str, Any]]]:
    """30 turns: small talk with the facts above planted in it, and two tool calls whose results matter."""
    planted = {at: message for at, message, _ in PLANTED}
    turns: list[list[dict[str, Any]]] = []
    for i in range(30):
        if i in planted:
            turns.append([planted[i]])
        elif i == 20:
            turns.append(tool_turn(i, "weather", f"Weather: {TOOL_FACTS[0]}."))
        elif i == 24:
            turns.append(tool_turn(i, "flights", f"Found: {TOOL_FACTS[1]}, seat 14C free."))
        else:
            role = "user" if i % 2 == 0 else "assistant"
            turns.append([{"role": role, "content": FILLER[i % len(FILLER)]}])
    return turns


def everything_sent(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages)


async def test_every_planted_fact_survives_several_folds_with_the_extractive_summarizer() -> None:
    config = ShortTermConfig(max_tokens=400, keep_last=2, summary_tokens=200, tokenizer="estimate")
    async with Memkit("memory://", embedder="hashing", short_term=config) as mem:
        session = mem.short_term.session("planted", user_id="ada")
        folds, summary = 0, ""
        for turn in conversation():
            await session.add_many(turn)
            await session.wait_idle()  # folds run in the background
            folds += summary != (summary := await session.summary())
        sent = everything_sent(await session.to_messages())
    assert folds >= 3, "the test must fold several times"
    missing = [fact for _, _, fact in PLANTED if fact not in sent] + [f for f in TOOL_FACTS if f not in sent]
    assert not missing, f"lost in folding: {missing}\n{sent}"
    assert "how is your day" not in sent  # small talk is what goes


async def test_a_session_on_every_backend_with_a_key_value_face(kv_url: str) -> None:
    config = ShortTermConfig(max_tokens=400, keep_last=3, summary_tokens=200, tokenizer="estimate")
    async with Memkit(kv_url, embedder="hashing", short_term=config, layer_urls={"long_term": "memory://"}) as mem:
        session = mem.short_term.session("everywhere", user_id="ada", agent_id="planner")
        for turn in conversation():
            await session.add_many(turn)
        await session.wait_idle()
        await session.compact()
        sent = everything_sent(await session.to_messages())
        assert all(fact in sent for _, _, fact in PLANTED)
        assert await mem.short_term.session("everywhere", user_id="bob", agent_id="planner").history() == []
        await session.clear()
        assert await session.history() == [] and await session.summary() == ""


def follows_the_instructions(body: dict[str, Any]) -> str:
    """The double's stand-in for a model told to keep facts: the previous summary's lines and every new line
    except small talk. memkit must hand it the previous summary and every folded message (tool results
    included), and send what it answers; lose either and a fact goes missing below."""
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    assert "decision" in system and "tool result" in system and "number" in system
    previous, new = user.split("\n\nNew messages:\n")
    kept = [line for line in previous.removeprefix("Previous summary:\n").splitlines() if line.startswith("- ")]
    kept += [f"- {line}" for line in new.splitlines() if not any(line.endswith(f) for f in FILLER)]
    return "\n".join(kept)


async def test_every_planted_fact_survives_several_folds_with_the_llm_summarizer() -> None:
    from memkit.layers.shortterm import LLMSummarizer
    from memkit.llm import OpenAIChat
    from memkit.testing.llm_double import LLMDouble

    with LLMDouble() as double:
        double.handler("openai", follows_the_instructions)
        async with OpenAIChat("summary-model", base_url=double.openai_url, api_key="test") as llm:
            config = ShortTermConfig(max_tokens=400, keep_last=2, summary_tokens=200, tokenizer="estimate",
                                     summarizer=LLMSummarizer(llm))  # fmt: skip
            async with Memkit("memory://", embedder="hashing", short_term=config) as mem:
                session = mem.short_term.session("planted-llm", user_id="ada")
                for turn in conversation():
                    await session.add_many(turn)
                    await session.wait_idle()
                sent = everything_sent(await session.to_messages())
        folds = double.requests("openai")
    assert len(folds) >= 3, "the test must fold several times"
    assert all(r.body["max_tokens"] == 200 for r in folds)  # the bound is passed to the model
    missing = [fact for _, _, fact in PLANTED if fact not in sent] + [f for f in TOOL_FACTS if f not in sent]
    assert not missing, f"lost in folding: {missing}\n{sent}"
