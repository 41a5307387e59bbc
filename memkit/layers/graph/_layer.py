"""The knowledge graph: entities and relations of one user (or agent), merged as they are stated again."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

import anyio.lowlevel
import msgspec

from memkit._repr import short_repr
from memkit._time import now_epoch
from memkit._validation import (
    check_content,
    check_flag,
    check_int,
    check_moment,
    check_owner,
    check_text,
    require_scope,
)
from memkit.backend import Backend, Record, Scope
from memkit.embedders import Embedder
from memkit.errors import ConfigurationError, CorruptDataError, NotFoundError, ScopeError, ValidationError
from memkit.layers._cas import KeyedLocks
from memkit.layers._embedding import claim_collection
from memkit.layers.graph._adjacency import removals
from memkit.layers.graph._codec import (
    LIVE,
    OWNER,
    decode_edge,
    decode_node,
    edge_id,
    normal_name,
    owned_scan,
    owner_key,
    to_edge,
    to_node,
)
from memkit.layers.graph._extract import Extraction, heuristic_extraction, model_extraction
from memkit.layers.graph._records import Direction, Edge, GraphConfig, GraphUpdate, Node, Subgraph
from memkit.layers.graph._render import render_subgraph
from memkit.layers.graph._validate import check_direction, check_edge, check_name, check_node, check_relations
from memkit.layers.graph._walk import WalkLimits, walk
from memkit.layers.graph._writes import GraphWriter
from memkit.tokens import EstimateTokenizer, Tokenizer

if TYPE_CHECKING:
    from memkit.llm import LLM

__all__ = ["KnowledgeGraph"]

_PAGE: Final = 1_000
_MAX_TEXT_CHARS: Final = 100_000


def _owner(user_id: str | None, agent_id: str | None) -> Scope:
    """A graph belongs to one user (with or without an agent) or to one agent alone: never to "everyone"."""
    user_id, agent_id = check_owner(user_id, agent_id)
    if user_id is None and agent_id is None:
        raise ScopeError("pass user_id= or agent_id=: a graph belongs to one user or one agent")
    return Scope(user_id=user_id, agent_id=agent_id)


def _ends(records: Sequence[Record]) -> list[tuple[str, str, str]]:
    """(edge id, source id, target id) of each edge record that decodes (a walk drops the entries of the
    others when it finds their edges gone)."""
    ends = []
    for record in records:
        try:
            body = decode_edge(record)
        except CorruptDataError:
            continue
        ends.append((record.id, body.src, body.dst))
    return ends


_ADJACENCY_CAP = 64


def _names(values: object, what: str) -> builtins.list[Any]:
    """A list of names (or ids): a lone string is refused, not split into its characters."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | set | frozenset):
        raise ValidationError(f"{what} must be a list of strings, got {type(values).__name__} {short_repr(values)}")
    return builtins.list(values)


def _with_lists_decided(config: GraphConfig, backend: Backend) -> GraphConfig:
    """``config`` with ``adjacency_cap`` a number: as given, else by what a scan costs on ``backend``."""
    if config.adjacency_cap is not None:
        return config
    return msgspec.structs.replace(config, adjacency_cap=0 if backend.capabilities.cheap_scans else _ADJACENCY_CAP)


class KnowledgeGraph:
    """Entities (``Node``) and relations (``Edge``) per user or agent, for prompts that need what is connected.

    Upserts merge: a node is identified by its normalised name (or an alias), an edge by (source, relation,
    target); stating either again merges attributes, atomically on every backend, so concurrent writers
    lose nothing. A functional relation (``lives_in``) given a new target ends the old edge at that moment
    (``valid_to``) instead of deleting it: walks ``as_of`` a past moment still see it. ``related()`` walks
    k hops (out, in or both) with fan-out and size limits; ``to_context()`` renders the neighbourhood for a
    prompt; ``ingest()`` extracts relations from text (by ``llm`` when given, else offline patterns).
    """

    name = "graph"
    needs: frozenset[str] = frozenset({"records", "filtered_scan", "atomic_replace"})

    def __init__(
        self,
        backend: Backend,
        config: GraphConfig | None = None,
        *,
        llm: LLM | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        if config is not None and not isinstance(config, GraphConfig):
            raise ValidationError(f"config must be a GraphConfig or None, got {type(config).__name__}")
        if llm is not None and not callable(getattr(llm, "structured", None)):
            raise ValidationError(f"llm must be a memkit.llm.LLM (with structured()), got {type(llm).__name__}")
        self.backend = backend
        self.config = _with_lists_decided(config or GraphConfig(), backend)
        self.llm = llm
        self.embedder = embedder
        if self.config.resolve_similarity is not None:
            if embedder is None:
                raise ConfigurationError("GraphConfig.resolve_similarity embeds names: pass embedder= (Memkit does)")
            self.needs = self.needs | {"vector_search"}
        self._locks = KeyedLocks()

    async def setup(self) -> None:
        if self.config.resolve_similarity is not None and self.embedder is not None:  # nodes carry name vectors
            await claim_collection(self.backend, self.embedder, self.config.nodes_collection, "GraphConfig")
        else:
            await self.backend.ensure_collection(self.config.nodes_collection, None)
        await self.backend.ensure_collection(self.config.edges_collection, None)

    async def aclose(self) -> None:
        return None  # nothing runs in the background

    def _writer(self, user_id: str | None, agent_id: str | None) -> GraphWriter:
        scope = _owner(user_id, agent_id)
        return GraphWriter(self.backend, self.config, self._locks, owner=owner_key(scope), scope=scope, now=now_epoch(),
                           embedder=self.embedder)  # fmt: skip

    # -- writes -----------------------------------------------------------------------------------------
    async def upsert(
        self,
        nodes: Sequence[Node] = (),
        edges: Sequence[Edge] = (),
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> GraphUpdate:
        """Merge many nodes and edges of one graph at once (a document's entities, an import): endpoints
        that resolve to no node are created. One bad item raises before anything is written."""
        writer = self._writer(user_id, agent_id)
        for what, items in (("nodes", nodes), ("edges", edges)):
            if isinstance(items, str | Node | Edge) or not isinstance(items, Sequence):
                raise ValidationError(f"{what} must be a list")
        if len(nodes) + len(edges) > self.config.max_batch:
            raise ValidationError(f"upsert takes at most {self.config.max_batch:,} nodes and edges at once")
        checked_nodes = [check_node(n, self.config, f"nodes[{i}]") for i, n in enumerate(nodes)]
        checked_edges = [check_edge(e, self.config, f"edges[{i}]") for i, e in enumerate(edges)]
        return await self._upsert(writer, checked_nodes, checked_edges)

    async def _upsert(self, writer: GraphWriter, nodes: list[Node], edges: list[Edge]) -> GraphUpdate:
        endpoints = [(e.source, e.source_type) for e in edges] + [(e.target, e.target_type) for e in edges]
        stored = await writer.write_nodes(nodes, endpoints)
        written = await writer.write_edges(edges, stored) if edges else []
        unique = {record.id: record for record in stored.values()}
        return GraphUpdate(nodes=[to_node(rid, writer.body_of(r, decode_node)) for rid, r in unique.items()],
                           edges=[to_edge(rid, body) for rid, body in written])  # fmt: skip

    async def upsert_node(
        self,
        name: str,
        *,
        type: str | None = None,  # the node's field is called type
        attributes: dict[str, Any] | None = None,
        aliases: Sequence[str] = (),
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> Node:
        """Create the entity ``name`` (or the one it is an alias of) or merge into it; returns it as stored."""
        writer = self._writer(user_id, agent_id)
        node = check_node(Node(name=name, type=type, attributes={} if attributes is None else attributes,
                               aliases=_names(aliases, "aliases")), self.config)  # fmt: skip
        update = await self._upsert(writer, [node], [])
        return update.nodes[0]

    async def upsert_edge(
        self,
        source: str,
        relation: str,
        target: str,
        *,
        attributes: dict[str, Any] | None = None,
        valid_from: datetime | None = None,
        valid_to: datetime | None = None,
        provenance: Sequence[str] = (),
        functional: bool | None = None,
        source_type: str | None = None,
        target_type: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> Edge:
        """State ``source -[relation]-> target`` (creating either entity if unknown); returns the edge as
        stored, ended already if a later edge of a functional relation replaces it."""
        writer = self._writer(user_id, agent_id)
        edge = check_edge(Edge(source=source, relation=relation, target=target,
                               attributes={} if attributes is None else attributes, valid_from=valid_from,
                               valid_to=valid_to, provenance=_names(provenance, "provenance"),
                               functional=functional, source_type=source_type, target_type=target_type),
                          self.config)  # fmt: skip
        update = await self._upsert(writer, [], [edge])
        return update.edges[0]

    async def delete_node(self, name: str, *, user_id: str | None = None, agent_id: str | None = None) -> bool:
        """Delete an entity and every edge to or from it; False when no node resolves from ``name``."""
        writer = self._writer(user_id, agent_id)
        # By name and alias only: a similar name must never delete another entity.
        found = (await writer.resolve([check_name(name, self.config)], by_meaning=False)).get(normal_name(name))
        if found is None:
            return False
        await self._delete_edges(writer, {"ends": (found.id,)}, keep=found.id)
        return await self.backend.delete(self.config.nodes_collection, [found.id], writer.scope) > 0

    async def delete_edge(
        self, source: str, relation: str, target: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> bool:
        """Delete a relation and its history (to end one instead, state its replacement or pass ``valid_to``)."""
        writer = self._writer(user_id, agent_id)
        rel = check_edge(Edge(source=source, relation=relation, target=target), self.config).relation
        ends = (source, target)
        found = await writer.resolve(ends, by_meaning=False)
        src, dst = found.get(normal_name(ends[0])), found.get(normal_name(ends[1]))
        if src is None or dst is None:
            return False
        record_id = edge_id(writer.owner, src.id, rel, dst.id)
        deleted = await self.backend.delete(self.config.edges_collection, [record_id], writer.scope) > 0
        await writer.change_lists(removals([(record_id, src.id, dst.id)]), None)  # after: see _adjacency
        return deleted

    async def forget_all(self, *, user_id: str | None = None, agent_id: str | None = None) -> int:
        """Delete a user's (or agent's) whole graph; returns how many nodes and edges were deleted."""
        writer = self._writer(user_id, agent_id)
        total = await self._forget_edges(writer)
        while True:
            page = await self.backend.scan(self.config.nodes_collection, writer.scope, filters={OWNER: writer.owner},
                                           limit=_PAGE)  # fmt: skip
            deleted = await self.backend.delete(self.config.nodes_collection, [r.id for r in page.records],
                                                writer.scope)  # fmt: skip
            if not deleted:
                return total
            total += deleted

    async def erase_user(self, user_id: str) -> int:
        """Delete every node and edge of ``user_id``, in whichever agent's graph of theirs (``forget_user``;
        ``forget_all`` deletes one owner's graph, and a user's graph with an agent is another owner's)."""
        scope = require_scope(user_id, None, None)
        total = 0
        for collection in (self.config.edges_collection, self.config.nodes_collection):
            while True:
                page = await self.backend.scan(collection, scope, limit=_PAGE)
                deleted = await self.backend.delete(collection, [r.id for r in page.records], scope)
                if not deleted:  # nothing left (or nothing this scope may delete): never loop on it
                    break
                total += deleted
        return total

    async def _forget_edges(self, writer: GraphWriter) -> int:
        """Every edge of the owner: those in its scope that are exactly its (the scope of a user also matches
        the graphs that user has with agents)."""
        total, cursor = 0, None
        while True:
            page = await self.backend.scan(self.config.edges_collection, writer.scope, limit=_PAGE, cursor=cursor)
            mine = [r.id for r in page.records if r.scope == writer.scope]
            total += await self.backend.delete(self.config.edges_collection, mine, writer.scope) if mine else 0
            if (cursor := page.next_cursor) is None:
                return total

    async def _delete_edges(self, writer: GraphWriter, filters: dict[str, Any], *, keep: str) -> int:
        """Delete the edges ``filters`` finds, then their other ends' entries for them (``keep``: the node
        whose edges these are, itself about to be deleted)."""
        total = 0
        while True:
            page = await self.backend.scan(self.config.edges_collection, writer.scope, filters=filters, limit=_PAGE)
            deleted = await self.backend.delete(self.config.edges_collection, [r.id for r in page.records],
                                                writer.scope)  # fmt: skip
            if not deleted:  # nothing left (or nothing this scope may delete): never loop on it
                return total
            await writer.change_lists(removals(_ends(page.records), keep=keep), None)
            total += deleted

    # -- reads ------------------------------------------------------------------------------------------
    async def resolve(self, name: str, *, user_id: str | None = None, agent_id: str | None = None) -> Node | None:
        """The entity ``name`` names (by normalised name, else by alias), or None."""
        writer = self._writer(user_id, agent_id)
        check_name(name, self.config)
        await anyio.lowlevel.checkpoint()  # in-process backends never wait: let other tasks run
        found = (await writer.resolve([name])).get(normal_name(name))
        return None if found is None else to_node(found.id, decode_node(found))

    async def get_node(self, name: str, *, user_id: str | None = None, agent_id: str | None = None) -> Node:
        """Like ``resolve``, but ``NotFoundError`` when nothing is called ``name``."""
        node = await self.resolve(name, user_id=user_id, agent_id=agent_id)
        if node is None:
            raise NotFoundError(f"no entity called {name!r} in this graph")
        return node

    async def edges(
        self,
        name: str,
        *,
        relation: str | Sequence[str] | None = None,
        direction: Direction = "out",
        as_of: datetime | None = None,
        include_ended: bool = False,
        limit: int = 100,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> builtins.list[Edge]:
        """The edges of one entity, most recently asserted first: those that hold now (or ``as_of``), or
        every one ever stated with ``include_ended=True``. [] when the entity is unknown."""
        writer = self._writer(user_id, agent_id)
        check_name(name, self.config)
        check_flag(include_ended, "include_ended")
        relations = check_relations(relation)
        end = {"out": "out", "in": "in", "both": "ends"}[check_direction(direction)]
        limit = check_int(limit, "limit", 1, _PAGE)
        moment = None if as_of is None else check_moment(as_of, "as_of")
        found = (await writer.resolve([name])).get(normal_name(name))
        if found is None:
            return []
        live = moment is None and not include_ended  # ended edges never hold now: leave them in the store
        filters: dict[str, Any] = {end: (found.id + LIVE if live else found.id,)}
        if relations is not None:
            filters["rel"] = relations
        kept: builtins.list[Edge] = []
        cursor = None
        while len(kept) < limit:
            page = await owned_scan(self.backend, self.config.edges_collection, writer.scope, filters,
                                    limit=_PAGE, cursor=cursor, newest_first=True)  # fmt: skip
            for record in page.records:
                edge = to_edge(record.id, decode_edge(record))
                if include_ended or edge.holds_at(moment or datetime.fromtimestamp(writer.now).astimezone()):
                    kept.append(edge)
            if (cursor := page.next_cursor) is None:
                break
        return kept[:limit]

    async def related(
        self,
        name: str,
        *,
        depth: int | None = None,
        direction: Direction = "both",
        relations: str | Sequence[str] | None = None,
        fan_out: int | None = None,
        max_nodes: int | None = None,
        as_of: datetime | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> Subgraph:
        """Everything within ``depth`` hops (default 2) of the entity ``name``: breadth first, following at most
        ``fan_out`` edges (default 20, newest first) from each node per hop, returning at most ``max_nodes``;
        only edges that hold now, or ``as_of`` a past moment. ``NotFoundError`` when the entity is unknown."""
        writer = self._writer(user_id, agent_id)
        check_name(name, self.config)
        limits = WalkLimits(
            depth=check_int(self.config.default_depth if depth is None else depth, "depth", 1, self.config.max_depth),
            fan_out=check_int(self.config.default_fan_out if fan_out is None else fan_out, "fan_out", 1, 10_000),
            max_nodes=check_int(self.config.max_nodes if max_nodes is None else max_nodes, "max_nodes", 1, 100_000),
            direction=check_direction(direction), relations=check_relations(relations),
            as_of=None if as_of is None else check_moment(as_of, "as_of"),
        )  # fmt: skip
        await anyio.lowlevel.checkpoint()
        root = (await writer.resolve([name])).get(normal_name(name))
        if root is None:
            raise NotFoundError(f"no entity called {name!r} in this graph")
        return await walk(self.backend, self.config, scope=writer.scope, root=root, limits=limits, now=writer.now)

    async def to_context(
        self,
        name: str,
        *,
        depth: int | None = None,
        max_tokens: int = 400,
        tokenizer: Tokenizer | None = None,
        direction: Direction = "both",
        relations: str | Sequence[str] | None = None,
        fan_out: int | None = None,
        as_of: datetime | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> str:
        """What the graph knows around ``name``, ready for a prompt, within ``max_tokens`` (counted by
        ``tokenizer``, default ``EstimateTokenizer``), nearest relations first. "" for an unknown entity."""
        max_tokens = check_int(max_tokens, "max_tokens", 1, 1_000_000)
        if tokenizer is None:
            tokenizer = EstimateTokenizer()
        elif not isinstance(tokenizer, Tokenizer):
            raise ValidationError(f"tokenizer must have count(text) -> int, got {type(tokenizer).__name__}")
        try:
            graph = await self.related(name, depth=depth, direction=direction, relations=relations, fan_out=fan_out,
                                       as_of=as_of, user_id=user_id, agent_id=agent_id)  # fmt: skip
        except NotFoundError:
            return ""
        return render_subgraph(graph, max_tokens, tokenizer, as_of)

    # -- extraction -------------------------------------------------------------------------------------
    async def extract(self, text: str, *, speaker: str = "user") -> Extraction:
        """The entities and relations ``text`` states (``I`` / ``my`` being ``speaker``), without storing them:
        by the model when the graph has one (falling back to the offline patterns if it fails), else offline."""
        text = check_content(text, _MAX_TEXT_CHARS, "text")
        check_name(speaker, self.config, "speaker")
        if self.llm is not None:
            found = await model_extraction(self.llm, text, speaker, self.config)
            if found is not None:
                return found
        return heuristic_extraction(text, speaker)

    async def ingest(
        self,
        text: str,
        *,
        speaker: str = "user",
        provenance: Sequence[str] = (),
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> GraphUpdate:
        """Extract what ``text`` states and merge it into the graph; every edge records ``provenance`` (the
        ids of the memory or turn it came from). What the extraction gets wrong is skipped, not stored."""
        writer = self._writer(user_id, agent_id)
        found = await self.extract(text, speaker=speaker)
        sources = [check_text(p, "provenance[...]", 512) for p in _names(provenance, "provenance")]
        nodes, edges = [], []
        for node in found.nodes:
            try:
                nodes.append(check_node(node, self.config))
            except ValidationError:  # a model's entity with an empty name, say: not worth failing the turn
                continue
        for edge in found.edges:
            try:
                edges.append(check_edge(Edge(**{**_fields(edge), "provenance": [*edge.provenance, *sources]}),
                                        self.config))  # fmt: skip
            except ValidationError:
                continue
        return await self._upsert(writer, nodes, edges)


def _fields(edge: Edge) -> dict[str, Any]:
    return {f: getattr(edge, f) for f in edge.__struct_fields__}
