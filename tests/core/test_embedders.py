from __future__ import annotations

import socket
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

from memkit import BackendUnavailableError, EmbeddingError, InvalidVectorError
from memkit.embedders import CachedEmbedder, HashingEmbedder, OpenAICompatibleEmbedder, as_unit_vectors
from memkit.testing.llm_double import EmbeddingReply, LLMDouble, embedding_reply, status_reply

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


# The hosted endpoint cannot run here: LLMDouble stands in for it, a test double of the API served over real HTTP
# on loopback, so the embedder's own HTTP code (connections, status codes, retries) runs.
@pytest.fixture
def double() -> Iterator[LLMDouble]:
    with LLMDouble() as served:
        yield served


def _reply(body: dict[str, Any], dim: int = 3) -> EmbeddingReply:
    """Vector i is [i + 1] * dim, sent in reverse order: the embedder must sort by index."""
    count = len(body["input"])
    return embedding_reply([[float(i + 1)] * dim for i in range(count)], order=range(count - 1, -1, -1))


async def test_openai_compatible_batches_and_orders(double: LLMDouble) -> None:
    double.handler("embeddings", _reply)
    async with OpenAICompatibleEmbedder("m", base_url=double.openai_url, api_key="k", batch_size=2) as embedder:
        matrix = await embedder.embed(["a", "b", "c"])
    requests = double.requests("embeddings")
    assert len(requests) == 2 and matrix.shape == (3, 3)
    assert matrix[:, 0].tolist() == [1.0, 2.0, 1.0]
    assert requests[0].headers["authorization"] == "Bearer k"
    assert [r.body["input"] for r in requests] == [["a", "b"], ["c"]]


async def test_openai_compatible_retries_429_and_5xx(double: LLMDouble) -> None:
    double.script("embeddings", status_reply(429, headers={"retry-after": "0"}), status_reply(503))
    double.handler("embeddings", _reply)
    async with OpenAICompatibleEmbedder("m", base_url=double.openai_url, backoff_s=0.001) as embedder:
        matrix = await embedder.embed(["x"])
    assert len(double.requests("embeddings")) == 3 and matrix.shape == (1, 3)


async def test_openai_compatible_errors(double: LLMDouble) -> None:
    double.script("embeddings", status_reply(401, body={"error": "bad key"}))
    async with OpenAICompatibleEmbedder("m", base_url=double.openai_url) as embedder:
        with pytest.raises(EmbeddingError, match="401"):
            await embedder.embed(["x"])


async def test_openai_compatible_unreachable() -> None:
    with socket.socket() as sock:  # a loopback port nobody listens on once this closes
        sock.bind(("127.0.0.1", 0))
        base = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    async with OpenAICompatibleEmbedder("m", base_url=base, max_retries=2, backoff_s=0.001) as embedder:
        with pytest.raises(BackendUnavailableError):
            await embedder.embed(["x"])


async def test_local_model_is_semantic(local_embedder: CachedEmbedder) -> None:
    """The packaged all-MiniLM-L6-v2, loaded from site-packages with no network."""
    query, paraphrase, unrelated = await local_embedder.embed(
        ["What should I cook for a vegetarian guest?", "My friend doesn't eat meat", "The train leaves at noon"]
    )
    assert local_embedder.dim == 384
    assert float(query @ paraphrase) > float(query @ unrelated) + 0.1
