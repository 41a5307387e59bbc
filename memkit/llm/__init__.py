"""Chat models: the ``LLM`` protocol, OpenAI-compatible and Anthropic clients, budgets, and ``resolve_llm``.

Messages are always OpenAI-shaped; the Anthropic client converts them. Failures raise the ``LLMError`` kinds
in ``memkit.errors``. Only httpx and msgspec are imported: no provider SDK.
"""

from memkit.llm._anthropic import AnthropicChat
from memkit.llm._budget import LLMBudget, LLMUsage
from memkit.llm._openai import OpenAIChat, StructuredMode
from memkit.llm._protocol import LLM, ChatMessage
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
