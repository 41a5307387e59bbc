"""Clients pointed at the double, with backoffs short enough for a fast suite."""

from __future__ import annotations

from typing import Any, Literal

from memkit.llm import AnthropicChat, OpenAIChat
from memkit.testing.llm_double import Endpoint, LLMDouble

Provider = Literal["openai", "anthropic"]
FAST: dict[str, Any] = {"backoff_s": 0.01, "max_backoff_s": 1.0, "timeout_s": 5.0}


def openai_chat(double: LLMDouble, **options: Any) -> OpenAIChat:
    settings = {"base_url": double.openai_url, "api_key": "sk-test", **FAST, **options}
    return OpenAIChat("gpt-test", **settings)


def anthropic_chat(double: LLMDouble, **options: Any) -> AnthropicChat:
    settings = {"base_url": double.anthropic_url, "api_key": "sk-ant-test", **FAST, **options}
    return AnthropicChat("claude-test", **settings)


def chat(provider: Provider, double: LLMDouble, **options: Any) -> OpenAIChat | AnthropicChat:
    return openai_chat(double, **options) if provider == "openai" else anthropic_chat(double, **options)


def endpoint(provider: Provider) -> Endpoint:
    return "openai" if provider == "openai" else "anthropic"


USER = [{"role": "user", "content": "hello"}]
