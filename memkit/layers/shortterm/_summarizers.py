"""What folds old turns into the rolling summary: the ``Summarizer`` protocol and the LLM summariser.

A fold is ``previous summary + turns being folded -> new summary``; the new summary replaces the old one
and those turns. So a summariser must carry forward what the previous summary holds, not only summarise
the new turns, and stay within ``max_tokens``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from memkit.errors import SummarizerError
from memkit.layers.shortterm._messages import Message
from memkit.layers.shortterm._render import truncate_text
from memkit.tokens import Tokenizer

__all__ = ["ChatModel", "LLMSummarizer", "Summarizer", "transcript"]

_LINE_CHARS = 4_000
"""A message's longest rendering in a transcript: a huge tool result must not fill the model's context."""


@runtime_checkable
class Summarizer(Protocol):
    async def summarize(
        self, previous: str, messages: Sequence[Message], *, max_tokens: int, tokenizer: Tokenizer
    ) -> str:
        """The new rolling summary: ``previous`` with ``messages`` folded in, within ``max_tokens``."""
        ...


class ChatModel(Protocol):
    """The part of ``memkit.llm.LLM`` a summariser uses."""

    async def complete(
        self, messages: Sequence[Any], *, max_tokens: int | None = None, temperature: float | None = None
    ) -> str: ...


def _cap(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _LINE_CHARS else text[: _LINE_CHARS - 20] + " [...cut...]"


def transcript(messages: Sequence[Message]) -> str:
    """The turns as plain lines: who said what, which tool was called with what, what it returned."""
    names = {call.id: call.name for m in messages for call in m.tool_calls}
    lines = []
    for m in messages:
        if m.role == "tool":
            tool = m.name or names.get(m.tool_call_id or "", "a tool")
            lines.append(f"Tool {tool} {'failed' if m.is_error else 'returned'}: {_cap(m.content)}")
            continue
        speaker = m.name or m.role.capitalize()
        if m.content:
            lines.append(f"{speaker}: {_cap(m.content)}")
        lines += [f"{speaker} called {call.name}({_cap(call.arguments)})" for call in m.tool_calls]
    return "\n".join(lines)


_INSTRUCTIONS = """\
You keep the running summary of a conversation between a user and an AI assistant. Merge the previous \
summary and the new messages into one updated summary.
Keep every decision, preference, number, amount, date, name, tool result and open question, exactly as \
stated; keep what the previous summary holds unless the new messages change it (then say what changed).
Drop greetings and small talk. Do not invent anything. Write terse bullet points, at most {max_tokens} tokens.
Answer with the summary only."""


class LLMSummarizer:
    """Folds with a chat model (any ``memkit.llm`` client, or anything with ``complete(messages)``)."""

    def __init__(self, llm: ChatModel, *, instructions: str = _INSTRUCTIONS) -> None:
        self.llm = llm
        self.instructions = instructions

    async def summarize(
        self, previous: str, messages: Sequence[Message], *, max_tokens: int, tokenizer: Tokenizer
    ) -> str:
        prompt = [
            {"role": "system", "content": self.instructions.format(max_tokens=max_tokens)},
            {
                "role": "user",
                "content": f"Previous summary:\n{previous or '(none)'}\n\nNew messages:\n{transcript(messages)}",
            },
        ]
        try:
            text = await self.llm.complete(prompt, max_tokens=max_tokens, temperature=0.0)
        except Exception as exc:
            raise SummarizerError(f"the model could not summarise: {type(exc).__name__}: {exc}") from exc
        if not isinstance(text, str) or not text.strip():
            raise SummarizerError("the model answered with an empty summary")
        # The model was told the bound; a model that ignores it is cut, not trusted.
        return truncate_text(text.strip(), max_tokens, tokenizer)
