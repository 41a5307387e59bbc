"""k-hop walks over the stored edges: one filtered scan per hop, limits and cycle safety in the layer.

Each hop reads the edges touching the frontier with one ``scan`` (an any-of filter on the edge's ends,
pushed into every backend's index), newest first, so the most recently asserted relations are followed
when a limit cuts. Nodes are read once, at the end, with one ``get``. A visited set makes cycles harmless.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Final

import msgspec

from memkit.backend import FilterValue, Record, RecordStore, Scope
from memkit.layers.graph._codec import OWNER, EdgeBody, decode_edge, decode_node, holds_at, to_edge, to_node
from memkit.layers.graph._records import Direction, Edge, GraphConfig, Node, Subgraph

__all__ = ["WalkLimits", "walk"]

_PAGE_MAX: Final = 1_000
_END_FIELD: Final[dict[Direction, str]] = {"out": "src", "in": "dst", "both": "ends"}


class WalkLimits(msgspec.Struct, frozen=True, kw_only=True):
    depth: int
    fan_out: int
    max_nodes: int
    direction: Direction
    relations: tuple[str, ...] | None
    as_of: datetime | None


async def walk(
    store: RecordStore, config: GraphConfig, *, owner: str, scope: Scope, root: Record, limits: WalkLimits, now: float
) -> Subgraph:
    """The neighbourhood of ``root`` within ``limits``: breadth first, ``fan_out`` edges per node and hop."""
    depth = {root.id: 0}
    kept: dict[str, tuple[int, str, EdgeBody]] = {}
    frontier = [root.id]
    truncated = False
    for hop in range(1, limits.depth + 1):
        found, cut = await _edges_touching(store, config, owner=owner, scope=scope, frontier=frontier, limits=limits,
                                           now=now)  # fmt: skip
        truncated |= cut
        frontier_set = set(frontier)
        per_node: Counter[str] = Counter()
        reached: list[str] = []
        for record_id, body in found:
            if record_id in kept:
                continue  # seen from the other end at an earlier hop
            for here, there in _steps(body, frontier_set, limits.direction):
                if per_node[here] >= limits.fan_out:
                    truncated = True
                    continue
                if there not in depth:
                    if len(depth) >= limits.max_nodes:
                        truncated = True
                        continue
                    depth[there] = hop
                    reached.append(there)
                per_node[here] += 1
                kept.setdefault(record_id, (hop, record_id, body))
        frontier = reached
        if not frontier:
            break
    ordered = sorted(kept.values(), key=lambda k: k[0])
    return await _subgraph(store, config, scope=scope, root=root, depth=depth, kept=ordered, truncated=truncated)


def _steps(body: EdgeBody, frontier: set[str], direction: Direction) -> list[tuple[str, str]]:
    """(frontier node, node across the edge) for each way ``body`` leads out of the frontier."""
    steps = []
    if direction != "in" and body.src in frontier:
        steps.append((body.src, body.dst))
    if direction != "out" and body.dst in frontier and body.dst != body.src:
        steps.append((body.dst, body.src))
    return steps


async def _edges_touching(
    store: RecordStore,
    config: GraphConfig,
    *,
    owner: str,
    scope: Scope,
    frontier: list[str],
    limits: WalkLimits,
    now: float,
) -> tuple[list[tuple[str, EdgeBody]], bool]:
    """The edges that touch the frontier the walk's way and held at ``as_of`` (now by default), newest first;
    True as well when the hop's edge budget cut some off."""
    filters: dict[str, FilterValue] = {OWNER: owner, _END_FIELD[limits.direction]: tuple(frontier)}
    if limits.relations is not None:
        filters["rel"] = limits.relations
    if limits.as_of is None:
        filters["live"] = True  # ended edges never match "now": leave them in the store
    budget = config.max_edges_per_hop
    per_page = min(_PAGE_MAX, budget, limits.fan_out * len(frontier) * (2 if limits.direction == "both" else 1))
    found: list[tuple[str, EdgeBody]] = []
    cursor = None
    read = 0
    while True:
        page = await store.scan(config.edges_collection, scope, filters=filters, limit=min(per_page, budget - read),
                                cursor=cursor, newest_first=True)  # fmt: skip
        read += len(page.records)
        for record in page.records:
            body = decode_edge(record)
            if holds_at(body, limits.as_of, now):
                found.append((record.id, body))
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
