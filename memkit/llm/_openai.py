"""A chat client for any OpenAI-compatible ``/chat/completions`` endpoint (OpenAI, Ollama, vLLM, LM Studio)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal, TypeVar

import httpx
import msgspec

from memkit._repr import short_repr
from memkit.errors import LLMError, ValidationError
from memkit.llm._budget import LLMBudget
from memkit.llm._env import key_hint, settings_for
from memkit.llm._http import ChatHTTP, HTTPChatClient, RetryPolicy, server_message
from memkit.llm._messages import as_messages, with_system_instruction
from memkit.llm._protocol import ChatMessage
from memkit.llm._structured import Answer, Target, schema_instruction, structured_with_repair, target_for

__all__ = ["OpenAIChat", "StructuredMode"]

T = TypeVar("T")
log = logging.getLogger("memkit")

StructuredMode = Literal["json_schema", "json_object", "prompt"]
_MODES: tuple[StructuredMode, ...] = ("json_schema", "json_object", "prompt")  # each step needs less of the server


class _Message(msgspec.Struct):
    content: str | None = None
    refusal: str | None = None


class _Choice(msgspec.Struct):
    message: _Message
    finish_reason: str | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _Completion(msgspec.Struct):
    choices: list[_Choice]
    usage: _Usage | None = None


_decode_completion = msgspec.json.Decoder(_Completion).decode


class OpenAIChat(HTTPChatClient):
    """POSTs to ``{base_url}/chat/completions``; structured output by JSON Schema, JSON mode or the prompt.

    Arguments fall back to ``MEMKIT_LLM_MODEL``, ``MEMKIT_LLM_BASE_URL`` / ``OPENAI_BASE_URL`` (default
    ``https://api.openai.com/v1``) and ``MEMKIT_LLM_API_KEY`` / ``OPENAI_API_KEY``. ``structured`` picks how a
    schema reaches the model: ``"json_schema"`` (``response_format`` with the schema, strict where the schema
    allows), ``"json_object"`` (JSON mode, schema in the system prompt) or ``"prompt"`` (system prompt only).
    A server that answers 400 about ``response_format`` moves this client one step down that list, for good.
    Use as ``async with`` to close its connection pool.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        structured: StructuredMode = "json_schema",
        timeout_s: float = 60.0,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 20.0,
        budget: LLMBudget | None = None,
        max_tokens_param: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if structured not in _MODES:
            raise ValidationError(f"structured must be one of {', '.join(_MODES)}, got {short_repr(structured)}")
        settings = settings_for("openai", model, base_url, api_key)
        self._model = settings.model
        self._mode: StructuredMode = structured
        # OpenAI's newer models refuse max_tokens; compatible servers may not know its successor.
        hosted = httpx.URL(settings.base_url).host == "api.openai.com"
        self._max_tokens_param = max_tokens_param or ("max_completion_tokens" if hosted else "max_tokens")
        self._http = ChatHTTP(
            provider="OpenAI-compatible server",
            base_url=settings.base_url,
            model=settings.model,
            key_hint=key_hint("openai"),
            headers={"authorization": f"Bearer {settings.api_key}"} if settings.api_key else {},
            timeout_s=timeout_s,
            retry=RetryPolicy(max_retries, backoff_s, max_backoff_s),
            budget=budget,
            transport=transport,
        )

    def __repr__(self) -> str:  # never the key
        return f"OpenAIChat(model={self._model!r}, base_url={self._http.base_url!r}, structured={self._mode!r})"

    @property
    def model_id(self) -> str:
        return f"openai:{self._http.base_url}:{self._model}"

    @property
    def structured_mode(self) -> StructuredMode:
        """How structured output is asked for now (it steps down when the server refuses a mode)."""
        return self._mode

    async def complete(
        self, messages: Sequence[ChatMessage], *, max_tokens: int | None = None, temperature: float | None = None
    ) -> str:
        payload = self._payload(as_messages(messages), max_tokens, temperature)
        return self._answer(await self._http.post("/chat/completions", payload)).text

    async def structured(self, messages: Sequence[ChatMessage], schema: type[T], *, max_tokens: int | None = None) -> T:
        target = target_for(schema)

        async def ask(conversation: list[dict[str, Any]]) -> Answer:
            return await self._ask_structured(conversation, target, max_tokens)

        return await structured_with_repair(ask, as_messages(messages), target, f"model {self._model!r}")

    async def _ask_structured(
        self, messages: list[dict[str, Any]], target: Target[Any], max_tokens: int | None
    ) -> Answer:
        while True:
            mode = self._mode
            response = await self._http.send(
                "/chat/completions", self._structured_payload(messages, target, mode, max_tokens)
            )
            if response.status_code < 400:
                return self._answer(response.content)
            if not (response.status_code == 400 and mode != "prompt" and _about_response_format(response)):
                raise self._http.refused(response)
            self._step_down(mode, response)

    def _structured_payload(
        self, messages: list[dict[str, Any]], target: Target[Any], mode: StructuredMode, max_tokens: int | None
    ) -> dict[str, Any]:
        if mode == "json_schema":
            return {**self._payload(messages, max_tokens, None), "response_format": _json_schema_format(target)}
        payload = self._payload(with_system_instruction(messages, schema_instruction(target)), max_tokens, None)
        if mode == "json_object":  # JSON mode also wants the word JSON in the prompt: the instruction has it
            payload["response_format"] = {"type": "json_object"}
        return payload

    def _step_down(self, refused: StructuredMode, response: httpx.Response) -> None:
        fallback = _MODES[_MODES.index(refused) + 1]
        if _MODES.index(fallback) > _MODES.index(self._mode):  # concurrent calls may have stepped already
            self._mode = fallback
        log.warning(
            "memkit: %s refused response_format %r (%s); this client asks with %r from now on",
            self._http.base_url,
            refused,
            server_message(response),
            self._mode,
        )

    def _payload(
        self, messages: list[dict[str, Any]], max_tokens: int | None, temperature: float | None
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self._model, "messages": messages}
        if max_tokens is not None:
            payload[self._max_tokens_param] = max_tokens
        if temperature is not None:
            payload["temperature"] = temperature
        return payload

    def _answer(self, body: bytes) -> Answer:
        try:
            completion = _decode_completion(body)
        except msgspec.DecodeError as exc:
            raise LLMError(
                f"{self._http.base_url}/chat/completions sent something that is not a chat completion ({exc}); "
                "check that the base URL points at an OpenAI-compatible API (it usually ends in /v1)"
            ) from exc
        if completion.usage is not None:
            usage = completion.usage
            self._http.meter.add_tokens(usage.prompt_tokens or 0, usage.completion_tokens or 0)
        if not completion.choices:
            raise LLMError(f"{self._http.base_url}/chat/completions answered with no choices")
        choice = completion.choices[0]
        text = choice.message.content or choice.message.refusal or ""
        return Answer(text, truncated=choice.finish_reason == "length")


def _json_schema_format(target: Target[Any]) -> dict[str, Any]:
    strict = target.strict_schema is not None
    schema = target.strict_schema if target.strict_schema is not None else target.schema
    return {"type": "json_schema", "json_schema": {"name": target.name, "schema": schema, "strict": strict}}


def _about_response_format(response: httpx.Response) -> bool:
    message = server_message(response).lower()
    return any(word in message for word in ("response_format", "response format", "json_schema", "json schema"))
