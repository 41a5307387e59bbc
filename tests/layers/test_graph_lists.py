"""Nodes' lists of newest edges: walks read edges by id through them, and no failure or old record makes a
walk miss or invent an edge."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from memkit import open_backend
from memkit.backend import Backend, Record
from memkit.errors import BackendUnavailableError
from memkit.layers.graph import Edge, GraphConfig, KnowledgeGraph

pytestmark = pytest.mark.anyio


class CountingBackend:
    """A real memory backend whose scans are counted and whose edge writes can be made to fail."""

    def __init__(self, inner: Backend) -> None:
        self.inner, self.scans, self.fail_edge_writes = inner, 0, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def scan(self, collection: str, *args: Any, **kwargs: Any) -> Any:
        self.scans += 1
        return await self.inner.scan(collection, *args, **kwargs)

    async def replace_many(self, collection: str, pairs: Sequence[tuple[Record, bytes | None]]) -> list[bool]:
        if self.fail_edge_writes and collection == "graph_edges":
            raise BackendUnavailableError("edge writes fail here (a crash between a node's list and its edge)")
        return await self.inner.replace_many(collection, pairs)


@pytest.fixture
async def store() -> AsyncIterator[CountingBackend]:
    async with open_backend("memory://") as backend:
        yield CountingBackend(backend)


async def _graph(store: CountingBackend, config: GraphConfig | None = None) -> KnowledgeGraph:
    """Lists kept unless ``config`` says otherwise: memory:// alone would keep none (its scans are cheap)."""
    graph = KnowledgeGraph(store, config or GraphConfig(adjacency_cap=64))  # type: ignore[arg-type]
    await graph.setup()
    return graph


async def test_lists_are_kept_where_scans_cost_more_than_reads_by_id(tmp_path: Path) -> None:
    """By default a graph keeps lists unless its backend's scans are as cheap as reads by id (memory://),
    where they would only cost writes; an explicit cap is kept as given."""
    async with open_backend("memory://") as memory, open_backend(f"sqlite:///{tmp_path / 'g.db'}") as sqlite:
        assert memory.capabilities.cheap_scans and not sqlite.capabilities.cheap_scans
        assert KnowledgeGraph(memory).config.adjacency_cap == 0
        assert KnowledgeGraph(sqlite).config.adjacency_cap == 64
        assert KnowledgeGraph(memory, GraphConfig(adjacency_cap=8)).config.adjacency_cap == 8
        graph = KnowledgeGraph(memory)
        await graph.setup()
        await graph.upsert(edges=[Edge(source="ada", relation="knows", target="bea")], user_id="u")
        [node] = await memory.get("graph_nodes", [(await graph.resolve("ada", user_id="u")).id], None)  # type: ignore[union-attr]
        assert b"adjacent" not in node.body  # no list written: the edge write left the node be
        walked = await graph.related("ada", user_id="u")
        assert {n.name for n in walked.nodes} == {"ada", "bea"}


async def test_a_walk_from_small_nodes_reads_no_scan(store: CountingBackend) -> None:
    g = await _graph(store)
    await g.upsert(edges=[Edge(source=f"p{i}", relation="knows", target=f"p{(i * 3 + 1) % 50}") for i in range(50)]
                   + [Edge(source="p0", relation="works_at", target="Acme")], user_id="u")  # fmt: skip
    root = await g.resolve("p0", user_id="u")
    assert root is not None
    before = store.scans
    walked = await g.related("p0", depth=3, user_id="u")
    assert store.scans == before  # the name resolved by id, every hop by its nodes' lists: no scan
    assert {"Acme", "p1"} <= {n.name for n in walked.nodes} and max(walked.depth.values()) == 3
    scanned = await (await _graph(store, GraphConfig(adjacency_cap=0))).related("p0", depth=3, user_id="u")
    assert scanned.depth == walked.depth and store.scans - before >= 3  # the same walk: a scan per node and hop


async def test_a_hub_past_its_list_is_read_by_scan_only_when_the_walk_wants_more(store: CountingBackend) -> None:
    g = await _graph(store, GraphConfig(adjacency_cap=10))
    await g.upsert(edges=[Edge(source="hub", relation="knows", target=f"p{i}") for i in range(30)], user_id="u")
    before = store.scans
    newest = await g.related("hub", depth=1, fan_out=5, user_id="u")
    assert store.scans == before and len(newest.edges) == 5 and newest.truncated  # from the list
    whole = await g.related("hub", depth=1, fan_out=100, user_id="u")
    assert store.scans - before == 1 and len(whole.edges) == 30 and not whole.truncated  # past it: a scan


async def test_an_edge_write_that_fails_after_the_lists_leaves_no_phantom(store: CountingBackend) -> None:
    g = await _graph(store)
    await g.upsert_edge("Ada", "knows", "Bob", user_id="u")
    store.fail_edge_writes = True
    with pytest.raises(BackendUnavailableError):
        await g.upsert(edges=[Edge(source="Ada", relation="knows", target="Cy")], user_id="u")
    store.fail_edge_writes = False
    assert {n.name for n in (await g.related("Ada", user_id="u")).nodes} == {"Ada", "Bob"}  # Cy's edge never landed
    await g.upsert(edges=[Edge(source="Ada", relation="knows", target="Cy")], user_id="u")  # the caller retries
    before = store.scans
    assert {n.name for n in (await g.related("Ada", user_id="u")).nodes} == {"Ada", "Bob", "Cy"}
    assert store.scans == before  # the list is whole again: no hop scanned


async def test_nodes_stored_before_lists_are_walked_by_scan(store: CountingBackend) -> None:
    old = await _graph(store, GraphConfig(adjacency_cap=0))  # as a graph written before lists existed
    await old.upsert(edges=[Edge(source="Ada", relation="knows", target=n) for n in ("Bob", "Cy")], user_id="u")
    g = await _graph(store)
    await g.upsert_edge("Ada", "knows", "Di", user_id="u")  # Ada keeps no list: her edges are found by scan
    before = store.scans
    assert {n.name for n in (await g.related("Ada", depth=1, user_id="u")).nodes} == {"Ada", "Bob", "Cy", "Di"}
    assert store.scans - before == 1  # Ada's hop, by scan
