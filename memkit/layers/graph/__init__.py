"""The knowledge graph: entities and relations per user, merged on upsert, walked k hops, valid over time."""

from memkit.layers.graph._extract import Extraction, heuristic_extraction
from memkit.layers.graph._layer import KnowledgeGraph
from memkit.layers.graph._records import (
    DEFAULT_FUNCTIONAL,
    Direction,
    Edge,
    GraphConfig,
    GraphUpdate,
    Interval,
    Node,
    Subgraph,
)

__all__ = [
    "DEFAULT_FUNCTIONAL",
    "Direction",
    "Edge",
    "Extraction",
    "GraphConfig",
    "GraphUpdate",
    "Interval",
    "KnowledgeGraph",
    "Node",
    "Subgraph",
    "heuristic_extraction",
]
