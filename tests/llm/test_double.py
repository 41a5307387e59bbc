"""The double itself: scripts before handlers, plain-string handlers, recording, and clear misuse errors."""

from __future__ import annotations

import pytest

from memkit.errors import LLMRefusedError
from memkit.testing.llm_double import LLMDouble, embedding_reply, text_reply
from tests.llm._clients import USER, anthropic_chat, openai_chat

pytestmark = pytest.mark.anyio


async def test_scripts_answer_first_then_the_handler(double: LLMDouble) -> None:
    """The summariser tests' path: a handler computing the answer from the request's messages."""
    double.handler("openai", lambda body: f"summary of {len(body['messages'])} messages")
    double.script("openai", "scripted")
    async with openai_chat(double) as llm:
        assert await llm.complete(USER) == "scripted"
        assert await llm.complete([*USER, *USER]) == "summary of 2 messages"
    assert double.pending("openai") == 0 and len(double.requests("openai")) == 2
    double.reset()
    assert double.requests() == []


async def test_unscripted_requests_fail_loudly_and_fast(double: LLMDouble) -> None:
    async with anthropic_chat(double) as llm:
        with pytest.raises(LLMRefusedError, match=r"nothing scripted for 'anthropic'.*double.handler"):
            await llm.complete(USER)
        double.handler("anthropic", lambda body: 1 / 0)  # type: ignore[arg-type,return-value]
        with pytest.raises(LLMRefusedError, match="ZeroDivisionError"):
            await llm.complete(USER)
        double.handler("anthropic", lambda body: embedding_reply([[1.0]]))
        with pytest.raises(LLMRefusedError, match="EmbeddingReply cannot answer a Messages API request"):
            await llm.complete(USER)
    assert len(double.requests("anthropic")) == 3  # a 400 is not retried


def test_endpoints_are_checked() -> None:
    with LLMDouble() as double:
        with pytest.raises(ValueError, match="unknown endpoint"):
            double.script("gemini", text_reply("x"))  # type: ignore[arg-type]
        assert double.openai_url == f"{double.anthropic_url}/v1" and double.url.startswith("http://127.0.0.1:")
