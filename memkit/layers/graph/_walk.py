"""k-hop walks over the stored edges: a filtered scan per frontier node, limits and cycle safety in the layer.

Each hop reads, for each frontier node, its newest ``fan_out`` edges with one ``scan`` (a filter on the
edge's end field, pushed into every backend's index; a few nodes at a time), so the most recently asserted
relations are followed and a hub with thousands of edges costs what a small node does. One scan over the
whole frontier was tried first: a hub in it made every hop read (and decode) all of the hub's edges.
Nodes are read once, at the end, with one ``get``. A visited set makes cycles harmless.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Final

import msgspec

from memkit._concurrency import gather_bounded
from memkit.backend import FilterValue, Record, RecordStore, Scope
from memkit.layers.graph._codec import (
    LIVE,
    EdgeBody,
    decode_edge,
    decode_node,
    holds_at,
    owned_scan,
    to_edge,
    to_node,
)
from memkit.layers.graph._records import Direction, Edge, GraphConfig, Node, Subgraph

__all__ = ["WalkLimits", "walk"]

_PAGE_MAX: Final = 1_000
_SCANS_AT_ONCE: Final = 8
"""Frontier nodes whose edges are read side by side (a server backend overlaps the round trips)."""
_END_FIELD: Final[dict[Direction, str]] = {"out": "out", "in": "in", "both": "ends"}


class WalkLimits(msgspec.Struct, frozen=True, kw_only=True):
    depth: int
    fan_out: int
    max_nodes: int
    direction: Direction
    relations: tuple[str, ...] | None
    as_of: datetime | None


async def walk(
    store: RecordStore, config: GraphConfig, *, scope: Scope, root: Record, limits: WalkLimits, now: float
) -> Subgraph:
    """The neighbourhood of ``root`` within ``limits``: breadth first, ``fan_out`` edges per node and hop."""
    depth = {root.id: 0}
    kept: dict[str, tuple[int, EdgeBody]] = {}
    frontier = [root.id]
    truncated = False
    budget = max(limits.fan_out, config.max_edges_per_hop // len(frontier))
    for hop in range(1, limits.depth + 1):
        calls = [functools.partial(_edges_of, store, config, scope=scope, node=node, limits=limits,
                                   now=now, budget=budget) for node in frontier]  # fmt: skip
        reached: list[str] = []
        for node, (found, cut) in zip(frontier, await gather_bounded(calls, _SCANS_AT_ONCE), strict=True):
            truncated |= cut
            for record_id, body in found:
                there = body.dst if body.src == node else body.src
                if there not in depth:
                    if len(depth) >= limits.max_nodes:
                        truncated = True
                        continue
                    depth[there] = hop
                    reached.append(there)
                kept.setdefault(record_id, (hop, body))
        frontier = reached
        if not frontier:
            break
        budget = max(limits.fan_out, config.max_edges_per_hop // len(frontier))
    ordered = sorted(((hop, rid, body) for rid, (hop, body) in kept.items()), key=lambda k: k[0])
    return await _subgraph(store, config, scope=scope, root=root, depth=depth, kept=ordered, truncated=truncated)


async def _edges_of(
    store: RecordStore,
    config: GraphConfig,
    *,
    scope: Scope,
    node: str,
    limits: WalkLimits,
    now: float,
    budget: int,
) -> tuple[list[tuple[str, EdgeBody]], bool]:
    """The newest ``fan_out`` edges of ``node`` the walk's way that hold at ``as_of`` (now by default); True
    as well when it has more (or reading them ran past ``budget``)."""
    live = limits.as_of is None  # ended edges never hold now: the index leaves them out
    filters: dict[str, FilterValue] = {_END_FIELD[limits.direction]: (node + LIVE if live else node,)}
    if limits.relations is not None:
        filters["rel"] = limits.relations
    found: list[tuple[str, EdgeBody]] = []
    cursor, read = None, 0
    while True:
        want = max(1, min(_PAGE_MAX, limits.fan_out - len(found) + 1, budget - read))  # one more: are there more?
        page = await owned_scan(store, config.edges_collection, scope, filters, limit=want, cursor=cursor,
                                newest_first=True)  # fmt: skip
        read += len(page.records)
        for record in page.records:
            body = decode_edge(record)
            if len(found) < limits.fan_out and holds_at(body, limits.as_of, now):
                found.append((record.id, body))
            elif len(found) >= limits.fan_out:
                return found, True
        cursor = page.next_cursor
        if cursor is None:
            return found, False
        if read >= budget:
            return found, True


async def _subgraph(
    store: RecordStore,
    config: GraphConfig,
    *,
    scope: Scope,
    root: Record,
    depth: dict[str, int],
    kept: list[tuple[int, str, EdgeBody]],
    truncated: bool,
) -> Subgraph:
    others = [node_id for node_id in depth if node_id != root.id]
    records = {r.id: r for r in await store.get(config.nodes_collection, others, scope)} if others else {}
    records[root.id] = root
    nodes: list[Node] = [to_node(i, decode_node(records[i])) for i in sorted(depth, key=depth.__getitem__)
                         if i in records]  # fmt: skip
    present = {n.id for n in nodes}
    edges: list[Edge] = [to_edge(rid, body) for _, rid, body in kept if body.src in present and body.dst in present]
    return Subgraph(root=nodes[0], nodes=nodes, edges=edges, depth={i: depth[i] for i in present if i is not None},
                    truncated=truncated)  # fmt: skip
