"""Chat models: the ``LLM`` protocol, OpenAI-compatible and Anthropic clients, budgets, and ``resolve_llm``.

Messages are always OpenAI-shaped; the Anthropic client converts them. Failures raise the ``LLMError`` kinds
in ``memkit.errors``. Only httpx and msgspec are imported, and httpx only when a client is first used from
here: the protocol alone (what the layers check a model against) costs nothing to import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from memkit.llm._budget import LLMBudget, LLMUsage
from memkit.llm._protocol import LLM, ChatMessage

if TYPE_CHECKING:
    from memkit.llm._anthropic import AnthropicChat
    from memkit.llm._openai import OpenAIChat, StructuredMode
    from memkit.llm._resolve import resolve_llm

__all__ = [
    "LLM",
    "AnthropicChat",
    "ChatMessage",
    "LLMBudget",
    "LLMUsage",
    "OpenAIChat",
    "StructuredMode",
    "resolve_llm",
]

_LAZY = {
    "AnthropicChat": "memkit.llm._anthropic",
    "OpenAIChat": "memkit.llm._openai",
    "StructuredMode": "memkit.llm._openai",
    "resolve_llm": "memkit.llm._resolve",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'memkit.llm' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
