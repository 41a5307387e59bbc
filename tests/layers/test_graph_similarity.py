"""Entity resolution by the similarity of names (``GraphConfig.resolve_similarity``), with the packaged model:
a name no node has resolves to the owner's node whose name means the same, never to another owner's, and
never for a delete."""

from __future__ import annotations

from pathlib import Path

import pytest

from memkit import ConfigurationError, Memkit, ValidationError, open_backend
from memkit.embedders import CachedEmbedder
from memkit.layers.graph import GraphConfig, KnowledgeGraph

pytestmark = pytest.mark.anyio

SIMILAR = GraphConfig(resolve_similarity=0.85)


async def test_a_similar_name_resolves_to_the_owners_node(store_url: str, local_embedder: CachedEmbedder) -> None:
    async with Memkit(store_url, embedder=local_embedder, graph=SIMILAR) as mem:
        graph = mem.graph
        ada = await graph.upsert_node("Ada Lovelace", type="person", user_id="u1")
        other = await graph.upsert_node("Ada Lovelace", type="person", user_id="u2")
        bob = await graph.upsert_node("Bob Smith", type="person", user_id="u1")
        edge = await graph.upsert_edge("Dr. Ada Lovelace", "works at", "Analytical Engines", user_id="u1")
        assert edge.source_id == ada.id  # no "dr ada lovelace" node: the name meant Ada
        merged = await graph.upsert_node("Dr. Ada Lovelace", attributes={"field": "maths"}, user_id="u1")
        assert merged.id == ada.id and "Dr. Ada Lovelace" in merged.aliases
        assert merged.attributes == {"field": "maths"}
        assert (await graph.get_node("Robert Smith", user_id="u1")).id == bob.id
        # Nothing like it, and another owner's nodes are never candidates.
        assert await graph.resolve("Grace Hopper", user_id="u1") is None
        assert (await graph.resolve("Dr. Ada Lovelace", user_id="u2")).id == other.id  # type: ignore[union-attr]
        assert await graph.resolve("Dr. Ada Lovelace", user_id="u3") is None
        assert await graph.resolve("Dr. Ada Lovelace", user_id="u1", agent_id="bot") is None
        walk = await graph.related("Ada Lovelace", user_id="u1")
        assert [e.target for e in walk.edges] == ["Analytical Engines"]


async def test_deletes_resolve_by_name_and_alias_only(local_embedder: CachedEmbedder) -> None:
    async with Memkit("memory://", embedder=local_embedder, graph=SIMILAR) as mem:
        await mem.graph.upsert_edge("Bob Smith", "lives in", "Porto", user_id="u1")
        assert not await mem.graph.delete_edge("Robert Smith", "lives in", "Porto", user_id="u1")
        assert not await mem.graph.delete_node("Robert Smith", user_id="u1")
        assert (await mem.graph.get_node("Bob Smith", user_id="u1")).name == "Bob Smith"
        assert len(await mem.graph.edges("Bob Smith", user_id="u1")) == 1


async def test_off_by_default_and_checked() -> None:
    async with Memkit("memory://", embedder="hashing") as mem:
        await mem.graph.upsert_node("Ada Lovelace", user_id="u1")
        assert await mem.graph.resolve("Dr. Ada Lovelace", user_id="u1") is None
    for bad in (0, 1.5, float("nan"), True, "0.9"):
        with pytest.raises(ValidationError, match="resolve_similarity"):
            GraphConfig(resolve_similarity=bad)  # type: ignore[arg-type]
    async with open_backend("memory://") as backend:
        with pytest.raises(ConfigurationError, match="embedder"):
            KnowledgeGraph(backend, SIMILAR)


async def test_another_embedder_is_refused_for_the_nodes(tmp_path: Path, local_embedder: CachedEmbedder) -> None:
    """Name vectors of two models compare as noise: a graph file keeps the model it was written with."""
    graph_only = {"graph": f"sqlite:///{tmp_path / 'graph.db'}"}
    async with Memkit("memory://", embedder=local_embedder, graph=SIMILAR, layer_urls=graph_only) as mem:
        await mem.graph.upsert_node("Ada Lovelace", user_id="u1")
    with pytest.raises(ConfigurationError, match=r"'graph_nodes'.*GraphConfig"):
        async with Memkit("memory://", embedder="hashing", graph=SIMILAR, layer_urls=graph_only):
            pass
