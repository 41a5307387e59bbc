"""Writing the graph: names resolved to nodes, nodes and edges merged atomically, functional relations ended.

Every record is written by compare-and-set (``merge_record``): concurrent upserts of one node or edge, in
this process or another, each land (their attributes merge), and the first of two creators wins the
create-if-absent while the second merges into it. There is no multi-record transaction, so the steps are
ordered for readers: endpoints first, then the edge, then the end of a replaced functional edge ("add new,
then invalidate old"): a reader may briefly see both edges, never neither.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, TypeVar

import msgspec

from memkit._concurrency import gather_bounded
from memkit._time import from_epoch
from memkit.backend import FilterValue, Query, Record, RecordStore, Scope, Weights
from memkit.embedders import Embedder
from memkit.layers._cas import KeyedLocks, merge_record
from memkit.layers._embedding import embed_texts
from memkit.layers.graph._adjacency import Changes, changes_for, with_changes
from memkit.layers.graph._codec import (
    OWNER,
    Adjacent,
    EdgeBody,
    NodeBody,
    decode_edge,
    decode_node,
    edge_id,
    edge_record,
    end_edge,
    merge_edge,
    merge_node,
    new_edge,
    new_node,
    node_id,
    node_record,
    normal_name,
    normal_relation,
    open_since,
    owned_scan,
    with_node_body,
)
from memkit.layers.graph._records import Edge, GraphConfig, Node

__all__ = ["GraphWriter"]

_WRITES_AT_ONCE: Final = 16
"""Records of one batch written side by side (a server backend overlaps the round trips)."""
_ALIAS_PAGE: Final = 1_000
_SIMILARITY_ONLY: Final = Weights(similarity=1.0, lexical=0.0, recency=0.0, importance=0.0)

Build = Callable[[Record | None], Record | None]
T = TypeVar("T")


class _Build(msgspec.Struct, frozen=True, gc=False):
    """``make(writer, target, *args, current)``: one record's build, a ``Build``. Not ``functools.partial``:
    a batch makes one per record, alive until it ends, and every partial (with the tuple holding it) was
    promoted to the oldest generation, where full collections were a fifth of a batched upsert; a ``gc=False``
    struct is never tracked (what it holds cannot reach it back: no cycle)."""

    make: Callable[..., Record | None]
    writer: GraphWriter
    target: str
    args: tuple[Any, ...]

    def __call__(self, current: Record | None) -> Record | None:
        return self.make(self.writer, self.target, *self.args, current)


class GraphWriter:
    """The writes of one graph (one owner) in one call."""

    def __init__(
        self,
        store: RecordStore,
        config: GraphConfig,
        locks: KeyedLocks,
        *,
        owner: str,
        scope: Scope,
        now: float,
        embedder: Embedder | None = None,
    ) -> None:
        self.store, self.config, self.locks, self.owner, self.scope, self.now = store, config, locks, owner, scope, now
        self.embedder = embedder if config.resolve_similarity is not None else None
        """Set where names also resolve by similarity: new nodes then carry their name's vector."""
        self._name_vectors: dict[str, Any] = {}
        """The vector of each normalised name that resolved by nothing else (what a new node of it carries)."""
        self.functional = frozenset(normal_relation(r) for r in config.functional)
        self.cap = config.adjacency_cap or 0
        """Entries in each node's list of newest edges (the layer decided a number; 0: no lists)."""
        self._written = itertools.count()
        self._built: dict[str, tuple[Record, NodeBody | EdgeBody]] = {}
        """The body of each record a build made, so what was just encoded is not decoded again."""

    def body_of(self, record: Record, decode: Callable[[Record], T]) -> T:
        built = self._built.get(record.id)
        return built[1] if built is not None and built[0] is record else decode(record)  # type: ignore[return-value]

    def _made(self, record: Record, body: NodeBody | EdgeBody) -> Record:
        self._built[record.id] = (record, body)
        return record

    def _stamp(self) -> float:
        """The record's scan-order time: the call's moment plus a microsecond per record written, so a
        batch's records do not all tie (a scan's newest k among a hub's thousand tied edges sorted them all
        by id) and the later of a batch counts as the more recent."""
        return self.now + next(self._written) * 1e-6

    # -- resolution -------------------------------------------------------------------------------------
    async def resolve(self, names: Iterable[str], *, by_meaning: bool = True) -> dict[str, Record]:
        """The stored node each normalised name resolves to: the node of that name, else the most recently
        updated node with it as an alias, else (``by_meaning``, where configured) the node whose name is
        most similar. Names that resolve to nothing are absent from the result."""
        norms = list(dict.fromkeys(normal_name(n) for n in names))
        by_id = {node_id(self.owner, n): n for n in norms}
        found = {by_id[r.id]: r for r in await self.store.get(self.config.nodes_collection, list(by_id), self.scope)}
        missing = {key: n for key, n in by_id.items() if n not in found}
        if missing:
            page = await owned_scan(self.store, self.config.nodes_collection, self.scope,
                                    {"names": tuple(missing)}, limit=_ALIAS_PAGE, newest_first=True)  # fmt: skip
            for record in page.records:
                for key in record.fields.get("names", ()):  # type: ignore[union-attr]  # a tuple we wrote
                    if key in missing and missing[key] not in found:
                        found[missing[key]] = record
        if by_meaning and self.embedder is not None and (unknown := [n for n in norms if n not in found]):
            found.update(await self._resolve_by_meaning(unknown, self.embedder))
        return found

    async def _resolve_by_meaning(self, norms: list[str], embedder: Embedder) -> dict[str, Record]:
        """The owner's node whose name vector is nearest each name's, where similar enough; every name's
        vector is kept for the node it may become. One embedding call, one query per name."""
        threshold = float(self.config.resolve_similarity or 1.0)
        vectors = await embed_texts(embedder, norms)
        found: dict[str, Record] = {}
        for norm, vector in zip(norms, vectors, strict=True):
            self._name_vectors[norm] = vector
            ask = Query(scope=self.scope, vector=vector, k=1, weights=_SIMILARITY_ONLY, filters={OWNER: self.owner},
                        now=self.now, min_score=threshold)  # fmt: skip
            hits = await self.store.query(self.config.nodes_collection, ask)
            if hits and hits[0].scores.similarity >= threshold and hits[0].record.scope == self.scope:
                found[norm] = hits[0].record
        return found

    # -- nodes ------------------------------------------------------------------------------------------
    async def write_nodes(
        self, nodes: Sequence[Node], endpoints: Sequence[tuple[str, str | None]]
    ) -> dict[str, Record]:
        """Merge ``nodes`` (in order) and create the ``endpoints`` (name, type) no node resolves to; returns
        the stored node record of every normalised name involved."""
        resolved = await self.resolve([n.name for n in nodes] + [name for name, _ in endpoints])
        merges: dict[str, list[Node]] = {}
        target_of: dict[str, str] = {}
        for node in nodes:
            norm = normal_name(node.name)
            target = resolved[norm].id if norm in resolved else node_id(self.owner, norm)
            target_of[norm] = target
            merges.setdefault(target, []).append(node)
        existing: dict[str, Record] = {}
        for name, kind in endpoints:
            norm = normal_name(name)
            if norm in target_of or norm in existing:
                continue
            if norm in resolved:  # an endpoint that exists is used as it is: naming it changes nothing
                existing[norm] = resolved[norm]
                continue
            target_of[norm] = target = node_id(self.owner, norm)
            merges.setdefault(target, []).append(Node(name=name, type=kind))
        make = GraphWriter._build_node  # each target's items as a tuple: untracked by the cycle collector
        builds = [(target, _Build(make, self, target, (tuple(given),))) for target, given in merges.items()]
        merges.clear()  # the lists go now, not at the end of the call (see _Build)
        known = {r.id: r for r in resolved.values()}
        stored = await self._merge_all(self.config.nodes_collection, builds, known)
        return {**existing, **{norm: stored[target] for norm, target in target_of.items()}}

    def _build_node(self, target: str, given: tuple[Node, ...], current: Record | None) -> Record | None:
        if current is None:
            body = new_node(given[0], self.now, indexed=self.cap > 0)
            rest = given[1:]
            vector = self._name_vectors.get(normal_name(given[0].name)) if self.embedder is not None else None
        else:
            body = stored = decode_node(current)
            rest = given
            vector = current.vector
        for node in rest:
            body = merge_node(body, node, self.now, self.config.max_aliases)
        if current is not None and body is stored:
            return None
        return self._made(node_record(self.owner, self.scope, target, body, self._stamp(), vector=vector), body)

    # -- edges ------------------------------------------------------------------------------------------
    async def write_edges(self, edges: Sequence[Edge], nodes: dict[str, Record]) -> list[tuple[str, EdgeBody]]:
        """Merge each edge between its resolved endpoints; returns (id, stored body) per edge, in order.

        A call that gives one source several targets of a functional relation ("I live in Paris. Actually,
        I moved to Lisbon.") writes them as calls one after another would, a microsecond apart, the last
        stated last (``_stated_passes``): written at one moment, none began after another, so none ended."""
        passes = _stated_passes(edges, nodes, self.now, self._is_functional)
        if len(passes) == 1:
            return await self._write_pass(edges, nodes)
        written: dict[int, tuple[str, EdgeBody]] = {}
        for positions, batch in passes:
            written.update(zip(positions, await self._write_pass(batch, nodes), strict=True))
        return [written[at] for at in range(len(edges))]

    async def _write_pass(self, edges: Sequence[Edge], nodes: dict[str, Record]) -> list[tuple[str, EdgeBody]]:
        """``write_edges`` of edges that give each functional relation one target at most. The endpoints'
        lists of newest edges (``_adjacency``) are written before the edges they name, and again after any
        edge a concurrent writer made this one write with a later stamp."""
        merges: dict[str, list[Edge]] = {}
        ends_of: dict[str, tuple[str, str, str, str]] = {}
        order = []
        names = {record.id: self.body_of(record, decode_node).name for record in nodes.values()}
        for edge in edges:
            src, dst = nodes[normal_name(edge.source)], nodes[normal_name(edge.target)]
            target = edge_id(self.owner, src.id, edge.relation, dst.id)
            ends_of[target] = (src.id, names[src.id], dst.id, names[dst.id])
            merges.setdefault(target, []).append(edge)
            order.append(target)
        make = GraphWriter._build_edge
        builds = [(t, _Build(make, self, t, (ends_of[t], tuple(given)))) for t, given in merges.items()]
        functional = [t for t, given in merges.items() if any(self._is_functional(e) for e in given)]
        merges.clear()  # the lists go now, not at the end of the call (see _Build)
        collection = self.config.edges_collection
        known = {r.id: r for r in await self.store.get(collection, [t for t, _ in builds], self.scope)}
        pairs, stored = self._plan(builds, known)
        planned = {record.id: record for record, _ in pairs}
        await self.index([*stored.values(), *planned.values()], {r.id: r for r in nodes.values()})
        stored.update(await self._commit(collection, builds, pairs))
        await self.index([r for t, r in stored.items() if t in planned and r is not planned[t]], None)
        bodies = {t: self.body_of(r, decode_edge) for t, r in stored.items()}
        if functional:
            bodies.update(await self._end_replaced([bodies[t] for t in functional]))
        return [(t, bodies[t]) for t in order]

    async def index(self, edges: Sequence[Record], nodes: dict[str, Record] | None) -> None:
        """Bring the endpoints' lists of newest edges in line with these edge records (``nodes``: the
        endpoints' records when the caller has read them, else they are read)."""
        if edges and self.cap:
            await self.change_lists(changes_for(((r, self.body_of(r, decode_edge)) for r in edges), self.now), nodes)

    async def change_lists(self, changes: Changes, nodes: dict[str, Record] | None) -> None:
        """Apply ``changes`` to the nodes' lists of newest edges, each node by compare-and-set."""
        if not changes or not self.cap:
            return
        builds = [(node, _Build(GraphWriter._build_list, self, node, (change,))) for node, change in changes.items()]
        known = None if nodes is None else {n: nodes[n] for n in changes if n in nodes}
        if known is not None and len(known) < len(changes):
            known = None  # an endpoint the caller did not pass: read them all
        await self._merge_all(self.config.nodes_collection, builds, known)

    def _build_list(self, target: str, change: dict[str, Adjacent | None], current: Record | None) -> Record | None:
        if current is None:
            return None  # deleted meanwhile: no list to keep
        stored = self.body_of(current, decode_node)
        body = with_changes(stored, change, self.cap)
        if body is stored:
            return None
        return self._made(with_node_body(current, body), body)

    def _is_functional(self, edge: Edge) -> bool:
        return edge.functional if edge.functional is not None else edge.relation in self.functional

    def _build_edge(self, target: str, ends: tuple[str, str, str, str], given: tuple[Edge, ...],
                    current: Record | None) -> Record | None:  # fmt: skip
        if current is None:
            body = new_edge(ends, given[0], self.now, self.config.max_provenance)
            rest = given[1:]
        else:
            body = stored = decode_edge(current)
            rest = given
        for edge in rest:
            body = merge_edge(body, edge, self.now, self.config.max_provenance)
        if current is not None and body is stored:
            return None
        return self._made(edge_record(self.scope, target, body, now=self.now, stamp=self._stamp()), body)

    async def _end_replaced(self, written: list[EdgeBody]) -> dict[str, EdgeBody]:
        """For each (source, functional relation) just written: every interval still open ends where the next
        interval of another target of that relation begins (a later move ends the stay; an older fact stated
        late ends where what followed it began). Any writer computing this over the same edges ends the same
        ones, so concurrent writers agree."""
        groups = {(b.src, b.rel) for b in written}
        filters: dict[str, FilterValue] = {"out": tuple(sorted({s for s, _ in groups})),
                                           "rel": tuple(sorted({r for _, r in groups}))}  # fmt: skip
        members: dict[tuple[str, str], list[tuple[str, EdgeBody]]] = {}
        cursor = None
        while True:
            page = await owned_scan(self.store, self.config.edges_collection, self.scope, filters,
                                    limit=_ALIAS_PAGE, cursor=cursor)  # fmt: skip
            for record in page.records:
                body = decode_edge(record)
                if (body.src, body.rel) in groups:
                    members.setdefault((body.src, body.rel), []).append((record.id, body))
            if (cursor := page.next_cursor) is None:
                break
        builds: list[tuple[str, Build]] = []
        for edges in members.values():
            for rid, body in edges:
                if (start := open_since(body)) is None:
                    continue
                later = [s for other, b in edges if other != rid for s, _ in b.history if s > start]
                if later:
                    builds.append((rid, _Build(GraphWriter._build_end, self, rid, (min(later),))))
        ended = await self._merge_all(self.config.edges_collection, builds, None)
        await self.index(list(ended.values()), None)
        return {rid: self.body_of(r, decode_edge) for rid, r in ended.items()}

    def _build_end(self, target: str, at: float, current: Record | None) -> Record | None:
        if current is None:
            return None  # deleted meanwhile: nothing to end
        stored = decode_edge(current)
        body = end_edge(stored, at)
        if body is stored:
            return None
        return self._made(edge_record(self.scope, current.id, body, now=self.now, stamp=self._stamp()), body)

    # -- shared -----------------------------------------------------------------------------------------
    async def _merge_all(
        self, collection: str, builds: Sequence[tuple[str, Build]], known: dict[str, Record] | None
    ) -> dict[str, Record]:
        """Run every build by compare-and-set: one ``get`` and one ``replace_many`` for the whole batch, then
        a read-merge-write loop for each record another writer changed meanwhile. The stored record of each id."""
        if not builds:
            return {}
        if known is None:  # else the caller read them: an id it did not find is absent (a first guess only)
            known = {r.id: r for r in await self.store.get(collection, [t for t, _ in builds], self.scope)}
        pairs, stored = self._plan(builds, known)
        stored.update(await self._commit(collection, builds, pairs))
        return stored

    @staticmethod
    def _plan(
        builds: Sequence[tuple[str, Build]], known: dict[str, Record]
    ) -> tuple[list[tuple[Record, bytes | None]], dict[str, Record]]:
        """Each build run on what was read: the (record, expected body) pairs to write, and the stored
        records that need no write."""
        unchanged: dict[str, Record] = {}
        pairs: list[tuple[Record, bytes | None]] = []
        for target, build in builds:
            current = known.get(target)
            record = build(current)
            if record is None:
                if current is not None:
                    unchanged[target] = current
            else:
                pairs.append((record, None if current is None else current.body))
        return pairs, unchanged

    async def _commit(
        self, collection: str, builds: Sequence[tuple[str, Build]], pairs: list[tuple[Record, bytes | None]]
    ) -> dict[str, Record]:
        """Write the planned pairs at once; each one another writer changed meanwhile is merged again, alone."""
        written = await self.store.replace_many(collection, pairs) if pairs else []
        lost = {record.id for (record, _), ok in zip(pairs, written, strict=True) if not ok}
        stored = {record.id: record for (record, _), ok in zip(pairs, written, strict=True) if ok}
        retries = [functools.partial(self._retry, collection, t, build) for t, build in builds if t in lost]
        for record in await gather_bounded(retries, _WRITES_AT_ONCE):
            if record is not None:
                stored[record.id] = record
        return stored

    async def _retry(self, collection: str, target: str, build: Build) -> Record | None:
        """One record's read-merge-write after losing the batch's compare-and-set, under its lock here:
        tasks of this process merging into one record queue (sixteen writing one node on Redis otherwise kept
        colliding until one ran out of attempts); other processes still race, and compare-and-set settles it."""
        async with self.locks.holding([f"{collection}\x00{target}"]):
            return await merge_record(self.store, collection, target, self.scope, build=build)


def _stated_passes(
    edges: Sequence[Edge], nodes: dict[str, Record], now: float, functional: Callable[[Edge], bool]
) -> list[tuple[list[int], list[Edge]]]:
    """The edges as passes (positions, edges): pass k holds the k-th target stated for each (source, functional
    relation) given several in this call, starting ``now`` less a microsecond per target stated after it
    (the last at ``now``); pass 0 also holds every other edge. Endpoints are compared as the nodes they
    resolve to (an alias is its node); an edge with its own ``valid_from`` or ``valid_to`` keeps it."""

    def group(edge: Edge) -> tuple[tuple[str, str], str] | None:
        if edge.valid_from is not None or edge.valid_to is not None or not functional(edge):
            return None
        source, target = nodes[normal_name(edge.source)].id, nodes[normal_name(edge.target)].id
        return (source, normal_relation(edge.relation)), target

    stated: dict[tuple[str, str], list[str]] = {}
    for edge in edges:
        if (found := group(edge)) is not None:
            targets = stated.setdefault(found[0], [])
            targets[:] = [*(t for t in targets if t != found[1]), found[1]]  # the last statement's place
    if all(len(targets) < 2 for targets in stated.values()):
        return [(list(range(len(edges))), list(edges))]
    passes: list[tuple[list[int], list[Edge]]] = [([], []) for _ in range(max(map(len, stated.values())))]
    for at, edge in enumerate(edges):
        found = group(edge)
        targets = stated.get(found[0], []) if found is not None else []
        if found is None or len(targets) < 2:
            passes[0][0].append(at)
            passes[0][1].append(edge)
            continue
        k = targets.index(found[1])
        passes[k][0].append(at)
        passes[k][1].append(msgspec.structs.replace(edge, valid_from=from_epoch(now - (len(targets) - 1 - k) * 1e-6)))
    return [(positions, batch) for positions, batch in passes if positions]
