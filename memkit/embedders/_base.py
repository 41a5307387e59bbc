"""The Embedder protocol, vector validation, and the embedding cache."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from memkit.errors import DimensionMismatchError, EmbeddingError, InvalidVectorError

__all__ = ["CachedEmbedder", "Embedder", "as_unit_vectors"]

Matrix = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into a float32 matrix, one row per text."""

    @property
    def dim(self) -> int: ...

    @property
    def model_id(self) -> str:
        """Identifies the model (and its settings) for caching: same id, same vectors."""
        ...

    async def embed(self, texts: Sequence[str]) -> Matrix: ...


def as_unit_vectors(matrix: object, dim: int | None = None) -> Matrix:
    """Validated, L2-normalised float32 rows; raises ``InvalidVectorError`` and keeps nothing on bad input."""
    array = np.asarray(matrix, dtype=np.float32)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.shape[1] == 0:
        raise InvalidVectorError(f"expected vectors of shape (n, dim), got {array.shape}")
    if dim is not None and array.shape[1] != dim:
        raise DimensionMismatchError(f"expected {dim}-dimensional vectors, got {array.shape[1]}")
    if not np.isfinite(array).all():
        raise InvalidVectorError("vectors contain NaN or infinite values")
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    if (norms == 0).any():
        raise InvalidVectorError("a zero vector has no direction to compare by")
    return np.ascontiguousarray(array / norms, dtype=np.float32)


class CachedEmbedder:
    """Wraps an embedder so the same text under the same model is embedded once (LRU, in memory)."""

    def __init__(self, inner: Embedder, max_entries: int = 50_000) -> None:
        self.inner = inner
        self._max = max_entries
        self._cache: OrderedDict[bytes, Matrix] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    def _key(self, text: str) -> bytes:
        return hashlib.blake2b(f"{self.inner.model_id}\0{text}".encode(), digest_size=16).digest()

    async def embed(self, texts: Sequence[str]) -> Matrix:
        keys = [self._key(text) for text in texts]
        missing = list(dict.fromkeys(key for key in keys if key not in self._cache))
        if missing:
            first_text = {key: text for key, text in zip(keys, texts, strict=True)}
            fresh = await self.inner.embed([first_text[key] for key in missing])
            if fresh.shape[0] != len(missing):
                raise EmbeddingError(f"embedder returned {fresh.shape[0]} vectors for {len(missing)} texts")
            for key, row in zip(missing, fresh, strict=True):
                self._cache[key] = row
        self.misses += len(missing)
        self.hits += len(keys) - len(missing)
        rows = [self._cache[key] for key in keys]
        for key in keys:
            self._cache.move_to_end(key)
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)
        return np.stack(rows) if rows else np.zeros((0, self.dim), np.float32)
