"""Embedders: the protocol, a local model, an OpenAI-compatible client, a hashing fallback, a cache.

``LocalEmbedder`` imports its runtime (ONNX Runtime, or sentence-transformers) only when it first embeds;
``OpenAICompatibleEmbedder`` (and httpx, ~0.1 s to import) loads when first named.
"""

from typing import TYPE_CHECKING, Any

from memkit.embedders._base import CachedEmbedder, Embedder, as_unit_vectors
from memkit.embedders._hashing import HashingEmbedder
from memkit.embedders._local import LocalEmbedder
from memkit.embedders._resolve import resolve_embedder

if TYPE_CHECKING:
    from memkit.embedders._openai import OpenAICompatibleEmbedder

__all__ = [
    "CachedEmbedder",
    "Embedder",
    "HashingEmbedder",
    "LocalEmbedder",
    "OpenAICompatibleEmbedder",
    "as_unit_vectors",
    "resolve_embedder",
]


def __getattr__(name: str) -> Any:
    if name == "OpenAICompatibleEmbedder":
        from memkit.embedders._openai import OpenAICompatibleEmbedder

        return OpenAICompatibleEmbedder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))  # the lazy name too (completion, help())
