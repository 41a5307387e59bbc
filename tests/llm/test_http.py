"""Retries, timeouts, unreachable hosts, refusals and budgets, over real HTTP, for both providers."""

from __future__ import annotations

import socket
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import anyio
import httpx
import msgspec
import pytest

from memkit.errors import (
    LLMBudgetError,
    LLMRefusedError,
    LLMTimeoutError,
    LLMUnavailableError,
    ValidationError,
)
from memkit.llm import AnthropicChat, LLMBudget, OpenAIChat
from memkit.llm._http import retry_after_s
from memkit.testing.llm_double import LLMDouble, delayed, disconnect, json_reply, status_reply, text_reply
from tests.llm._clients import USER, Provider, chat, endpoint

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["openai", "anthropic"])
def provider(request: pytest.FixtureRequest) -> Provider:
    return request.param  # type: ignore[no-any-return]


async def test_429_waits_as_long_as_retry_after_says(double: LLMDouble, provider: Provider) -> None:
    """Fractional seconds are accepted (some gateways send them; they keep this test short)."""
    double.script(endpoint(provider), status_reply(429, "slow down", headers={"Retry-After": "0.2"}), "done")
    async with chat(provider, double, backoff_s=0.001) as llm:  # the backoff alone would wait ~1 ms
        assert await llm.complete(USER) == "done"
        assert llm.usage.calls == 2  # the 429 was answered: it counts
    first, second = double.requests(endpoint(provider))
    assert second.at - first.at >= 0.2


async def test_retry_after_is_capped_by_max_backoff(double: LLMDouble, provider: Provider) -> None:
    double.script(endpoint(provider), status_reply(503, headers={"Retry-After": "30"}), "done")
    started = time.monotonic()
    async with chat(provider, double, max_backoff_s=0.05) as llm:
        assert await llm.complete(USER) == "done"
    assert time.monotonic() - started < 5


def test_retry_after_forms() -> None:
    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 28 <= (retry_after_s(httpx.Headers({"retry-after": soon})) or 0) <= 30
    past = format_datetime(datetime.now(UTC) - timedelta(seconds=30), usegmt=True)
    assert retry_after_s(httpx.Headers({"retry-after": past})) == 0
    assert retry_after_s(httpx.Headers({"retry-after": "2"})) == 2
    assert retry_after_s(httpx.Headers({"retry-after-ms": "250", "retry-after": "9"})) == 0.25
    assert retry_after_s(httpx.Headers({"retry-after": "soon"})) is None
    assert retry_after_s(httpx.Headers({"retry-after": "nan"})) is None
    assert retry_after_s(httpx.Headers({})) is None


async def test_500_is_retried_then_succeeds(double: LLMDouble, provider: Provider) -> None:
    double.script(endpoint(provider), status_reply(500), status_reply(529, "overloaded"), "fine")
    async with chat(provider, double) as llm:
        assert await llm.complete(USER) == "fine"
    assert len(double.requests(endpoint(provider))) == 3 and double.pending(endpoint(provider)) == 0


async def test_5xx_through_every_retry_is_unavailable(double: LLMDouble, provider: Provider) -> None:
    double.handler(endpoint(provider), lambda body: status_reply(503, "model overloaded, try later"))
    async with chat(provider, double, max_retries=2) as llm:
        with pytest.raises(LLMUnavailableError, match=r"503 to all 3 attempts.*model overloaded, try later"):
            await llm.complete(USER)
    assert len(double.requests(endpoint(provider))) == 3


async def test_401_is_refused_at_once_naming_the_key(double: LLMDouble, provider: Provider) -> None:
    double.script(endpoint(provider), status_reply(401, "Incorrect API key provided: sk-t***"))
    async with chat(provider, double) as llm:
        with pytest.raises(LLMRefusedError, match=r"401.*Incorrect API key provided.*check the API key") as caught:
            await llm.complete(USER)
    assert "_API_KEY" in str(caught.value)
    assert len(double.requests(endpoint(provider))) == 1


async def test_404_is_refused_naming_the_model(double: LLMDouble, provider: Provider) -> None:
    double.script(endpoint(provider), status_reply(404, "model not found"))
    async with chat(provider, double) as llm:
        with pytest.raises(LLMRefusedError, match=r"model not found.*check the model name '(gpt|claude)-test'"):
            await llm.complete(USER)
    assert len(double.requests(endpoint(provider))) == 1


async def test_a_slow_answer_times_out_without_a_retry(double: LLMDouble, provider: Provider) -> None:
    double.script(endpoint(provider), delayed(3.0, text_reply("too late")))
    started = time.monotonic()
    async with chat(provider, double, timeout_s=0.2) as llm:
        with pytest.raises(LLMTimeoutError, match=r"did not answer within 0.2 s"):
            await llm.complete(USER)
        assert llm.usage.calls == 0  # no answer, no call
    assert time.monotonic() - started < 2.5
    assert len(double.requests(endpoint(provider))) == 1


async def test_an_unreachable_host_is_unavailable_naming_the_url(provider: Provider) -> None:
    with socket.socket() as sock:  # a loopback port nobody listens on once this closes
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    client = (
        OpenAIChat("gpt-test", base_url=f"{url}/v1", max_retries=1, backoff_s=0.01)
        if provider == "openai"
        else AnthropicChat("claude-test", base_url=url, max_retries=1, backoff_s=0.01)
    )
    async with client as llm:
        with pytest.raises(LLMUnavailableError, match=rf"{url}/v1/.*could not be reached \(2 attempts\)"):
            await llm.complete(USER)
        assert llm.usage.calls == 0


async def test_a_dropped_connection_is_retried(double: LLMDouble, provider: Provider) -> None:
    double.script(endpoint(provider), disconnect(), "after the drop")
    async with chat(provider, double) as llm:
        assert await llm.complete(USER) == "after the drop"
        assert llm.usage.calls == 1  # the dropped request was never answered
    assert len(double.requests(endpoint(provider))) == 2


async def test_the_call_budget_refuses_before_sending(double: LLMDouble, provider: Provider) -> None:
    double.handler(endpoint(provider), lambda body: "ok")
    async with chat(provider, double, budget=LLMBudget(max_calls=2)) as llm:
        await llm.complete(USER)
        await llm.complete(USER)
        with pytest.raises(LLMBudgetError, match="2 of 2 calls"):
            await llm.complete(USER)
        assert llm.usage.calls == 2
    assert len(double.requests(endpoint(provider))) == 2


async def test_a_zero_budget_sends_nothing(double: LLMDouble, provider: Provider) -> None:
    async with chat(provider, double, budget=LLMBudget(max_calls=0)) as llm:
        with pytest.raises(LLMBudgetError):
            await llm.complete(USER)
    assert double.requests() == []


async def test_the_token_budget_counts_input_and_output(double: LLMDouble, provider: Provider) -> None:
    double.handler(endpoint(provider), lambda body: text_reply("ok", input_tokens=40, output_tokens=20))
    async with chat(provider, double, budget=LLMBudget(max_tokens=100)) as llm:
        await llm.complete(USER)
        assert llm.usage.total_tokens == 60
        await llm.complete(USER)  # 60 < 100: sent, and it takes the total past the limit
        with pytest.raises(LLMBudgetError, match="120 of 100 tokens"):
            await llm.complete(USER)
        assert llm.usage.input_tokens == 80 and llm.usage.output_tokens == 40
    assert len(double.requests(endpoint(provider))) == 2


async def test_retries_spend_the_budget(double: LLMDouble, provider: Provider) -> None:
    double.script(endpoint(provider), status_reply(500), status_reply(500), "never sent")
    async with chat(provider, double, budget=LLMBudget(max_calls=2)) as llm:
        with pytest.raises(LLMBudgetError):
            await llm.complete(USER)
    assert len(double.requests(endpoint(provider))) == 2 and double.pending(endpoint(provider)) == 1


async def test_a_repair_needs_budget_too(double: LLMDouble, provider: Provider) -> None:
    class Fact(msgspec.Struct):
        text: str

    double.script(endpoint(provider), json_reply({"text": 1}))
    async with chat(provider, double, budget=LLMBudget(max_calls=1)) as llm:
        with pytest.raises(LLMBudgetError):
            await llm.structured(USER, Fact)
    assert len(double.requests(endpoint(provider))) == 1


async def test_the_call_budget_holds_under_concurrent_calls(double: LLMDouble, provider: Provider) -> None:
    """Ten calls at once against a budget of three: exactly three reach the server."""
    double.handler(endpoint(provider), lambda body: delayed(0.05, text_reply("ok")))
    outcomes: list[str] = []
    async with chat(provider, double, budget=LLMBudget(max_calls=3)) as llm:

        async def one() -> None:
            try:
                outcomes.append(await llm.complete(USER))
            except LLMBudgetError:
                outcomes.append("refused")

        async with anyio.create_task_group() as group:
            for _ in range(10):
                group.start_soon(one)
        assert llm.usage.calls == 3
    assert sorted(outcomes) == ["ok"] * 3 + ["refused"] * 7
    assert len(double.requests(endpoint(provider))) == 3


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_retries_and_timeouts_under_trio(anyio_backend: str, double: LLMDouble, provider: Provider) -> None:
    double.script(endpoint(provider), status_reply(429, headers={"Retry-After": "0.05"}), "trio ok")
    double.script(endpoint(provider), delayed(2.0, text_reply("late")))
    async with chat(provider, double, timeout_s=0.2) as llm:
        assert await llm.complete(USER) == "trio ok"
        with pytest.raises(LLMTimeoutError):
            await llm.complete(USER)


def test_budget_limits_are_checked() -> None:
    with pytest.raises(ValidationError, match="max_calls"):
        LLMBudget(max_calls=-1)
    with pytest.raises(ValidationError, match="max_tokens"):
        LLMBudget(max_tokens=1.5)  # type: ignore[arg-type]
