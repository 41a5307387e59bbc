"""Long-term memory: facts, preferences, decisions and knowledge, recalled by a hybrid score."""

from memkit.layers.longterm._layer import LongTermMemory
from memkit.layers.longterm._records import (
    KINDS,
    LongTermConfig,
    Memory,
    MemoryKind,
    MemoryPage,
    RecallHit,
    StoreResult,
    SupersedeResult,
)
from memkit.layers.longterm._writes import NewMemory

__all__ = [
    "KINDS",
    "LongTermConfig",
    "LongTermMemory",
    "Memory",
    "MemoryKind",
    "MemoryPage",
    "NewMemory",
    "RecallHit",
    "StoreResult",
    "SupersedeResult",
]
