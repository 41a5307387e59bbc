"""Fact extraction: what in a finished turn is worth remembering, and how it is reconciled with memory."""

from memkit.extract._batch import FactBatcher
from memkit.extract._heuristic import HeuristicConfig, HeuristicFactExtractor
from memkit.extract._llm import LLMExtractionConfig, LLMFactExtractor
from memkit.extract._protocol import BatchFactExtractor, FactExtractor, Reconciler
from memkit.extract._reconcile import HeuristicReconciler, ReconcileConfig
from memkit.extract._records import (
    ACTIONS,
    FACT_KINDS,
    Action,
    Decision,
    Extraction,
    Fact,
    FactEvent,
    FactKind,
    ObservedTurn,
    Skipped,
)
from memkit.extract._writer import FactWriter, FactWriterConfig

__all__ = [
    "ACTIONS",
    "FACT_KINDS",
    "Action",
    "BatchFactExtractor",
    "Decision",
    "Extraction",
    "Fact",
    "FactBatcher",
    "FactEvent",
    "FactExtractor",
    "FactKind",
    "FactWriter",
    "FactWriterConfig",
    "HeuristicConfig",
    "HeuristicFactExtractor",
    "HeuristicReconciler",
    "LLMExtractionConfig",
    "LLMFactExtractor",
    "ObservedTurn",
    "ReconcileConfig",
    "Reconciler",
    "Skipped",
]
