"""OpenAIChat over real HTTP against the double: answers, request shape, structured output and its repair."""

from __future__ import annotations

import msgspec
import pytest

from memkit.errors import LLMError, LLMRefusedError, StructuredOutputError, ValidationError
from memkit.llm import LLM, OpenAIChat
from memkit.testing.llm_double import LLMDouble, json_reply, status_reply, text_reply
from tests.llm._clients import USER, openai_chat

pytestmark = pytest.mark.anyio


class Fact(msgspec.Struct):
    text: str
    confidence: float


class Tagged(msgspec.Struct):
    text: str
    tags: list[str] = []


async def test_complete_sends_the_conversation_and_returns_the_text(double: LLMDouble) -> None:
    double.script("openai", text_reply("Hi there", input_tokens=12, output_tokens=3))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}]
    async with openai_chat(double) as llm:
        assert isinstance(llm, LLM)
        assert await llm.complete(messages, max_tokens=50, temperature=0.2) == "Hi there"
        assert llm.usage.calls == 1 and llm.usage.input_tokens == 12 and llm.usage.output_tokens == 3
    (request,) = double.requests("openai")
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.body == {"model": "gpt-test", "messages": messages, "max_tokens": 50, "temperature": 0.2}


async def test_options_left_out_are_not_sent(double: LLMDouble) -> None:
    double.script("openai", "ok")
    async with openai_chat(double, max_tokens_param="max_completion_tokens") as llm:
        await llm.complete(USER)
        double.script("openai", "ok")
        await llm.complete(USER, max_tokens=7)
    first, second = (r.body for r in double.requests("openai"))
    assert set(first) == {"model", "messages"}
    assert second["max_completion_tokens"] == 7 and "max_tokens" not in second


async def test_structured_valid_first_time_uses_a_strict_json_schema(double: LLMDouble) -> None:
    double.script("openai", json_reply({"text": "likes tea", "confidence": 0.9}))
    async with openai_chat(double) as llm:
        fact = await llm.structured(USER, Fact)
    assert fact == Fact("likes tea", 0.9)
    (request,) = double.requests("openai")
    response_format = request.body["response_format"]
    assert response_format["type"] == "json_schema"
    spec = response_format["json_schema"]
    assert spec["name"] == "Fact" and spec["strict"] is True
    assert spec["schema"]["type"] == "object" and spec["schema"]["additionalProperties"] is False
    assert spec["schema"]["required"] == ["text", "confidence"]


async def test_a_schema_with_defaults_is_not_strict(double: LLMDouble) -> None:
    """OpenAI's strict mode wants every property required; a Struct default does not fit it."""
    double.script("openai", json_reply({"text": "x"}))
    async with openai_chat(double) as llm:
        assert await llm.structured(USER, Tagged) == Tagged("x", [])
    assert double.requests("openai")[0].body["response_format"]["json_schema"]["strict"] is False


async def test_a_non_object_schema_is_asked_for_under_value(double: LLMDouble) -> None:
    double.script("openai", json_reply({"value": [{"text": "a", "confidence": 1}]}))
    async with openai_chat(double) as llm:
        facts = await llm.structured(USER, list[Fact])
    assert facts == [Fact("a", 1.0)]
    schema = double.requests("openai")[0].body["response_format"]["json_schema"]["schema"]
    assert schema["required"] == ["value"] and schema["properties"]["value"]["type"] == "array"
    assert "$defs" in schema  # the item type stays reachable through its $ref


@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"text": "a", "confidence": 1}\n```',
        'Here it is:\n```\n{"text": "a", "confidence": 1}\n```\nAnything else?',
        '<think>The user wants a fact.</think>\n{"text": "a", "confidence": 1}',
    ],
)
async def test_fences_and_think_blocks_are_stripped(double: LLMDouble, text: str) -> None:
    double.script("openai", text)
    async with openai_chat(double) as llm:
        assert await llm.structured(USER, Fact) == Fact("a", 1.0)
    assert len(double.requests("openai")) == 1


async def test_invalid_output_is_repaired_once_with_the_error_shown(double: LLMDouble) -> None:
    double.script("openai", json_reply({"text": 42, "confidence": 1}), json_reply({"text": "42", "confidence": 1}))
    async with openai_chat(double) as llm:
        assert await llm.structured(USER, Fact) == Fact("42", 1.0)
        assert llm.usage.calls == 2
    first, repair = double.requests("openai")
    *history, bad, correction = repair.body["messages"]
    assert history == first.body["messages"]
    assert bad == {"role": "assistant", "content": '{"text": 42, "confidence": 1}'}
    assert correction["role"] == "user"
    assert "Expected `str`, got `int` - at `$.text`" in correction["content"]
    assert "JSON only" in correction["content"]


async def test_output_still_invalid_after_the_repair_raises_with_the_raw_text(double: LLMDouble) -> None:
    double.script("openai", "not json at all", '{"text": "half"}')
    async with openai_chat(double) as llm:
        with pytest.raises(StructuredOutputError) as caught:
            await llm.structured(USER, Fact)
    assert caught.value.raw == '{"text": "half"}'
    assert "confidence" in caught.value.problem and "confidence" in str(caught.value)
    assert len(double.requests("openai")) == 2  # one repair, not more


async def test_truncated_json_is_repaired_and_the_model_told_it_was_cut_off(double: LLMDouble) -> None:
    double.script(
        "openai", text_reply('{"text": "a very long', truncated=True), json_reply({"text": "a", "confidence": 1})
    )
    async with openai_chat(double) as llm:
        assert await llm.structured(USER, Fact, max_tokens=20) == Fact("a", 1.0)
    repair = double.requests("openai")[1].body
    assert "cut off" in repair["messages"][-1]["content"] and repair["max_tokens"] == 20


async def test_truncated_twice_raises_saying_so(double: LLMDouble) -> None:
    double.script("openai", text_reply('{"text": "a', truncated=True), text_reply('{"text": "b', truncated=True))
    async with openai_chat(double) as llm:
        with pytest.raises(StructuredOutputError, match="cut off") as caught:
            await llm.structured(USER, Fact)
    assert caught.value.raw == '{"text": "b'


async def test_truncated_but_complete_json_is_accepted(double: LLMDouble) -> None:
    double.script("openai", json_reply({"text": "a", "confidence": 1}, truncated=True))
    async with openai_chat(double) as llm:
        assert await llm.structured(USER, Fact) == Fact("a", 1.0)
    assert len(double.requests("openai")) == 1


async def test_json_schema_refused_falls_back_to_json_mode_and_remembers(double: LLMDouble) -> None:
    refusal = "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model."
    double.script("openai", status_reply(400, refusal), json_reply({"text": "a", "confidence": 1}))
    async with openai_chat(double) as llm:
        assert await llm.structured(USER, Fact) == Fact("a", 1.0)
        assert llm.structured_mode == "json_object"
        double.script("openai", json_reply({"text": "b", "confidence": 0}))
        assert await llm.structured(USER, Fact) == Fact("b", 0.0)
    refused, fallback, later = (r.body for r in double.requests("openai"))
    assert refused["response_format"]["type"] == "json_schema"
    for body in (fallback, later):  # the next call goes straight to JSON mode
        assert body["response_format"] == {"type": "json_object"}
        assert body["messages"][0]["role"] == "system" and '"confidence"' in body["messages"][0]["content"]


async def test_a_400_about_something_else_is_a_refusal(double: LLMDouble) -> None:
    double.script("openai", status_reply(400, "messages[0].content: too long"))
    async with openai_chat(double) as llm:
        with pytest.raises(LLMRefusedError, match="too long"):
            await llm.structured(USER, Fact)
        assert llm.structured_mode == "json_schema"
    assert len(double.requests("openai")) == 1


async def test_prompt_mode_puts_the_schema_in_the_existing_system_prompt(double: LLMDouble) -> None:
    double.script("openai", json_reply({"text": "a", "confidence": 1}))
    messages = [{"role": "system", "content": "You extract facts."}, *USER]
    async with openai_chat(double, structured="prompt") as llm:
        await llm.structured(messages, Fact)
    body = double.requests("openai")[0].body
    assert "response_format" not in body and len(body["messages"]) == 2
    system = body["messages"][0]["content"]
    assert system.startswith("You extract facts.\n\n") and '"required":["text","confidence"]' in system


async def test_a_body_that_is_not_a_completion_points_at_the_base_url(double: LLMDouble) -> None:
    double.script("openai", status_reply(200, body="<html>a web server</html>"))
    async with openai_chat(double) as llm:
        with pytest.raises(LLMError, match="base URL"):
            await llm.complete(USER)


async def test_bad_arguments_are_refused_before_sending(double: LLMDouble) -> None:
    with pytest.raises(ValidationError, match="structured"):
        OpenAIChat("m", base_url=double.openai_url, structured="xml")  # type: ignore[arg-type]
    async with openai_chat(double) as llm:
        with pytest.raises(ValidationError, match="sequence"):
            await llm.complete("hello")  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match="role"):
            await llm.complete([{"content": "no role"}])
    assert double.requests() == []
