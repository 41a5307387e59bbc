"""The LLM protocol: what memkit asks of a chat model (plain text, or JSON decoded into a type)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

__all__ = ["LLM", "ChatMessage"]

T = TypeVar("T")

ChatMessage = Mapping[str, Any]
"""One message in OpenAI chat shape: ``{"role": "system" | "user" | "assistant" | "tool", "content": ...}``.

Every client takes this shape (an assistant's ``tool_calls`` and a tool's ``tool_call_id`` included) and
converts it for its provider, so callers never depend on which provider runs.
"""


@runtime_checkable
class LLM(Protocol):
    """A chat model: text completions, and structured output validated against a type."""

    @property
    def model_id(self) -> str:
        """Identifies the provider, endpoint and model, e.g. ``openai:https://api.openai.com/v1:gpt-4o-mini``."""
        ...

    async def complete(
        self, messages: Sequence[ChatMessage], *, max_tokens: int | None = None, temperature: float | None = None
    ) -> str:
        """The model's text answer to ``messages``."""
        ...

    async def structured(self, messages: Sequence[ChatMessage], schema: type[T], *, max_tokens: int | None = None) -> T:
        """The model's answer decoded into ``schema`` (a ``msgspec.Struct`` or any type msgspec decodes to).

        Invalid output gets one repair attempt, then raises ``StructuredOutputError``; never a silent drop.
        """
        ...
