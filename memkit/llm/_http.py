"""The HTTP side shared by the chat clients: retries with backoff, timeouts, error mapping, the budget.

Failures map onto memkit's LLM errors the way httpx maps httpcore's: a 429, 408, 409 or 5xx and a connection
error are retried (exponential backoff with jitter, or the server's ``Retry-After``), then raise
``LLMUnavailableError``; any other 4xx raises ``LLMRefusedError`` at once (retrying a bad key or model name
cannot help); a request that outlives ``timeout_s`` raises ``LLMTimeoutError`` and is not retried (the next
attempt would most likely take as long, and the caller's own deadline matters more).
"""

from __future__ import annotations

import email.utils
import math
import random
from collections.abc import Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

import anyio
import httpx
import msgspec

from memkit.errors import LLMRefusedError, LLMTimeoutError, LLMUnavailableError
from memkit.llm._budget import LLMBudget, LLMUsage, Meter

__all__ = ["ChatHTTP", "HTTPChatClient", "RetryPolicy", "retry_after_s", "server_message"]

_RETRY_STATUS = frozenset({408, 409, 429})
_encode = msgspec.json.Encoder().encode


class RetryPolicy(msgspec.Struct, frozen=True):
    """``max_retries`` retries after the first attempt; waits ``backoff_s * 2**n`` (half to all of it, at random),
    or what ``Retry-After`` says, never more than ``max_backoff_s``."""

    max_retries: int = 4
    backoff_s: float = 0.5
    max_backoff_s: float = 20.0

    def delay(self, attempt: int, response: httpx.Response | None) -> float:
        hinted = retry_after_s(response.headers) if response is not None else None
        if hinted is not None:
            return min(hinted, self.max_backoff_s)
        base = min(self.backoff_s * 2.0**attempt, self.max_backoff_s)
        return base * (0.5 + random.random() / 2)  # jitter: clients that failed together retry apart


def retry_after_s(headers: httpx.Headers) -> float | None:
    """Seconds the server asked us to wait: ``retry-after-ms`` (OpenAI), or ``Retry-After`` as seconds (fractions
    accepted) or as an HTTP date. None when absent or unreadable."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            seconds = _seconds_until(value) if scale == 1.0 else math.nan
        if math.isfinite(seconds):
            return max(seconds, 0.0)
    return None


def _seconds_until(http_date: str) -> float:
    try:
        when = email.utils.parsedate_to_datetime(http_date)
    except (TypeError, ValueError):
        return math.nan
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - datetime.now(UTC)).total_seconds()


def server_message(response: httpx.Response) -> str:
    """The error message in a provider's error body (OpenAI, Anthropic, Ollama shapes), else the body's start."""
    try:
        body = msgspec.json.decode(response.content)
    except msgspec.DecodeError:
        body = None
    if isinstance(body, dict):
        error = body.get("error", body)
        message = error.get("message") if isinstance(error, dict) else error
        if isinstance(message, str) and message:
            return message
    text = response.text.strip()
    return text[:500] if text else f"{response.reason_phrase or 'no reason given'} (empty body)"


class ChatHTTP:
    """POSTs JSON to one provider's endpoint for a chat client, and meters what it used."""

    def __init__(
        self,
        *,
        provider: str,
        base_url: str,
        model: str,
        key_hint: str,
        headers: Mapping[str, str],
        timeout_s: float,
        retry: RetryPolicy,
        budget: LLMBudget | None,
        transport: httpx.AsyncBaseTransport | None,
    ) -> None:
        self.provider = provider
        self.base_url = base_url
        self._model = model
        self._key_hint = key_hint
        self._timeout_s = timeout_s
        self._retry = retry
        self.meter = Meter(budget)
        all_headers = {"content-type": "application/json", **headers}
        self._client = httpx.AsyncClient(headers=all_headers, timeout=timeout_s, transport=transport)

    @property
    def usage(self) -> LLMUsage:
        return self.meter.usage

    async def aclose(self) -> None:
        await self._client.aclose()

    async def post(self, path: str, payload: Mapping[str, Any]) -> bytes:
        """The body of a 2xx answer; raises the LLM error that fits anything else."""
        response = await self.send(path, payload)
        if response.status_code >= 400:
            raise self.refused(response)
        return response.content

    async def send(self, path: str, payload: Mapping[str, Any]) -> httpx.Response:
        """The first answer that is not worth retrying (a 2xx, or a 4xx other than 408/409/429), after retries."""
        url = f"{self.base_url}{path}"
        content = _encode(payload)
        attempts = self._retry.max_retries + 1
        for attempt in range(attempts):
            response: httpx.Response | None = None
            failure: httpx.TransportError | None = None
            try:
                response = await self._send_once(url, content)
            except httpx.TransportError as exc:
                failure = exc
            if response is not None and not _retryable(response.status_code):
                return response
            if attempt + 1 == attempts:
                raise self._unavailable(url, response, failure, attempts)
            await anyio.sleep(self._retry.delay(attempt, response))
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def _send_once(self, url: str, content: bytes) -> httpx.Response:
        self.meter.reserve()
        answered = False
        try:
            with anyio.fail_after(self._timeout_s):
                response = await self._client.post(url, content=content)
            answered = True
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise LLMTimeoutError(
                f"{self.provider} at {url} did not answer within {self._timeout_s:g} s (timeout_s)"
            ) from exc
        finally:
            if answered:
                self.meter.answered()
            else:
                self.meter.unanswered()
        return response

    def _unavailable(
        self, url: str, response: httpx.Response | None, failure: httpx.TransportError | None, attempts: int
    ) -> LLMUnavailableError:
        if response is not None:
            return LLMUnavailableError(
                f"{self.provider} at {url} answered {response.status_code} to all {attempts} attempts "
                f"(max_retries={attempts - 1}): {server_message(response)}"
            )
        reason = str(failure) or type(failure).__name__
        return LLMUnavailableError(
            f"{self.provider} at {url} could not be reached ({attempts} attempts): {reason}; "
            "check the base URL and that the server is running"
        )

    def refused(self, response: httpx.Response) -> LLMRefusedError:
        status = response.status_code
        if status in (401, 403):
            hint = f"check the API key ({self._key_hint})"
        elif status == 404:
            hint = f"check the model name {self._model!r} (MEMKIT_LLM_MODEL) and the base URL {self.base_url}"
        else:
            hint = f"check the model name {self._model!r}, the API key ({self._key_hint}) and the request"
        return LLMRefusedError(
            f"{self.provider} at {response.request.url} refused the request ({status}): {server_message(response)}; "
            f"{hint}"
        )


def _retryable(status: int) -> bool:
    return status in _RETRY_STATUS or status >= 500


class HTTPChatClient:
    """What both chat clients share: their ``ChatHTTP`` (connection pool, retries, budget) and its lifecycle."""

    _http: ChatHTTP

    @property
    def usage(self) -> LLMUsage:
        """Calls and tokens spent so far (what the budget is checked against)."""
        return self._http.usage

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()
