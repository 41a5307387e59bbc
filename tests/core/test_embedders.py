from __future__ import annotations

from collections.abc import Sequence

import httpx
import numpy as np
import pytest
import respx

from memkit import BackendUnavailableError, EmbeddingError, InvalidVectorError
from memkit.embedders import CachedEmbedder, HashingEmbedder, OpenAICompatibleEmbedder, as_unit_vectors

pytestmark = pytest.mark.anyio


async def test_hashing_is_deterministic_and_word_based() -> None:
    embedder = HashingEmbedder(128)
    a, b, c = await embedder.embed(["the red bicycle", "The red bicycles!", "quarterly tax filing"])
    assert np.allclose(a, (await HashingEmbedder(128).embed(["the red bicycle"]))[0])
    assert float(a @ b) > 0.9 and abs(float(a @ c)) < 0.5
    assert np.isclose(np.linalg.norm(a), 1.0)


class CountingEmbedder:
    """Test double that records which texts reached the model."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    @property
    def dim(self) -> int:
        return 4

    @property
    def model_id(self) -> str:
        return "counting"

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.seen.extend(texts)
        return np.array([[len(t), 1, 0, 0] for t in texts], dtype=np.float32)


async def test_cache_embeds_each_text_once() -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner)
    first = await cached.embed(["a", "bb", "a"])
    second = await cached.embed(["bb", "ccc"])
    assert inner.seen == ["a", "bb", "ccc"]
    assert np.array_equal(first[1], second[0]) and cached.hits == 2 and cached.misses == 3


def test_unit_vector_validation() -> None:
    assert np.allclose(np.linalg.norm(as_unit_vectors([[3.0, 4.0]]), axis=1), 1.0)
    for bad in ([[np.nan, 1.0]], [[np.inf, 1.0]], [[0.0, 0.0]], np.zeros((2, 0))):
        with pytest.raises(InvalidVectorError):
            as_unit_vectors(bad)


# The hosted endpoint cannot run here: respx stands in for it (a test double of the HTTP API).
BASE = "http://embeddings.test/v1"


def _reply(texts: list[str], dim: int = 3) -> httpx.Response:
    data = [{"index": i, "embedding": [float(i + 1)] * dim} for i in reversed(range(len(texts)))]
    return httpx.Response(200, json={"data": data})


@respx.mock
async def test_openai_compatible_batches_and_orders() -> None:
    route = respx.post(f"{BASE}/embeddings").mock(side_effect=lambda req: _reply(_inputs(req)))
    async with OpenAICompatibleEmbedder("m", base_url=BASE, api_key="k", batch_size=2) as embedder:
        matrix = await embedder.embed(["a", "b", "c"])
    assert route.call_count == 2 and matrix.shape == (3, 3)
    assert matrix[:, 0].tolist() == [1.0, 2.0, 1.0]
    assert route.calls[0].request.headers["authorization"] == "Bearer k"


@respx.mock
async def test_openai_compatible_retries_429_and_5xx() -> None:
    responses = iter([httpx.Response(429, headers={"retry-after": "0"}), httpx.Response(503), None])
    route = respx.post(f"{BASE}/embeddings").mock(side_effect=lambda req: next(responses) or _reply(_inputs(req)))
    async with OpenAICompatibleEmbedder("m", base_url=BASE, backoff_s=0.001) as embedder:
        matrix = await embedder.embed(["x"])
    assert route.call_count == 3 and matrix.shape == (1, 3)


@respx.mock
async def test_openai_compatible_errors() -> None:
    respx.post(f"{BASE}/embeddings").mock(return_value=httpx.Response(401, json={"error": "bad key"}))
    async with OpenAICompatibleEmbedder("m", base_url=BASE) as embedder:
        with pytest.raises(EmbeddingError, match="401"):
            await embedder.embed(["x"])


@respx.mock
async def test_openai_compatible_unreachable() -> None:
    respx.post(f"{BASE}/embeddings").mock(side_effect=httpx.ConnectError("refused"))
    async with OpenAICompatibleEmbedder("m", base_url=BASE, max_retries=2, backoff_s=0.001) as embedder:
        with pytest.raises(BackendUnavailableError):
            await embedder.embed(["x"])


def _inputs(request: httpx.Request) -> list[str]:
    import json

    return list(json.loads(request.content)["input"])


async def test_local_model_is_semantic(local_embedder: CachedEmbedder) -> None:
    """The packaged all-MiniLM-L6-v2, loaded from site-packages with no network."""
    query, paraphrase, unrelated = await local_embedder.embed(
        ["What should I cook for a vegetarian guest?", "My friend doesn't eat meat", "The train leaves at noon"]
    )
    assert local_embedder.dim == 384
    assert float(query @ paraphrase) > float(query @ unrelated) + 0.1
