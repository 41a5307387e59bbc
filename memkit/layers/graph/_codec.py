"""Nodes and edges <-> backend records: deterministic ids, normalised names, merging, validity.

A node's id is a digest of (owner, normalised name), an edge's of (owner, source id, relation, target id):
two writers creating the same entity or relation at once compute the same id, and the store's
create-if-absent (``replace(expected_body=None)``) lets exactly one create it; the other merges into it.
``owner`` is the exact user and agent (a query scope matches more widely: ``Scope(user_id="u")`` also
matches ``u``'s records with an agent) and is filtered on by every scan, so graphs never mix.
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import msgspec

from memkit._time import epoch
from memkit._time import from_epoch as _from_epoch
from memkit.backend import Fields, FilterValue, Page, Record, RecordStore, Scope
from memkit.errors import CorruptDataError
from memkit.layers._keys import digest_of, key_of
from memkit.layers.graph._records import DEFAULT_TYPE, Edge, Interval, Node

__all__ = [
    "IN",
    "OUT",
    "Adjacent",
    "EdgeBody",
    "NodeBody",
    "decode_edge",
    "decode_node",
    "edge_id",
    "edge_record",
    "merge_edge",
    "merge_node",
    "new_edge",
    "new_node",
    "node_id",
    "node_record",
    "with_node_body",
    "normal_name",
    "normal_relation",
    "owner_key",
    "to_edge",
    "to_node",
]

OWNER: Final = "owner"
LIVE: Final = "*"
"""Appended to a node id in an edge's end fields while the edge holds: a walk "now" asks for ``id*`` and the
store's index hands it only edges that hold, with no second filter to intersect (node ids are hex)."""
_SPACES = re.compile(r"\s+")
_NOT_WORD = re.compile(r"[^\w]+")
_EDGE_PUNCTUATION = "\"'`.,;:!?()[]{}<>"


class Adjacent(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One of a node's newest edges, as the node keeps it (see ``_adjacency``). Untracked by the cycle
    collector (strings and numbers only: no cycle can pass through one): a batch decodes tens of thousands."""

    edge: str
    node: str
    """The other end (the node itself for a loop)."""
    rel: str
    stamp: float
    """The edge record's scan-order time: the list is newest first, as a scan is."""
    way: int
    """``OUT`` when the node is the source, ``IN`` the target, both bits for a loop."""


OUT: Final = 1
IN: Final = 2


# The bodies hold tuples, not lists: a tuple of strings, numbers or ``Adjacent`` leaves the cycle collector's
# view at its first pass, while a list stays tracked; a batch of 1,000 edges decodes and builds thousands,
# each alive until the batch ends, and full collections were a quarter of a batched upsert.
class NodeBody(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    name: str
    type: str = DEFAULT_TYPE
    aliases: tuple[str, ...] = ()
    attributes: dict[str, Any] = msgspec.field(default_factory=dict)
    created: float = 0.0
    updated: float = 0.0
    adjacent: tuple[Adjacent, ...] = ()
    """The node's newest edges that hold (or will), newest first, at most ``GraphConfig.adjacency_cap``."""
    indexed: bool = False
    """Whether ``adjacent`` is kept: true for nodes created since it exists (older ones are read by scan)."""
    more: bool = False
    """Whether edges older than ``adjacent``'s last may hold too (the cap cut some): a walk wanting more
    than the list has reads the node by scan."""


class EdgeBody(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    src: str
    rel: str
    dst: str
    src_name: str
    dst_name: str
    history: tuple[tuple[float, float | None], ...] = ()
    attributes: dict[str, Any] = msgspec.field(default_factory=dict)
    provenance: tuple[str, ...] = ()
    updated: float = 0.0


_encode = msgspec.json.Encoder().encode
_decode_node = msgspec.json.Decoder(NodeBody).decode
_decode_edge = msgspec.json.Decoder(EdgeBody).decode


_LAST_EPOCH: Final = datetime.max.replace(tzinfo=UTC).timestamp()
"""253402300800.0: the float of datetime.max's Unix time rounds up to year 10000, which no datetime holds."""


@functools.lru_cache(maxsize=4_096)
def from_epoch(seconds: float) -> datetime:
    """Datetimes are immutable and a batch's records share their times (the moment of the upsert): one each.
    Times past the last datetime read as it (``valid_to=datetime.max``, or an older release's writes): an
    edge that cannot be decoded would take every walk through its node down with it."""
    return _from_epoch(seconds) if seconds < _LAST_EPOCH else datetime.max.replace(tzinfo=UTC)


def representable(moment: datetime) -> bool:
    """Whether ``moment`` reads back from the Unix time it is stored as (``datetime.max`` does; 9999-12-31
    23:59 at -05:00, in year 10000 in UTC, would read back as ``datetime.max``, not as itself)."""
    return moment.timestamp() <= _LAST_EPOCH


@functools.lru_cache(maxsize=65_536)  # a batch names each entity many times (every edge names two)
def normal_name(name: str) -> str:
    """The identity of a name: Unicode-folded, case-folded, single-spaced, without surrounding quotes or stops."""
    folded = _SPACES.sub(" ", unicodedata.normalize("NFKC", name).casefold()).strip()
    return folded.strip(_EDGE_PUNCTUATION + " ")


@functools.lru_cache(maxsize=4_096)
def normal_relation(relation: str) -> str:
    """``"Works At"`` -> ``"works_at"``: case-folded words joined by underscores."""
    return _NOT_WORD.sub("_", unicodedata.normalize("NFKC", relation).casefold()).strip("_")


def owner_key(scope: Scope) -> str:
    return key_of(scope.user_id, scope.agent_id)


@functools.lru_cache(maxsize=65_536)  # every edge of a batch resolves its two ends by id: a digest each
def node_id(owner: str, normal: str) -> str:
    return digest_of("node", owner, normal)


def edge_id(owner: str, src: str, relation: str, dst: str) -> str:
    """``digest_of("edge", owner, src, relation, dst)`` with its key written out (the same id, a test holds
    them equal): a batch computes one per edge, and the general key's list of parts was 40% of this."""
    key = f"4:edge|{len(owner)}:{owner}|{len(src)}:{src}|{len(relation)}:{relation}|{len(dst)}:{dst}"
    return hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


# -- nodes ------------------------------------------------------------------------------------------------
def new_node(node: Node, now: float, *, indexed: bool) -> NodeBody:
    return NodeBody(name=node.name.strip(), type=node.type or DEFAULT_TYPE, aliases=tuple(_unique([], node.aliases)),
                    attributes=dict(node.attributes), created=now, updated=now, indexed=indexed)  # fmt: skip


def merge_node(stored: NodeBody, node: Node, now: float, max_aliases: int) -> NodeBody:
    """``stored`` with ``node``'s attributes (key by key), aliases and type (when given) merged in."""
    aliases = tuple(_unique(stored.aliases, [node.name, *node.aliases], exclude=stored.name)[:max_aliases])
    attributes = {**stored.attributes, **node.attributes}
    kind = node.type or stored.type
    if aliases == stored.aliases and attributes == stored.attributes and kind == stored.type:
        return stored  # nothing new: no write
    return msgspec.structs.replace(stored, aliases=aliases, attributes=attributes, type=kind, updated=now)


def _unique(have: Sequence[str], more: list[str], exclude: str | None = None) -> list[str]:
    """``have`` then each of ``more`` whose normalised form is new (and not ``exclude``'s)."""
    seen = {normal_name(n) for n in have}
    if exclude is not None:
        seen.add(normal_name(exclude))
    out = list(have)
    for name in more:
        if (key := normal_name(name)) and key not in seen:
            seen.add(key)
            out.append(name.strip())
    return out


def node_record(
    owner: str, scope: Scope, record_id: str, body: NodeBody, stamp: float, *, vector: Any = None
) -> Record:
    """Field ``names``: for the name and each alias, the id a node of that name would have, so a lookup by
    alias filters on values only this owner's records hold (see ``owned_scan``). ``vector``: the embedding
    of the normalised name, where names also resolve by similarity (``GraphConfig.resolve_similarity``)."""
    names = tuple(sorted({node_id(owner, normal_name(n)) for n in (body.name, *body.aliases)}))
    fields: Fields = {OWNER: owner, "names": names}
    return Record(id=record_id, scope=scope, body=_encode(body), timestamp=stamp, fields=fields, vector=vector)


def with_node_body(record: Record, body: NodeBody) -> Record:
    """``record`` holding ``body`` where only what the fields do not index changed (its list of edges): the
    fields, the scan-order time and the rest are kept."""
    return msgspec.structs.replace(record, body=_encode(body))


def decode_node(record: Record) -> NodeBody:
    try:
        return _decode_node(record.body)
    except msgspec.DecodeError as exc:
        raise CorruptDataError(f"graph node {record.id!r} is not a node memkit wrote ({exc})") from exc


def to_node(record_id: str, body: NodeBody) -> Node:
    return Node(name=body.name, type=body.type, attributes=body.attributes, aliases=list(body.aliases), id=record_id,
                created_at=from_epoch(body.created), updated_at=from_epoch(body.updated))  # fmt: skip


# -- edges ------------------------------------------------------------------------------------------------
def new_edge(ends: tuple[str, str, str, str], edge: Edge, now: float, max_provenance: int) -> EdgeBody:
    src, src_name, dst, dst_name = ends
    start = epoch(edge.valid_from) if edge.valid_from is not None else now
    end = epoch(edge.valid_to) if edge.valid_to is not None else None
    if end is not None and end < start:  # only an end, already past, for an edge that never held: [end, end)
        start = end  # (from now to that end ran backwards, and held at no moment all the same)
    return EdgeBody(src=src, rel=normal_relation(edge.relation), dst=dst, src_name=src_name, dst_name=dst_name,
                    history=((start, end),), attributes=dict(edge.attributes),
                    provenance=_newest(edge.provenance, max_provenance), updated=now)  # fmt: skip


def merge_edge(stored: EdgeBody, edge: Edge, now: float, max_provenance: int) -> EdgeBody:
    """``stored`` asserted again: attributes and provenance merged; a relation that had ended holds again
    from ``valid_from`` (a new interval), one that holds keeps its start."""
    history = list(stored.history)
    start = epoch(edge.valid_from) if edge.valid_from is not None else now
    end = epoch(edge.valid_to) if edge.valid_to is not None else None
    if edge.valid_from is None and end is not None and end <= now:
        # "It stopped then", without a start: the interval that held just before ends there (it ran from now
        # back to that end, which held at no moment); when none held then, there is nothing to end.
        start = end - 1e-6
        history = [(s, end if (s <= start and (e is None or start < e)) else e) for s, e in history]
    elif not _holds_at(history, start):
        history.append((start, end))
        history.sort(key=lambda span: span[0])
    elif end is not None:  # the caller says when it stopped holding
        history = [(s, end if (s <= start and (e is None or start < e)) else e) for s, e in history]
    provenance = _newest([*stored.provenance, *(p for p in edge.provenance if p not in stored.provenance)],
                         max_provenance)  # fmt: skip
    attributes = {**stored.attributes, **edge.attributes}
    if tuple(history) == stored.history and provenance == stored.provenance and attributes == stored.attributes:
        return stored
    return msgspec.structs.replace(stored, history=tuple(history), provenance=provenance, attributes=attributes,
                                   updated=now)  # fmt: skip


def end_edge(stored: EdgeBody, at: float) -> EdgeBody:
    """``stored`` with the interval open at ``at`` ended there (a functional relation got a new target)."""
    history = tuple((s, at if (e is None and s <= at) else e) for s, e in stored.history)
    return stored if history == stored.history else msgspec.structs.replace(stored, history=history)


def open_since(body: EdgeBody) -> float | None:
    """The start of the interval that has not ended, if one has not."""
    return next((s for s, e in reversed(body.history) if e is None), None)


def _holds_at(history: Sequence[tuple[float, float | None]], moment: float) -> bool:
    if len(history) == 1:  # nearly every edge, tested at every hop of a walk: no generator
        start, end = history[0]
        return start <= moment and (end is None or moment < end)
    return any(s <= moment and (e is None or moment < e) for s, e in history)


def _newest(items: Sequence[str], keep: int) -> tuple[str, ...]:
    return tuple(items[-keep:]) if keep else ()


def is_live(body: EdgeBody, now: float) -> bool:
    """Whether the edge holds at ``now`` or will later: what the ``LIVE`` marks and node adjacency keep."""
    if len(body.history) == 1:  # nearly every edge: no generator
        end = body.history[0][1]
        return end is None or end > now
    return any(e is None or e > now for _, e in body.history)


def edge_record(scope: Scope, record_id: str, body: EdgeBody, *, now: float, stamp: float) -> Record:
    """Fields ``out`` / ``in`` / ``ends``: the source, the target, both, each also marked ``LIVE`` while the
    edge holds (or will end later than ``now``). Node ids are the owner's own, so no owner filter is needed."""
    src, dst = body.src, body.dst
    out: tuple[str, ...]
    into: tuple[str, ...]
    both: tuple[str, ...]
    if is_live(body, now):
        out, into = (src, src + LIVE), (dst, dst + LIVE)
        both = out if src == dst else (src, dst, src + LIVE, dst + LIVE)
    else:
        out, into = (src,), (dst,)
        both = out if src == dst else (src, dst)
    fields: Fields = {"out": out, "in": into, "ends": both, "rel": body.rel}
    return Record(id=record_id, scope=scope, body=_encode(body), timestamp=stamp, fields=fields)


async def owned_scan(
    store: RecordStore,
    collection: str,
    scope: Scope,
    filters: Mapping[str, FilterValue],
    *,
    limit: int,
    cursor: str | None = None,
    newest_first: bool = False,
) -> Page:
    """A scan by values only the records of one owner (``scope``) hold (node ids and name keys are digests of
    the owner), asked across scopes, each record checked again to be the owner's. Why across scopes: within
    one, Postgres walks the user's every record in time order testing each (25 ms per scan at 50,000 edges),
    where across scopes its GIN index finds them (3 ms); the other backends answer from their indexes."""
    page = await store.scan(collection, Scope(), filters=filters, limit=limit, cursor=cursor,
                            newest_first=newest_first, all_scopes=True)  # fmt: skip
    mine = [r for r in page.records if r.scope == scope]  # a graph's scope is its owner, exactly
    return Page(records=mine, next_cursor=page.next_cursor)


def decode_edge(record: Record) -> EdgeBody:
    try:
        return _decode_edge(record.body)
    except msgspec.DecodeError as exc:
        raise CorruptDataError(f"graph edge {record.id!r} is not an edge memkit wrote ({exc})") from exc


@functools.lru_cache(maxsize=16_384)
def _intervals(history: tuple[tuple[float, float | None], ...]) -> tuple[Interval, ...]:
    """Intervals are immutable and a batch's edges share their histories (one moment): made once each (a
    tenth of a 2-hop walk on memory:// was making them)."""
    return tuple(Interval(from_epoch(s), None if e is None else from_epoch(e)) for s, e in history)


def to_edge(record_id: str, body: EdgeBody) -> Edge:
    history = list(_intervals(body.history))
    latest = history[-1] if history else None
    return Edge(source=body.src_name, relation=body.rel, target=body.dst_name, attributes=body.attributes,
                valid_from=latest.valid_from if latest else None, valid_to=latest.valid_to if latest else None,
                provenance=list(body.provenance), id=record_id, source_id=body.src, target_id=body.dst,
                history=history, updated_at=from_epoch(body.updated))  # fmt: skip


def holds_at(body: EdgeBody, moment: datetime | None, now: float) -> bool:
    return _holds_at(body.history, now if moment is None else epoch(moment))
