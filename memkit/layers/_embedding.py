"""Embedding for the layers that store vectors (long-term, episodic): the collection's embedder recorded
once and checked, and what an embedder returns checked. One set of rules, so a collection is judged alike by
every layer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import msgspec

from memkit._repr import short_repr
from memkit._validation import check_text
from memkit.backend import Backend
from memkit.embedders import Embedder, as_unit_vectors
from memkit.errors import ConfigurationError, EmbeddingError, InvalidVectorError, MemkitError, ValidationError

__all__ = ["META_NAMESPACE", "claim_collection", "embed_texts", "embedder_identity"]

META_NAMESPACE: Final = "memkit.collections"
"""Key-value namespace of each collection's embedder (model id and dimension)."""

_encode_meta = msgspec.json.Encoder().encode
_decode_meta = msgspec.json.Decoder(dict[str, Any]).decode


async def claim_collection(backend: Backend, embedder: Embedder, collection: str, config_name: str) -> None:
    """Create ``collection`` for ``embedder``'s vectors, or check it holds them already: vectors of two
    models in one collection compare as noise, so another embedder is refused, never mixed in."""
    dim, model_id = embedder_identity(embedder)
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


def embedder_identity(embedder: Embedder) -> tuple[int, str]:
    """The embedder's dimension and model id, checked before the collection records them."""
    try:
        dim, model_id = embedder.dim, embedder.model_id
    except MemkitError:
        raise
    except Exception as exc:
        raise EmbeddingError(f"embedder {type(embedder).__name__} cannot tell its dim or model_id: {exc}") from exc
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise EmbeddingError(f"embedder {model_id!r}: dim must be a positive integer, got {short_repr(dim)}")
    try:
        check_text(model_id, "model_id")
    except ValidationError as exc:
        raise EmbeddingError(f"embedder {type(embedder).__name__}: {exc}") from None
    return dim, model_id
