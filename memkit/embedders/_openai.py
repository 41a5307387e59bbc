"""An embedder for any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, Ollama, vLLM, LM Studio)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from types import TracebackType
from typing import Self

import anyio
import httpx
import msgspec
import numpy as np

from memkit.embedders._base import Matrix
from memkit.errors import BackendUnavailableError, ConfigurationError, EmbeddingError

__all__ = ["OpenAICompatibleEmbedder"]

_RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class _Item(msgspec.Struct):
    embedding: list[float]
    index: int


class _Response(msgspec.Struct):
    data: list[_Item]


_decode_response = msgspec.json.Decoder(_Response).decode


class OpenAICompatibleEmbedder:
    """POSTs batches to ``{base_url}/embeddings``; retries 429 and 5xx with exponential backoff.

    Arguments fall back to ``MEMKIT_EMBED_BASE_URL`` / ``OPENAI_BASE_URL``, ``MEMKIT_EMBED_MODEL`` and
    ``MEMKIT_EMBED_API_KEY`` / ``OPENAI_API_KEY``. Use as ``async with`` to close its connection pool.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        dim: int | None = None,
        batch_size: int = 128,
        max_retries: int = 5,
        backoff_s: float = 0.5,
        timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._model = model or os.environ.get("MEMKIT_EMBED_MODEL") or "text-embedding-3-small"
        base = base_url or os.environ.get("MEMKIT_EMBED_BASE_URL") or os.environ.get("OPENAI_BASE_URL")
        self._base_url = (base or "https://api.openai.com/v1").rstrip("/")
        key = api_key or os.environ.get("MEMKIT_EMBED_API_KEY") or os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.AsyncClient(headers=headers, timeout=timeout_s, transport=transport)
        self._dim = dim
        self._batch_size = batch_size
        self._max_retries = max_retries
        self._backoff_s = backoff_s

    @property
    def model_id(self) -> str:
        return f"openai:{self._base_url}:{self._model}"

    @property
    def dim(self) -> int:
        if self._dim is None:
            raise ConfigurationError("dimension unknown until the first embed call; pass dim=... to know it up front")
        return self._dim

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def embed(self, texts: Sequence[str]) -> Matrix:
        batches = [list(texts[i : i + self._batch_size]) for i in range(0, len(texts), self._batch_size)]
        parts = [await self._embed_batch(batch) for batch in batches]
        if not parts:
            return np.zeros((0, self._dim or 0), np.float32)
        matrix = np.concatenate(parts)
        if self._dim is None:
            self._dim = int(matrix.shape[1])
        elif matrix.shape[1] != self._dim:
            raise EmbeddingError(f"endpoint returned {matrix.shape[1]}-dimensional vectors; expected {self._dim}")
        return matrix

    async def _embed_batch(self, batch: list[str]) -> Matrix:
        payload = {"model": self._model, "input": batch}
        attempt = 0
        while True:
            last = attempt >= self._max_retries
            response: httpx.Response | None = None
            try:
                response = await self._client.post(f"{self._base_url}/embeddings", json=payload)
            except httpx.TransportError as exc:
                if last:
                    raise BackendUnavailableError(f"embedding endpoint {self._base_url} unreachable: {exc}") from exc
            else:
                if response.status_code not in _RETRY_STATUS or last:
                    return self._parse(response, len(batch))
            await anyio.sleep(self._retry_delay(attempt, response))
            attempt += 1

    def _retry_delay(self, attempt: int, response: httpx.Response | None) -> float:
        retry_after = response.headers.get("retry-after") if response is not None else None
        if retry_after is not None:
            try:
                return min(float(retry_after), 60.0)
            except ValueError:
                pass
        return float(self._backoff_s * (2**attempt))

    def _parse(self, response: httpx.Response, expected: int) -> Matrix:
        if response.status_code >= 400:
            raise EmbeddingError(f"embedding endpoint answered {response.status_code}: {response.text[:300]}")
        try:
            items = sorted(_decode_response(response.content).data, key=lambda item: item.index)
        except msgspec.DecodeError as exc:
            raise EmbeddingError(f"embedding endpoint sent an unexpected body: {exc}") from exc
        if len(items) != expected:
            raise EmbeddingError(f"endpoint returned {len(items)} embeddings for {expected} texts")
        return np.asarray([item.embedding for item in items], dtype=np.float32)
