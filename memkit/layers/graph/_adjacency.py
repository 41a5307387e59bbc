"""Each node's newest edges, kept on the node, so a walk's hop reads edges by id instead of scanning.

Why: a hop reads, for each frontier node, its newest ``fan_out`` edges. As a filtered scan in time order,
a hub's thousands of edges cost Redis and Postgres a sort on every hop (a 2-hop walk over 50,000 edges took
22.6 ms and 74 ms at p50); kept on the node, newest first and capped, they cost one read by id per hop.

The list is a hint; the edge records are the truth. Entries are written before the edges they name, and
a walk reads every edge it follows: one that is absent (a crash between the two writes, a delete) or no
longer holds is dropped and that node is read by scan, so the list can never hide an edge nor invent one.
A walk reads a node by scan as well when its list is not kept (nodes stored before it existed), when the
list may lack older edges the walk wants (``more``), and for a walk ``as_of`` a past moment.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence

import msgspec

from memkit.backend import Record
from memkit.layers.graph._codec import IN, OUT, Adjacent, EdgeBody, NodeBody, is_live
from memkit.layers.graph._records import Direction

__all__ = ["Changes", "candidates", "changes_for", "removals", "with_changes"]

Changes = dict[str, dict[str, Adjacent | None]]
"""Per node id: per edge id, the entry the node's list must hold (None: it must not hold one)."""

_WAY: dict[Direction, int] = {"out": OUT, "in": IN, "both": OUT | IN}
_NEWEST = operator.attrgetter("stamp", "edge")


def changes_for(edges: Iterable[tuple[Record, EdgeBody]], now: float) -> Changes:
    """What the lists of the edges' endpoints must hold for these edge records: an entry while an edge
    holds (or will), none once it has ended."""
    changes: Changes = {}
    for record, body in edges:
        live = is_live(body, now)
        if body.src == body.dst:
            changes.setdefault(body.src, {})[record.id] = (
                Adjacent(record.id, body.src, body.rel, record.timestamp, OUT | IN) if live else None)  # fmt: skip
            continue
        changes.setdefault(body.src, {})[record.id] = (
            Adjacent(record.id, body.dst, body.rel, record.timestamp, OUT) if live else None)  # fmt: skip
        changes.setdefault(body.dst, {})[record.id] = (
            Adjacent(record.id, body.src, body.rel, record.timestamp, IN) if live else None)  # fmt: skip
    return changes


def removals(edges: Iterable[tuple[str, str, str]], *, keep: str | None = None) -> Changes:
    """What the lists of these deleted edges' ends (edge id, source id, target id) must no longer hold;
    ``keep``: a node being deleted itself, whose list is not worth a write."""
    changes: Changes = {}
    for edge, src, dst in edges:
        for node in {src, dst} - {keep}:
            changes.setdefault(node, {})[edge] = None
    return changes


def with_changes(body: NodeBody, changes: Mapping[str, Adjacent | None], cap: int) -> NodeBody:
    """``body`` with its list changed (``body`` itself when nothing changes): entries replaced or removed,
    newest first, cut at ``cap`` (then ``more``: older edges may hold that the list no longer names)."""
    if not body.indexed:
        return body  # nothing relies on the list of a node stored before lists: no write for it
    kept: list[Adjacent] = []
    replaced: list[Adjacent] = []
    for entry in body.adjacent:
        (replaced if entry.edge in changes else kept).append(entry)
    added = [entry for entry in changes.values() if entry is not None]
    if len(added) == len(replaced) and all(entry in replaced for entry in added):
        return body  # each change is what the list holds already
    kept += added
    kept.sort(key=_NEWEST, reverse=True)  # the list was in order: nearly sorted
    more = body.more or len(kept) > cap
    return msgspec.structs.replace(body, adjacent=tuple(kept[:cap]), more=more)


def candidates(
    body: NodeBody, direction: Direction, relations: Sequence[str] | None, fan_out: int
) -> tuple[list[Adjacent], bool] | None:
    """The entries a hop follows from this node (its newest ``fan_out`` the walk's way) and whether it has
    more; None when the list cannot say (the node is then read by scan)."""
    if not body.indexed:
        return None
    way = _WAY[direction]
    wanted = [e for e in body.adjacent if e.way & way and (relations is None or e.rel in relations)]
    if len(wanted) > fan_out:
        return wanted[:fan_out], True
    if body.more:
        return None
    return wanted, False
