"""Short-term memory: one conversation under a token budget, old turns folded into a rolling summary."""

from memkit.layers.shortterm._extractive import ExtractiveSummarizer
from memkit.layers.shortterm._layer import ShortTermConfig, ShortTermMemory
from memkit.layers.shortterm._messages import Message, ToolCall
from memkit.layers.shortterm._render import AnthropicMessages, rendered_tokens
from memkit.layers.shortterm._session import ShortTermSession
from memkit.layers.shortterm._state import SessionSnapshot
from memkit.layers.shortterm._summarizers import LLMSummarizer, Summarizer

__all__ = [
    "AnthropicMessages",
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "Message",
    "SessionSnapshot",
    "ShortTermConfig",
    "ShortTermMemory",
    "ShortTermSession",
    "Summarizer",
    "ToolCall",
    "rendered_tokens",
]
