"""A chat client for Anthropic's Messages API; structured output through a forced tool call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import httpx
import msgspec

from memkit.errors import LLMError
from memkit.llm._budget import LLMBudget
from memkit.llm._env import key_hint, settings_for
from memkit.llm._http import ChatHTTP, HTTPChatClient, RetryPolicy
from memkit.llm._messages import as_messages, to_anthropic
from memkit.llm._protocol import ChatMessage
from memkit.llm._structured import Answer, Target, structured_with_repair, target_for

__all__ = ["AnthropicChat"]

T = TypeVar("T")


class _Block(msgspec.Struct):
    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: msgspec.Raw = msgspec.Raw()  # kept as the model's JSON, to decode with msgspec.json like any answer


class _Usage(msgspec.Struct):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class _Message(msgspec.Struct):
    content: list[_Block]
    stop_reason: str | None = None
    usage: _Usage | None = None


_decode_message = msgspec.json.Decoder(_Message).decode


class AnthropicChat(HTTPChatClient):
    """POSTs to ``{base_url}/v1/messages``. Takes messages in OpenAI shape and converts them (see ``_messages``).

    Arguments fall back to ``MEMKIT_LLM_MODEL``, ``MEMKIT_LLM_BASE_URL`` / ``ANTHROPIC_BASE_URL`` (default
    ``https://api.anthropic.com``; a trailing ``/v1`` is dropped) and ``MEMKIT_LLM_API_KEY`` /
    ``ANTHROPIC_API_KEY``. The API requires ``max_tokens``: ``default_max_tokens`` is sent when a call gives
    none. Structured output forces a tool whose input schema is the type's, and decodes that tool's input.
    Use as ``async with`` to close its connection pool.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        default_max_tokens: int = 4096,
        timeout_s: float = 60.0,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 20.0,
        budget: LLMBudget | None = None,
        anthropic_version: str = "2023-06-01",
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        settings = settings_for("anthropic", model, base_url, api_key)
        self._model = settings.model
        self._default_max_tokens = default_max_tokens
        headers = {"anthropic-version": anthropic_version}
        if settings.api_key:
            headers["x-api-key"] = settings.api_key
        self._http = ChatHTTP(
            provider="Anthropic API",
            base_url=settings.base_url.removesuffix("/v1"),
            model=settings.model,
            key_hint=key_hint("anthropic"),
            headers=headers,
            timeout_s=timeout_s,
            retry=RetryPolicy(max_retries, backoff_s, max_backoff_s),
            budget=budget,
            transport=transport,
        )

    def __repr__(self) -> str:  # never the key
        return f"AnthropicChat(model={self._model!r}, base_url={self._http.base_url!r})"

    @property
    def model_id(self) -> str:
        return f"anthropic:{self._http.base_url}:{self._model}"

    async def complete(
        self, messages: Sequence[ChatMessage], *, max_tokens: int | None = None, temperature: float | None = None
    ) -> str:
        payload = self._payload(messages, max_tokens)
        if temperature is not None:
            payload["temperature"] = temperature
        message = self._decode(await self._http.post("/v1/messages", payload))
        return "".join(block.text or "" for block in message.content if block.type == "text")

    async def structured(self, messages: Sequence[ChatMessage], schema: type[T], *, max_tokens: int | None = None) -> T:
        target = target_for(schema)

        async def ask(conversation: list[dict[str, Any]]) -> Answer:
            return await self._ask_tool(conversation, target, max_tokens)

        return await structured_with_repair(ask, as_messages(messages), target, f"model {self._model!r}")

    async def _ask_tool(self, messages: list[dict[str, Any]], target: Target[Any], max_tokens: int | None) -> Answer:
        payload = self._payload(messages, max_tokens)
        payload["tools"] = [
            {"name": target.name, "description": f"Record the answer as {target.name}.", "input_schema": target.schema}
        ]
        payload["tool_choice"] = {"type": "tool", "name": target.name}
        message = self._decode(await self._http.post("/v1/messages", payload))
        truncated = message.stop_reason == "max_tokens"
        for block in message.content:
            if block.type == "tool_use" and len(block.input):
                text = bytes(block.input).decode()
                return Answer(text, truncated, tool_call_id=block.id or "call", tool_name=block.name or target.name)
        # No tool call (a proxy that ignores tool_choice): the text is the answer, and is repaired as text.
        return Answer("".join(block.text or "" for block in message.content), truncated)

    def _payload(self, messages: Sequence[ChatMessage], max_tokens: int | None) -> dict[str, Any]:
        system, converted = to_anthropic(messages)
        payload: dict[str, Any] = {
            "model": self._model,
            "max_tokens": self._default_max_tokens if max_tokens is None else max_tokens,
            "messages": converted,
        }
        if system is not None:
            payload["system"] = system
        return payload

    def _decode(self, body: bytes) -> _Message:
        try:
            message = _decode_message(body)
        except msgspec.DecodeError as exc:
            raise LLMError(
                f"{self._http.base_url}/v1/messages sent something that is not a Messages API answer ({exc}); "
                "check that the base URL points at the Anthropic API (without /v1/messages)"
            ) from exc
        if message.usage is not None:
            usage = message.usage
            cached = (usage.cache_creation_input_tokens or 0) + (usage.cache_read_input_tokens or 0)
            self._http.meter.add_tokens((usage.input_tokens or 0) + cached, usage.output_tokens or 0)
        return message
