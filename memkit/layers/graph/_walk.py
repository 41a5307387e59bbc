"""k-hop walks over the stored edges: limits and cycle safety in the layer.

Each hop follows, for each frontier node, its newest ``fan_out`` edges, so the most recently asserted
relations are followed and a hub with thousands of edges costs what a small node does. Where the node's
list of newest edges can say which (``_adjacency``), the whole frontier's are read with one ``get``; else
with one ``scan`` per node (a filter on the edge's end field, pushed into every backend's index; a few
nodes at a time). One scan over the whole frontier was tried first: a hub in it made every hop read (and
decode) all of the hub's edges. A hop's nodes are read with one ``get`` before the next hop (their lists),
the rest at the end. A visited set makes cycles harmless.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Final

import msgspec

from memkit._concurrency import gather_bounded
from memkit.backend import FilterValue, Record, RecordStore, Scope
from memkit.layers.graph._adjacency import candidates
from memkit.layers.graph._codec import (
    LIVE,
    Adjacent,
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
    records = {root.id: root}
    kept: dict[str, tuple[int, EdgeBody]] = {}
    frontier = [root.id]
    truncated = False
    for hop in range(1, limits.depth + 1):
        budget = max(limits.fan_out, config.max_edges_per_hop // len(frontier))
        found = await _hop(store, config, scope=scope, frontier=frontier, records=records, limits=limits,
                           now=now, budget=budget, room=limits.max_nodes - len(depth))  # fmt: skip
        reached: list[str] = []
        for node in frontier:
            edges, cut = found[node]
            truncated |= cut
            for record_id, body in edges:
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
        unread = [node for node in frontier if node not in records]
        if hop < limits.depth and unread:  # the next hop starts from these nodes' lists
            records.update((r.id, r) for r in await store.get(config.nodes_collection, unread, scope))
    ordered = sorted(((hop, rid, body) for rid, (hop, body) in kept.items()), key=lambda k: k[0])
    return await _subgraph(store, config, scope=scope, records=records, root=root, depth=depth, kept=ordered,
                           truncated=truncated)  # fmt: skip


Found = tuple[list[tuple[str, EdgeBody]], bool]
"""A node's edges a hop follows (id and body), and whether it has more."""


async def _hop(
    store: RecordStore,
    config: GraphConfig,
    *,
    scope: Scope,
    frontier: list[str],
    records: dict[str, Record],
    limits: WalkLimits,
    now: float,
    budget: int,
    room: int,
) -> dict[str, Found]:
    """The edges each frontier node's hop follows: those its list of newest edges names, all read with one
    ``get``; a node whose list cannot say, or names an edge that is gone or has ended, is read by scan.
    ``records`` gains the nodes read on the way (at most ``room``)."""
    plans: dict[str, tuple[list[Adjacent], bool]] = {}
    if limits.as_of is None and config.adjacency_cap:  # lists hold what holds now (or later), not the past
        for node in frontier:
            if (record := records.get(node)) is not None and (
                plan := candidates(decode_node(record), limits.direction, limits.relations, limits.fan_out)
            ) is not None:
                plans[node] = plan
    wanted = [entry.edge for entries, _ in plans.values() for entry in entries]
    # The nodes the lists lead to are read beside their edges (one round trip, not two): those a walk
    # that stops at max_nodes can still reach; an edge that fails its check only costs a node read.
    ahead = list(dict.fromkeys(e.node for entries, _ in plans.values() for e in entries if e.node not in records))
    reads = [functools.partial(store.get, config.edges_collection, wanted, scope),
             functools.partial(store.get, config.nodes_collection, ahead[: max(0, room)], scope)]  # fmt: skip
    side_by_side = 1 if store.capabilities.cheap_scans else 2
    got_edges, got_nodes = await gather_bounded(reads, side_by_side) if wanted else ([], [])
    edges = {r.id: r for r in got_edges}
    records.update((r.id, r) for r in got_nodes)
    found: dict[str, Found] = {}
    for node, (entries, more) in plans.items():
        followed = [(e.edge, decode_edge(edges[e.edge])) for e in entries if e.edge in edges]
        if len(followed) == len(entries) and all(holds_at(body, None, now) for _, body in followed):
            found[node] = (followed, more)
    scans = [node for node in frontier if node not in found]
    calls = [functools.partial(_edges_of, store, config, scope=scope, node=node, limits=limits, now=now,
                               budget=budget) for node in scans]  # fmt: skip
    at_once = 1 if store.capabilities.cheap_scans else _SCANS_AT_ONCE  # in process: nothing to overlap
    found.update(zip(scans, await gather_bounded(calls, at_once), strict=True))
    return found


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
    records: dict[str, Record],
    root: Record,
    depth: dict[str, int],
    kept: list[tuple[int, str, EdgeBody]],
    truncated: bool,
) -> Subgraph:
    """The walk's nodes (``records``: those read already) and the edges between them."""
    others = [node_id for node_id in depth if node_id not in records]
    if others:
        records.update((r.id, r) for r in await store.get(config.nodes_collection, others, scope))
    nodes: list[Node] = [to_node(i, decode_node(records[i])) for i in sorted(depth, key=depth.__getitem__)
                         if i in records]  # fmt: skip
    present = {n.id for n in nodes}
    edges: list[Edge] = [to_edge(rid, body) for _, rid, body in kept if body.src in present and body.dst in present]
    return Subgraph(root=nodes[0], nodes=nodes, edges=edges, depth={i: depth[i] for i in present if i is not None},
                    truncated=truncated)  # fmt: skip
