"""memkit: layered, async memory for AI agents.

``import memkit`` is light: numba, the embedders and every driver load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from memkit._errors import (
    BackendError,
    BackendTimeoutError,
    BackendUnavailableError,
    CapabilityError,
    ConfigurationError,
    ContentError,
    CorruptDataError,
    DimensionMismatchError,
    EmbeddingError,
    ImportanceError,
    InvalidURLError,
    InvalidVectorError,
    MemkitError,
    MissingDependencyError,
    NotFoundError,
    ScopeError,
    UnknownSchemeError,
    ValidationError,
)
from memkit._records import KINDS, Memory, MemoryKind, RecallHit, Scope
from memkit._url import StorageURL

if TYPE_CHECKING:
    from memkit._backend import Weights
    from memkit._client import Memkit
    from memkit._conversation import Turn
    from memkit._longterm import LongTermConfig, LongTermMemory, MemoryPage, StoreResult
    from memkit._registry import open_backend

__version__ = "0.1.0"

_LAZY = {
    "Memkit": "memkit._client",
    "LongTermConfig": "memkit._longterm",
    "LongTermMemory": "memkit._longterm",
    "MemoryPage": "memkit._longterm",
    "StoreResult": "memkit._longterm",
    "Weights": "memkit._backend",
    "Turn": "memkit._conversation",
    "open_backend": "memkit._registry",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'memkit' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "KINDS",
    "BackendError",
    "BackendTimeoutError",
    "BackendUnavailableError",
    "CapabilityError",
    "ConfigurationError",
    "ContentError",
    "CorruptDataError",
    "DimensionMismatchError",
    "EmbeddingError",
    "ImportanceError",
    "InvalidURLError",
    "InvalidVectorError",
    "LongTermConfig",
    "LongTermMemory",
    "Memkit",
    "MemkitError",
    "Memory",
    "MemoryKind",
    "MemoryPage",
    "MissingDependencyError",
    "NotFoundError",
    "RecallHit",
    "Scope",
    "ScopeError",
    "StorageURL",
    "StoreResult",
    "Turn",
    "UnknownSchemeError",
    "ValidationError",
    "Weights",
    "__version__",
    "open_backend",
]
