"""A deterministic, non-semantic embedder for tests and zero-dependency runs."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence

import numpy as np

from memkit._repr import short_repr
from memkit.embedders._base import Matrix
from memkit.errors import ValidationError
from memkit.text import tokenize

__all__ = ["HashingEmbedder"]

_MIN_DIM, _MAX_DIM = 8, 65_536
"""Below 8 every text collides; above 65,536 a vector is 256 KiB and ``dim=10**12`` failed only at embed."""


class HashingEmbedder:
    """Feature hashing of stemmed words (and word pairs) into ``dim`` signed buckets.

    Not semantic: "car" and "automobile" share nothing. Texts sharing words get
    similar vectors, which is enough for tests and for running with no model.
    """

    def __init__(self, dim: int = 384) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or not _MIN_DIM <= dim <= _MAX_DIM:
            raise ValidationError(
                f"HashingEmbedder dim must be an integer in {_MIN_DIM}..{_MAX_DIM}, got {short_repr(dim)}"
            )
        self._dim = dim

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def model_id(self) -> str:
        return f"hashing-v1-{self._dim}"

    def _embed_one(self, text: str) -> Matrix:
        vector = np.zeros(self._dim, np.float32)
        tokens = tokenize(text) or [text.strip().lower() or "\0empty"]
        features = tokens + [f"{a} {b}" for a, b in itertools.pairwise(tokens)]
        for feature in features:
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % self._dim
            vector[bucket] += 1.0 if digest[4] & 1 else -1.0
        norm = float(np.linalg.norm(vector))
        if norm == 0:
            vector[0] = 1.0
            norm = 1.0
        return vector / norm

    async def embed(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.zeros((0, self._dim), np.float32)
        return np.stack([self._embed_one(text) for text in texts])
