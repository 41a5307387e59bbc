"""The knowledge graph's records: entities (nodes), relations between them (edges), and what a walk returns.

Frozen msgspec Structs like every memkit record. A ``Node`` or ``Edge`` given to an upsert carries what the
caller knows; the ones returned carry everything stored (ids, times, validity history) filled in.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Final, Literal

import msgspec

from memkit.errors import ValidationError

__all__ = [
    "DEFAULT_FUNCTIONAL",
    "DEFAULT_TYPE",
    "Direction",
    "Edge",
    "GraphConfig",
    "GraphUpdate",
    "Interval",
    "Node",
    "Subgraph",
]

Direction = Literal["out", "in", "both"]
DEFAULT_TYPE: Final = "entity"
"""The type of a node created without one (an edge's endpoint, say); a later upsert with a type sets it."""
DEFAULT_FUNCTIONAL: Final = frozenset(
    {"lives_in", "works_at", "married_to", "born_in", "reports_to", "located_in", "is_named", "age"}
)
"""Relations a source has one current value of: a new target ends the old edge (``valid_to``)."""


class Interval(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A span of time an edge held: ``[valid_from, valid_to)``; ``valid_to`` None while it holds."""

    valid_from: datetime
    valid_to: datetime | None = None

    def holds_at(self, moment: datetime) -> bool:
        return self.valid_from <= moment and (self.valid_to is None or moment < self.valid_to)


# Node, Edge and Interval are untracked by the cycle collector (``gc=False``): an import holds tens of thousands
# and every full collection walked them. No cycle can pass through one: their values are JSON-like, checked
# by encoding before anything is written, and a value that contained the struct itself would not encode.
class Node(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """An entity: a person, a place, an organisation, a thing a user likes.

    Identity is the normalised name within a user's (or agent's) graph: "Ada Lovelace", " ada  lovelace"
    and "ADA LOVELACE" are one node. ``aliases`` are other names that resolve to it ("Ada", "the Countess").
    Upserting merges: attributes are added or overwritten key by key (never dropped), aliases are unioned,
    ``type`` is set when given. ``id``, ``created_at`` and ``updated_at`` are set by the graph.
    """

    name: str
    type: str | None = None
    attributes: dict[str, Any] = msgspec.field(default_factory=dict)
    aliases: list[str] = msgspec.field(default_factory=list)
    id: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None


class Edge(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A relation ``source -[relation]-> target`` between two entities, named by name or alias.

    One edge per (source, relation, target): asserting it again merges attributes and provenance. Relations
    are normalised ("works at" -> "works_at"). ``valid_from`` defaults to the moment of the upsert; for a
    functional relation (``GraphConfig.functional``, or ``functional=True``) the source's other current
    edge of that relation is ended there, never deleted. ``provenance``: ids of the memories or turns the
    relation came from (the newest ``GraphConfig.max_provenance`` kept). Endpoints that do not exist are
    created, typed ``source_type`` / ``target_type`` (default "entity").

    Returned edges carry ids, the endpoints' display names, and ``history``: every interval the relation
    held, oldest first (``valid_from`` / ``valid_to`` are the latest one's).
    """

    source: str
    relation: str
    target: str
    attributes: dict[str, Any] = msgspec.field(default_factory=dict)
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    provenance: list[str] = msgspec.field(default_factory=list)
    functional: bool | None = None
    """None: functional when the relation is in ``GraphConfig.functional``."""
    source_type: str | None = None
    target_type: str | None = None
    id: str | None = None
    source_id: str | None = None
    target_id: str | None = None
    history: list[Interval] = msgspec.field(default_factory=list)
    updated_at: datetime | None = None

    def holds_at(self, moment: datetime) -> bool:
        """True when the relation held at ``moment`` (any interval of its history)."""
        return any(interval.holds_at(moment) for interval in self.history)


class Subgraph(msgspec.Struct, frozen=True, kw_only=True):
    """The neighbourhood a walk found: the root, the nodes reached (with how many hops away), the edges."""

    root: Node
    nodes: list[Node]
    """Every node reached, the root first, then by distance (``depth[node.id]``)."""
    edges: list[Edge]
    """The edges walked, nearest first; only between nodes in ``nodes``."""
    depth: dict[str, int]
    truncated: bool = False
    """True when a limit (fan-out, ``max_nodes``, the per-hop edge budget) left part of the neighbourhood out."""

    def node(self, node_id: str) -> Node | None:
        return next((n for n in self.nodes if n.id == node_id), None)


class GraphUpdate(msgspec.Struct, frozen=True, kw_only=True):
    """What an upsert stored: each node and edge as it is now, in the order given (endpoints created for
    edges are in ``nodes`` too, after the nodes given)."""

    nodes: list[Node]
    edges: list[Edge]


class GraphConfig(msgspec.Struct, frozen=True, kw_only=True):
    nodes_collection: str = "graph_nodes"
    edges_collection: str = "graph_edges"
    functional: frozenset[str] = DEFAULT_FUNCTIONAL
    """Relations with one current target per source (normalised names)."""
    default_depth: int = 2
    max_depth: int = 4
    default_fan_out: int = 20
    """Edges followed from one node per hop, the most recently asserted first."""
    max_nodes: int = 200
    """Most nodes one walk returns."""
    max_edges_per_hop: int = 5_000
    """Edges read per hop at most: a hub with more is cut (``Subgraph.truncated``)."""
    adjacency_cap: int | None = None
    """Newest edges each node keeps a list of: a walk's hop reads those by id (a ``fan_out`` beyond it, or a
    walk ``as_of`` the past, reads by scan). 0 keeps none: every hop scans, and edge writes leave nodes be.
    None: 64, or 0 where the backend's scans cost what a read by id does (``Capabilities.cheap_scans``,
    memory://), since there the lists only cost writes (walks as fast without them, upserts 1.3x faster)."""
    resolve_similarity: float | None = None
    """Also resolve a name that no node has (as name or alias) to the owner's node whose name embeds most like
    it, when their cosine similarity is at least this (e.g. 0.85: "Dr. Ada Lovelace" -> "Ada Lovelace",
    "NYC" -> "New York" with the local model, but also "York" -> "New York"). None (the default): names and
    aliases only. Needs the client's embedder and a backend with vector search; nodes written while it was
    None have no name vector and are found by name and alias only."""
    max_name_chars: int = 200
    max_aliases: int = 50
    max_provenance: int = 20
    max_batch: int = 10_000
    llm_timeout_s: float = 30.0
    """Longest wait for the model's extraction; past it, the heuristic's relations are used."""
    extract_max_tokens: int = 800

    def __post_init__(self) -> None:
        _check_config(self)


def _check_config(config: GraphConfig) -> None:
    def require(ok: bool, what: str) -> None:
        if not ok:
            raise ValidationError(f"GraphConfig: {what}")

    def integer(value: object, low: int, high: int) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high

    for name in (config.nodes_collection, config.edges_collection):
        require(isinstance(name, str) and 0 < len(name) <= 512 and "\x00" not in name and name.isprintable(),
                "collection names must be printable, non-empty strings of at most 512 characters")  # fmt: skip
    require(config.nodes_collection != config.edges_collection, "nodes and edges need two collections")
    require(isinstance(config.functional, frozenset) and all(isinstance(r, str) for r in config.functional),
            "functional must be a frozenset of relation names")  # fmt: skip
    require(integer(config.max_depth, 1, 10), "max_depth must be an integer in 1..10")
    require(integer(config.default_depth, 1, max(1, config.max_depth) if integer(config.max_depth, 1, 10) else 1),
            "default_depth must be an integer in 1..max_depth")  # fmt: skip
    require(config.adjacency_cap is None or integer(config.adjacency_cap, 0, 10_000),
            "adjacency_cap must be None or an integer in 0..10,000")  # fmt: skip
    for field, low, high in (("default_fan_out", 1, 10_000), ("max_nodes", 1, 100_000),
                             ("max_edges_per_hop", 1, 1_000_000),
                             ("max_name_chars", 1, 10_000),
                             ("max_aliases", 0, 1_000), ("max_provenance", 0, 1_000), ("max_batch", 1, 1_000_000),
                             ("extract_max_tokens", 1, 100_000)):  # fmt: skip
        require(integer(getattr(config, field), low, high), f"{field} must be an integer in {low}..{high:,}")
    similarity = config.resolve_similarity
    require(similarity is None or (isinstance(similarity, int | float) and not isinstance(similarity, bool)
                                   and math.isfinite(similarity) and 0 < similarity <= 1),
            "resolve_similarity must be None or a cosine similarity in (0, 1]")  # fmt: skip
    timeout = config.llm_timeout_s
    require(isinstance(timeout, int | float) and not isinstance(timeout, bool) and math.isfinite(timeout)
            and 0 < timeout <= 3_600, "llm_timeout_s must be a number of seconds in (0, 3600]")  # fmt: skip
