"""AnthropicChat over real HTTP against the double: OpenAI-shaped messages converted, structured output by a
forced tool, the repair as a tool result."""

from __future__ import annotations

import msgspec
import pytest

from memkit.errors import StructuredOutputError, ValidationError
from memkit.llm import LLM, ChatMessage
from memkit.llm._messages import to_anthropic
from memkit.testing.llm_double import LLMDouble, json_reply, text_reply, tool_call_reply
from tests.llm._clients import USER, anthropic_chat

pytestmark = pytest.mark.anyio


class Fact(msgspec.Struct):
    text: str
    confidence: float


async def test_complete_sends_system_on_top_and_the_headers(double: LLMDouble) -> None:
    double.script("anthropic", text_reply("Hi!", input_tokens=30, output_tokens=2))
    messages = [{"role": "system", "content": "Be brief."}, *USER]
    async with anthropic_chat(double) as llm:
        assert isinstance(llm, LLM)
        assert await llm.complete(messages, temperature=0.0) == "Hi!"
        assert (llm.usage.calls, llm.usage.input_tokens, llm.usage.output_tokens) == (1, 30, 2)
    (request,) = double.requests("anthropic")
    assert request.headers["x-api-key"] == "sk-ant-test" and request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    assert request.body == {
        "model": "claude-test",
        "max_tokens": 4096,  # the API requires it: default_max_tokens
        "system": "Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}],
        "temperature": 0.0,
    }


async def test_a_tool_conversation_is_converted(double: LLMDouble) -> None:
    """What an agent's short-term memory hands over: tool calls and their results, in OpenAI shape."""
    double.script("anthropic", "It is 18 degrees in Paris.")
    call = {"id": "call_9", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}
    messages: list[ChatMessage] = [
        {"role": "system", "content": "You are a travel agent."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "user", "content": [{"type": "text", "text": "Celsius please."}]},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_9", "content": "18C, cloudy"},
        {"role": "system", "content": "Answer in one sentence."},
    ]
    async with anthropic_chat(double) as llm:
        assert await llm.complete(messages, max_tokens=64) == "It is 18 degrees in Paris."
    body = double.requests("anthropic")[0].body
    assert body["system"] == "You are a travel agent.\n\nAnswer in one sentence."
    assert body["max_tokens"] == 64
    assert body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Weather in Paris?"}, {"type": "text", "text": "Celsius please."}],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "call_9", "name": "weather", "input": {"city": "Paris"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_9", "content": "18C, cloudy"}]},
    ]


def test_tool_results_open_their_merged_user_message_and_images_convert() -> None:
    system, messages = to_anthropic(
        [
            {"role": "developer", "content": [{"type": "text", "text": "Rules."}]},
            {"role": "assistant", "content": None, "tool_calls": [_call("c1", "{}"), _call("c2", "[1, 2]")]},
            {"role": "user", "content": "Here is a photo."},
            {"role": "tool", "tool_call_id": "c1", "content": "done"},
            {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "also done"}]},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}]},
            {"role": "assistant", "content": ""},
        ]
    )
    assert system == "Rules."
    assert messages[0] == {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "c1", "name": "f", "input": {}},
            {"type": "tool_use", "id": "c2", "name": "f", "input": {"value": [1, 2]}},  # not an object: kept whole
        ],
    }
    assert [block["type"] for block in messages[1]["content"]] == ["tool_result", "tool_result", "text", "image"]
    assert messages[1]["content"][1]["content"] == [{"type": "text", "text": "also done"}]
    assert messages[1]["content"][3]["source"] == {"type": "base64", "media_type": "image/png", "data": "iVBO"}
    assert len(messages) == 2  # the empty assistant turn says nothing and is left out


def test_messages_that_cannot_convert_are_refused() -> None:
    with pytest.raises(ValidationError, match="tool_call_id"):
        to_anthropic([{"role": "tool", "content": "orphan"}])
    with pytest.raises(ValidationError, match="role 'narrator'"):
        to_anthropic([{"role": "narrator", "content": "Once upon a time"}])


async def test_structured_forces_a_tool_and_decodes_its_input(double: LLMDouble) -> None:
    double.script("anthropic", json_reply({"text": "likes tea", "confidence": 0.8}))
    async with anthropic_chat(double) as llm:
        assert await llm.structured(USER, Fact, max_tokens=100) == Fact("likes tea", 0.8)
    body = double.requests("anthropic")[0].body
    (tool,) = body["tools"]
    assert tool["name"] == "Fact" and tool["input_schema"]["required"] == ["text", "confidence"]
    assert body["tool_choice"] == {"type": "tool", "name": "Fact"} and body["max_tokens"] == 100


async def test_invalid_tool_input_is_repaired_through_a_tool_result(double: LLMDouble) -> None:
    double.script(
        "anthropic", json_reply({"text": "x", "confidence": "high"}), json_reply({"text": "x", "confidence": 1})
    )
    async with anthropic_chat(double) as llm:
        assert await llm.structured(USER, Fact) == Fact("x", 1.0)
    first, repair = (r.body for r in double.requests("anthropic"))
    assert repair["messages"][: len(first["messages"])] == first["messages"]
    assistant, user = repair["messages"][len(first["messages"]) :]
    (tool_use,) = assistant["content"]
    assert tool_use["type"] == "tool_use" and tool_use["input"] == {"text": "x", "confidence": "high"}
    result, ask = user["content"]
    assert result["type"] == "tool_result" and result["tool_use_id"] == tool_use["id"] and result["is_error"] is True
    assert "Expected `float`, got `str` - at `$.confidence`" in result["content"]
    assert ask["type"] == "text" and "Fact" in ask["text"]
    assert repair["tool_choice"] == {"type": "tool", "name": "Fact"}


async def test_tool_input_still_invalid_raises_with_the_raw_json(double: LLMDouble) -> None:
    double.script("anthropic", json_reply({"text": 1}), json_reply({"text": 2}))
    async with anthropic_chat(double) as llm:
        with pytest.raises(StructuredOutputError) as caught:
            await llm.structured(USER, Fact)
    assert msgspec.json.decode(caught.value.raw) == {"text": 2}
    assert "$.text" in caught.value.problem


async def test_truncated_tool_input_is_repaired(double: LLMDouble) -> None:
    double.script("anthropic", json_reply({"text": "a"}, truncated=True), json_reply({"text": "a", "confidence": 1}))
    async with anthropic_chat(double) as llm:
        assert await llm.structured(USER, Fact) == Fact("a", 1.0)
    result = double.requests("anthropic")[1].body["messages"][-1]["content"][0]
    assert "cut off" in result["content"]


async def test_a_proxy_that_ignores_the_forced_tool_still_gets_decoded(double: LLMDouble) -> None:
    double.script("anthropic", '```json\n{"text": "a", "confidence": 1}\n```')
    async with anthropic_chat(double) as llm:
        assert await llm.structured(USER, Fact) == Fact("a", 1.0)


async def test_a_tool_call_answer_leaves_no_text(double: LLMDouble) -> None:
    double.script("anthropic", tool_call_reply("search", {"q": "tea"}))
    async with anthropic_chat(double) as llm:
        assert await llm.complete(USER) == ""


async def test_a_base_url_with_v1_is_accepted(double: LLMDouble) -> None:
    double.script("anthropic", "ok")
    async with anthropic_chat(double, base_url=f"{double.anthropic_url}/v1/") as llm:
        assert await llm.complete(USER) == "ok"
        assert llm.model_id == f"anthropic:{double.anthropic_url}:claude-test"
    assert double.requests("anthropic")[0].path == "/v1/messages"


def _call(call_id: str, arguments: str) -> dict[str, object]:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": arguments}}


async def test_structured_checks_the_messages_before_sending(double: LLMDouble) -> None:
    async with anthropic_chat(double) as llm:
        with pytest.raises(ValidationError, match="sequence"):
            await llm.structured("hello", Fact)  # type: ignore[arg-type]
    assert double.requests() == []
