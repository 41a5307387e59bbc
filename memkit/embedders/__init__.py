"""Embedders: the protocol, a local model, an OpenAI-compatible client, a hashing fallback, a cache.

``LocalEmbedder`` imports its runtime (ONNX Runtime, or sentence-transformers) only when it first embeds.
"""

from memkit.embedders._base import CachedEmbedder, Embedder, as_unit_vectors
from memkit.embedders._hashing import HashingEmbedder
from memkit.embedders._local import LocalEmbedder
from memkit.embedders._openai import OpenAICompatibleEmbedder
from memkit.embedders._resolve import resolve_embedder

__all__ = [
    "CachedEmbedder",
    "Embedder",
    "HashingEmbedder",
    "LocalEmbedder",
    "OpenAICompatibleEmbedder",
    "as_unit_vectors",
    "resolve_embedder",
]
