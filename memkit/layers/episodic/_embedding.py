"""Embedding for a layer: the collection's embedder recorded once and checked, and vectors checked.

Long-term memory does the same inside its class (``LongTermMemory.setup`` / ``_embed``); these are the
same rules as functions, in the same namespace and shape, so one collection is judged alike by both layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from memkit.backend import Backend
from memkit.embedders import Embedder, as_unit_vectors
from memkit.errors import ConfigurationError, EmbeddingError, InvalidVectorError
from memkit.layers.longterm._layer import META_NAMESPACE, _identity

__all__ = ["claim_collection", "embed_texts"]

_encode_meta = msgspec.json.Encoder().encode
_decode_meta = msgspec.json.Decoder(dict[str, Any]).decode


async def claim_collection(backend: Backend, embedder: Embedder, collection: str, config_name: str) -> None:
    """Create ``collection`` for ``embedder``'s vectors, or check it holds them already: vectors of two
    models in one collection compare as noise, so another embedder is refused, never mixed in."""
    dim, model_id = _identity(embedder)
    wanted: dict[str, Any] = {"model_id": model_id, "dim": dim}
    if not await backend.kv_replace(META_NAMESPACE, collection, _encode_meta(wanted), expected=None):
        stored = _decode_meta(await backend.kv_get(META_NAMESPACE, collection) or b"{}")
        if stored and stored != wanted:
            raise ConfigurationError(
                f"collection {collection!r} in {backend.url} holds vectors of embedder {stored.get('model_id')!r} "
                f"(dim {stored.get('dim')}); this client embeds with {model_id!r} (dim {dim}). "
                f"Use the same embedder, or another collection: {config_name}(collection=...)"
            )
    await backend.ensure_collection(collection, dim)


async def embed_texts(embedder: Embedder, texts: Sequence[str]) -> Any:
    """Unit vectors for ``texts``; whatever the embedder does wrong is an ``EmbeddingError`` naming it."""
    model = getattr(embedder, "model_id", type(embedder).__name__)
    try:
        matrix = await embedder.embed(list(texts))
    except EmbeddingError:
        raise
    except Exception as exc:
        raise EmbeddingError(f"embedder {model!r} failed: {type(exc).__name__}: {exc}") from exc
    try:
        vectors = as_unit_vectors(matrix, int(embedder.dim))
    except InvalidVectorError:
        raise
    except (TypeError, ValueError) as exc:  # strings, ragged rows...
        raise EmbeddingError(f"embedder {model!r} returned something that is not vectors: {exc}") from exc
    if vectors.shape[0] != len(texts):
        raise EmbeddingError(f"embedder {model!r} returned {vectors.shape[0]} vectors for {len(texts)} texts")
    return vectors
