"""memkit: layered, async memory for AI agents.

``import memkit`` is light: numba, the embedders and every driver load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from memkit.errors import (
    BackendError,
    BackendRefusedError,
    BackendTimeoutError,
    BackendUnavailableError,
    CachedToolError,
    CapabilityError,
    ConfigurationError,
    ConflictError,
    ContentError,
    CorruptDataError,
    DimensionMismatchError,
    EmbeddingError,
    ImportanceError,
    InvalidURLError,
    InvalidVectorError,
    LLMBudgetError,
    LLMError,
    LLMRefusedError,
    LLMTimeoutError,
    LLMUnavailableError,
    MemkitError,
    MissingDependencyError,
    NotFoundError,
    NotOpenError,
    ScopeError,
    SerializationError,
    StructuredOutputError,
    SummarizerError,
    UnknownSchemeError,
    ValidationError,
    WriterBusyError,
)

if TYPE_CHECKING:
    from memkit._client import Memkit
    from memkit._context import Context, ContextConfig
    from memkit._forget import UserForgotten
    from memkit._observe import ObserveConfig
    from memkit._registry import open_backend
    from memkit._url import StorageURL
    from memkit.backend import Scope, Weights
    from memkit.layers._turns import Turn
    from memkit.layers.checkpoints import AgentState, CheckpointConfig, CheckpointInfo, Checkpoints
    from memkit.layers.episodic import Action, Episode, EpisodeHit, EpisodicConfig, EpisodicMemory
    from memkit.layers.graph import Edge, GraphConfig, GraphUpdate, KnowledgeGraph, Node, Subgraph
    from memkit.layers.longterm import (
        KINDS,
        LongTermConfig,
        LongTermMemory,
        Memory,
        MemoryKind,
        MemoryPage,
        NewMemory,
        RecallHit,
        StoreResult,
    )
    from memkit.layers.shortterm import (
        AnthropicMessages,
        ExtractiveSummarizer,
        LLMSummarizer,
        SessionSnapshot,
        ShortTermConfig,
        ShortTermMemory,
        ShortTermSession,
        Summarizer,
    )
    from memkit.layers.toolcache import CachedMCPSession, CacheStats, ToolCache, ToolCacheConfig
    from memkit.layers.working import TaskState, WorkingItem, WorkingMemory
    from memkit.tokens import EstimateTokenizer, TiktokenTokenizer, Tokenizer

__version__ = "0.1.0"

_LAZY = {
    "Memkit": "memkit._client",
    "Context": "memkit._context",
    "ContextConfig": "memkit._context",
    "ObserveConfig": "memkit._observe",
    "UserForgotten": "memkit._forget",
    "open_backend": "memkit._registry",
    "StorageURL": "memkit._url",
    "Scope": "memkit.backend",
    "Weights": "memkit.backend",
    "Turn": "memkit.layers._turns",
    **dict.fromkeys(
        ("KINDS", "LongTermConfig", "LongTermMemory", "Memory", "MemoryKind", "MemoryPage", "RecallHit", "StoreResult"),
        "memkit.layers.longterm",
    ),
    "NewMemory": "memkit.layers.longterm",
    **dict.fromkeys(
        (
            "AnthropicMessages",
            "ExtractiveSummarizer",
            "LLMSummarizer",
            "SessionSnapshot",
            "ShortTermConfig",
            "ShortTermMemory",
            "ShortTermSession",
            "Summarizer",
        ),
        "memkit.layers.shortterm",
    ),
    **dict.fromkeys(("TaskState", "WorkingItem", "WorkingMemory"), "memkit.layers.working"),
    **dict.fromkeys(("Action", "Episode", "EpisodeHit", "EpisodicConfig", "EpisodicMemory"), "memkit.layers.episodic"),
    **dict.fromkeys(
        ("Edge", "GraphConfig", "GraphUpdate", "KnowledgeGraph", "Node", "Subgraph"), "memkit.layers.graph"
    ),
    **dict.fromkeys(("AgentState", "CheckpointConfig", "CheckpointInfo", "Checkpoints"), "memkit.layers.checkpoints"),
    **dict.fromkeys(("CacheStats", "CachedMCPSession", "ToolCache", "ToolCacheConfig"), "memkit.layers.toolcache"),
    **dict.fromkeys(("EstimateTokenizer", "TiktokenTokenizer", "Tokenizer"), "memkit.tokens"),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'memkit' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "KINDS",
    "BackendError",
    "BackendRefusedError",
    "BackendTimeoutError",
    "BackendUnavailableError",
    "CachedToolError",
    "CapabilityError",
    "ConfigurationError",
    "ConflictError",
    "ContentError",
    "CorruptDataError",
    "DimensionMismatchError",
    "EmbeddingError",
    "ImportanceError",
    "InvalidURLError",
    "InvalidVectorError",
    "LLMBudgetError",
    "LLMError",
    "LLMRefusedError",
    "LLMTimeoutError",
    "LLMUnavailableError",
    "LongTermConfig",
    "LongTermMemory",
    "Memkit",
    "MemkitError",
    "Memory",
    "MemoryKind",
    "MemoryPage",
    "MissingDependencyError",
    "NewMemory",
    "NotFoundError",
    "NotOpenError",
    "RecallHit",
    "Scope",
    "SessionSnapshot",
    "ScopeError",
    "SerializationError",
    "StorageURL",
    "StructuredOutputError",
    "SummarizerError",
    "WriterBusyError",
    "StoreResult",
    "Turn",
    "UnknownSchemeError",
    "UserForgotten",
    "ValidationError",
    "Weights",
    "__version__",
    "open_backend",
    "AnthropicMessages",
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "ShortTermConfig",
    "ShortTermMemory",
    "ShortTermSession",
    "Summarizer",
    "TaskState",
    "WorkingItem",
    "WorkingMemory",
    "EstimateTokenizer",
    "TiktokenTokenizer",
    "Tokenizer",
    "CacheStats",
    "CachedMCPSession",
    "ToolCache",
    "ToolCacheConfig",
    "AgentState",
    "CheckpointConfig",
    "CheckpointInfo",
    "Checkpoints",
    "Action",
    "Episode",
    "EpisodeHit",
    "EpisodicConfig",
    "EpisodicMemory",
    "Context",
    "ContextConfig",
    "ObserveConfig",
    "Edge",
    "GraphConfig",
    "GraphUpdate",
    "KnowledgeGraph",
    "Node",
    "Subgraph",
]
