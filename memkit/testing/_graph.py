"""Layer conformance for the knowledge graph: its behaviours on a backend, so an adapter proves the graph works
on it, not only the contract. Provide an async ``backend`` fixture yielding an open, empty backend."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio
import msgspec
import pytest

from memkit.backend import Backend, Scope
from memkit.errors import NotFoundError, ScopeError, ValidationError
from memkit.layers._base import Layer, missing_capabilities
from memkit.layers.graph import Edge, GraphConfig, KnowledgeGraph, Node

__all__ = ["GraphConformance"]

_WRITERS = 12
_KEYS_EACH = 4


async def _graph(backend: Backend, config: GraphConfig | None = None) -> KnowledgeGraph:
    graph = KnowledgeGraph(backend, config)
    await graph.setup()
    return graph


def _names(edges: list[Edge]) -> set[tuple[str, str, str]]:
    return {(e.source, e.relation, e.target) for e in edges}


class GraphConformance:
    pytestmark = pytest.mark.anyio

    async def test_nodes_merge_and_resolve_by_name_and_alias(self, backend: Backend) -> None:
        g = await _graph(backend)
        assert isinstance(g, Layer) and missing_capabilities(g.needs, backend.capabilities) == []
        first = await g.upsert_node("Ada Lovelace", type="person", attributes={"role": "engineer"}, aliases=["Ada"],
                                    user_id="u")  # fmt: skip
        again = await g.upsert_node("  ADA   lovelace ", attributes={"team": "core"}, aliases=["Countess"], user_id="u")
        assert again.id == first.id and again.type == "person"
        assert again.attributes == {"role": "engineer", "team": "core"} and again.aliases == ["Ada", "Countess"]
        by_alias = await g.upsert_node("countess", attributes={"role": "lead"}, user_id="u")  # merges into Ada
        assert by_alias.id == first.id and by_alias.attributes == {"role": "lead", "team": "core"}
        for name in ("ada", "Ada Lovelace", "the countess."[4:]):
            resolved = await g.resolve(name, user_id="u")
            assert resolved is not None and resolved.id == first.id, name
        assert await g.resolve("Grace", user_id="u") is None
        with pytest.raises(NotFoundError):
            await g.get_node("Grace", user_id="u")

    async def test_edges_dedupe_merge_and_create_their_endpoints(self, backend: Backend) -> None:
        g = await _graph(backend)
        one = await g.upsert_edge("Ada", "works at", "Acme", attributes={"since": 2021}, provenance=["m1"],
                                  target_type="company", user_id="u")  # fmt: skip
        two = await g.upsert_edge("ada", "Works_At", "ACME", attributes={"team": "ml"}, provenance=["m2"], user_id="u")
        assert two.id == one.id and two.relation == "works_at" and two.target == "Acme"
        assert two.attributes == {"since": 2021, "team": "ml"} and two.provenance == ["m1", "m2"]
        assert len(two.history) == 1 and two.valid_to is None
        acme = await g.get_node("acme", user_id="u")
        assert acme.type == "company" and acme.id == two.target_id
        assert _names(await g.edges("Ada", user_id="u")) == {("Ada", "works_at", "Acme")}
        assert _names(await g.edges("Acme", direction="in", user_id="u")) == {("Ada", "works_at", "Acme")}
        assert await g.edges("Acme", user_id="u") == []  # nothing goes out of Acme

    async def test_functional_relation_ends_the_old_edge_and_as_of_sees_it(self, backend: Backend) -> None:
        g = await _graph(backend)
        t0 = datetime(2020, 1, 1, tzinfo=UTC)
        t1 = datetime(2023, 6, 1, tzinfo=UTC)
        await g.upsert_edge("Ada", "lives_in", "Paris", valid_from=t0, user_id="u")
        await g.upsert_edge("Ada", "likes", "Paris", valid_from=t0, user_id="u")  # not functional: stays
        moved = await g.upsert_edge("Ada", "lives_in", "London", valid_from=t1, user_id="u")
        assert moved.valid_to is None
        now = _names(await g.edges("Ada", user_id="u"))
        assert now == {("Ada", "lives_in", "London"), ("Ada", "likes", "Paris")}
        before = await g.edges("Ada", relation="lives_in", as_of=t1 - timedelta(days=1), user_id="u")
        assert _names(before) == {("Ada", "lives_in", "Paris")} and before[0].valid_to == t1
        every = await g.edges("Ada", relation="lives_in", include_ended=True, user_id="u")
        assert _names(every) == {("Ada", "lives_in", "Paris"), ("Ada", "lives_in", "London")}
        # An older fact stated late ends where the current one began, and leaves the current one alone.
        old = await g.upsert_edge("Ada", "lives_in", "Berlin", valid_from=datetime(2018, 1, 1, tzinfo=UTC), user_id="u")
        assert old.valid_to == t0
        assert _names(await g.edges("Ada", relation="lives_in", user_id="u")) == {("Ada", "lives_in", "London")}
        back = await g.upsert_edge("Ada", "lives_in", "Paris", user_id="u")  # moved back: Paris holds again
        assert back.valid_to is None and len(back.history) == 2
        assert _names(await g.edges("Ada", relation="lives_in", user_id="u")) == {("Ada", "lives_in", "Paris")}
        sub = await g.related("Ada", as_of=t1 + timedelta(days=1), user_id="u")
        assert {n.name for n in sub.nodes} == {"Ada", "London", "Paris"}  # lives in London, likes Paris

    async def test_walks_follow_depth_direction_relations_and_survive_cycles(self, backend: Backend) -> None:
        g = await _graph(backend)
        chain = [Edge(source=a, relation="next", target=b) for a, b in ("AB", "BC", "CD", "DA")]  # a cycle
        await g.upsert(edges=[*chain, Edge(source="B", relation="owns", target="X")], user_id="u")
        two = await g.related("A", depth=2, direction="out", user_id="u")
        assert two.nodes[0].name == "A" and {n.name for n in two.nodes} == {"A", "B", "C", "X"}
        assert {two.depth[n.id or ""] for n in two.nodes if n.name in "CX"} == {2}
        assert {n.name for n in (await g.related("A", depth=2, direction="in", user_id="u")).nodes} == {"A", "D", "C"}
        both = await g.related("A", depth=4, user_id="u")
        assert {n.name for n in both.nodes} == {"A", "B", "C", "D", "X"} and len(both.edges) == 5
        only = await g.related("A", depth=4, direction="out", relations="next", user_id="u")
        assert {n.name for n in only.nodes} == {"A", "B", "C", "D"}
        assert all(e.source_id in only.depth and e.target_id in only.depth for e in only.edges)
        with pytest.raises(NotFoundError):
            await g.related("Nobody", user_id="u")

    async def test_fan_out_and_max_nodes_bound_a_walk(self, backend: Backend) -> None:
        g = await _graph(backend)
        await g.upsert(edges=[Edge(source="hub", relation="knows", target=f"p{i}") for i in range(30)], user_id="u")
        await anyio.sleep(0.01)  # the next edge is the most recently asserted: followed first
        await g.upsert_edge("hub", "knows", "newest", user_id="u")
        cut = await g.related("hub", depth=1, fan_out=5, user_id="u")
        assert len(cut.edges) == 5 and cut.truncated and "newest" in {n.name for n in cut.nodes}
        small = await g.related("hub", depth=1, max_nodes=3, user_id="u")
        assert len(small.nodes) == 3 and small.truncated
        whole = await g.related("hub", depth=1, fan_out=100, user_id="u")
        assert len(whole.nodes) == 32 and not whole.truncated

    async def test_walks_by_node_lists_agree_with_walks_by_scan(self, backend: Backend) -> None:
        g = await _graph(backend, GraphConfig(adjacency_cap=8))  # small: hubs overflow their lists
        edges = [Edge(source="hub", relation="knows", target=f"p{i}") for i in range(20)]
        edges += [Edge(source=f"p{i}", relation="knows", target=f"p{(i * 7) % 20}") for i in range(20)]
        edges += [Edge(source="p3", relation="likes", target="p3")]  # a loop
        await g.upsert(edges=edges, user_id="u")
        await g.upsert_edge("p1", "lives_in", "Paris", user_id="u")
        await g.upsert_edge("p1", "lives_in", "London", user_id="u")  # ends the Paris edge
        await g.upsert_edge("p2", "knows", "p9", valid_from=datetime(2000, 1, 1, tzinfo=UTC),
                            valid_to=datetime(2001, 1, 1, tzinfo=UTC), user_id="u")  # fmt: skip
        await g.delete_edge("hub", "knows", "p5", user_id="u")
        await g.delete_node("p6", user_id="u")
        scanning = await _graph(backend, GraphConfig(adjacency_cap=0))  # reads every hop by scan
        for root in ("hub", "p1", "p2", "p3", "Paris", "London"):
            for depth, fan_out, direction in ((1, 3, "out"), (2, 5, "both"), (2, 20, "in"), (3, 40, "both")):
                kw = {"depth": depth, "fan_out": fan_out, "direction": direction, "user_id": "u"}
                by_list, by_scan = await g.related(root, **kw), await scanning.related(root, **kw)  # type: ignore[arg-type]
                assert by_list.depth == by_scan.depth, (root, kw)
                assert {e.id for e in by_list.edges} == {e.id for e in by_scan.edges}, (root, kw)
                assert by_list.truncated == by_scan.truncated, (root, kw)
        assert "Paris" not in {n.name for n in (await g.related("p1", depth=1, user_id="u")).nodes}
        assert "p6" not in {n.name for n in (await g.related("hub", depth=2, fan_out=40, user_id="u")).nodes}

    async def test_a_listed_edge_that_is_gone_is_never_followed(self, backend: Backend) -> None:
        g = await _graph(backend)
        await g.upsert(edges=[Edge(source="Ada", relation="knows", target=n) for n in ("Bob", "Cy", "Di")],
                       user_id="u")  # fmt: skip
        [bob] = [e for e in await g.edges("Ada", user_id="u") if e.target == "Bob"]
        # Deleted behind the layer's back (as a crash between a node's list and its edge would leave it):
        await backend.delete(g.config.edges_collection, [bob.id or ""], Scope(user_id="u"))
        walked = await g.related("Ada", depth=1, user_id="u")
        assert {n.name for n in walked.nodes} == {"Ada", "Cy", "Di"} and len(walked.edges) == 2

    async def test_graphs_of_users_and_agents_never_mix(self, backend: Backend) -> None:
        g = await _graph(backend)
        await g.upsert_edge("Ada", "works_at", "Acme", user_id="u")
        await g.upsert_edge("Ada", "works_at", "Globex", user_id="v")
        await g.upsert_edge("Ada", "works_at", "Initech", user_id="u", agent_id="a")
        await g.upsert_edge("Ada", "works_at", "Umbrella", agent_id="a")
        owners = [({"user_id": "u"}, "Acme"), ({"user_id": "v"}, "Globex"),
                  ({"user_id": "u", "agent_id": "a"}, "Initech"), ({"agent_id": "a"}, "Umbrella")]  # fmt: skip
        for scope, employer in owners:
            sub = await g.related("Ada", depth=3, **scope)  # type: ignore[arg-type]
            assert {n.name for n in sub.nodes} == {"Ada", employer}, scope
            assert employer in await g.to_context("Ada", **scope)  # type: ignore[arg-type]
        assert await g.resolve("Globex", user_id="u") is None
        assert await g.to_context("Globex", user_id="u") == ""
        with pytest.raises(ScopeError):
            await g.related("Ada")
        assert await g.forget_all(user_id="v") == 3  # two nodes, one edge
        assert await g.resolve("Ada", user_id="v") is None and await g.resolve("Ada", user_id="u") is not None

    async def test_records_of_another_owner_with_our_ids_never_show(self, backend: Backend) -> None:
        g = await _graph(backend)
        mine = await g.upsert_edge("Ada", "knows", "Bob", user_id="u")
        [forged] = await backend.get(g.config.edges_collection, [mine.id or ""])
        # Another user's record carrying u's node ids in every field a walk or a lookup filters on.
        intruder = msgspec.structs.replace(forged, id="forged", scope=Scope(user_id="v"),
                                           body=forged.body.replace(b"Bob", b"Eve"))  # fmt: skip
        await backend.upsert(g.config.edges_collection, [intruder])
        sub = await g.related("Ada", user_id="u")
        assert {e.target for e in sub.edges} == {"Bob"}
        assert [e.target for e in await g.edges("Ada", user_id="u")] == ["Bob"]

    async def test_concurrent_upserts_of_one_node_and_edge_lose_nothing(self, backend: Backend) -> None:
        g = await _graph(backend)

        async def writer(w: int) -> None:
            for k in range(_KEYS_EACH):
                await g.upsert(nodes=[Node(name="Shared", attributes={f"w{w}k{k}": w})],
                               edges=[Edge(source="Shared", relation="seen_by", target="Watcher",
                                           attributes={f"w{w}k{k}": k}, provenance=[f"w{w}"])],
                               user_id="u")  # fmt: skip

        async with anyio.create_task_group() as tg:
            for w in range(_WRITERS):
                tg.start_soon(writer, w)
        node = await g.get_node("shared", user_id="u")
        assert len(node.attributes) == _WRITERS * _KEYS_EACH
        [edge] = await g.edges("Shared", user_id="u")
        assert len(edge.attributes) == _WRITERS * _KEYS_EACH
        assert len(await g.edges("Watcher", direction="in", user_id="u")) == 1

    async def test_delete_node_takes_its_edges(self, backend: Backend) -> None:
        g = await _graph(backend)
        await g.upsert(edges=[Edge(source="Ada", relation="knows", target="Bob"),
                              Edge(source="Bob", relation="knows", target="Cy")], user_id="u")  # fmt: skip
        assert await g.delete_edge("Bob", "knows", "Cy", user_id="u") is True
        assert await g.delete_edge("Bob", "knows", "Cy", user_id="u") is False
        assert await g.delete_node("bob", user_id="u") is True
        assert await g.delete_node("bob", user_id="u") is False
        assert await g.edges("Ada", user_id="u") == [] and await g.resolve("Cy", user_id="u") is not None

    async def test_bad_input_raises_and_writes_nothing(self, backend: Backend) -> None:
        g = await _graph(backend)
        naive = datetime(2024, 1, 1)  # the point: a datetime without a timezone
        bad = [
            Edge(source="Ada", relation="knows", target="   "),
            Edge(source="Ada", relation="--", target="Bob"),
            Edge(source="Ada", relation="knows", target="Bob", attributes={"x": float("nan")}),
            Edge(source="Ada", relation="knows", target="Bob", valid_from=naive),
            Edge(source="Ada", relation="knows", target="Bob", valid_from=datetime(2024, 1, 2, tzinfo=UTC),
                 valid_to=datetime(2024, 1, 1, tzinfo=UTC)),
        ]  # fmt: skip
        for edge in bad:
            with pytest.raises(ValidationError):
                await g.upsert(nodes=[Node(name="Zed")], edges=[Edge(source="Zed", relation="r", target="Q"), edge],
                               user_id="u")  # fmt: skip
        assert await g.resolve("Zed", user_id="u") is None and await g.resolve("Ada", user_id="u") is None
        with pytest.raises(ValidationError):
            await g.related("Ada", depth=0, user_id="u")

    async def test_context_renders_the_neighbourhood_within_budget(self, backend: Backend) -> None:
        g = await _graph(backend)
        await g.upsert(nodes=[Node(name="Ada", type="person", attributes={"role": "engineer"})],
                       edges=[Edge(source="Ada", relation="works_on", target="AI assistant"),
                              Edge(source="Ada", relation="prefers", target="React"),
                              Edge(source="React", relation="ecosystem_has", target="Vercel AI SDK")],
                       user_id="u")  # fmt: skip
        text = await g.to_context("ada", user_id="u")
        assert text.startswith("Known about Ada (person; role: engineer):")
        assert "- Ada prefers React" in text and "  - React ecosystem has Vercel AI SDK" in text
        short = await g.to_context("ada", max_tokens=25, user_id="u")
        assert 0 < len(short) < len(text) and short.count("\n") < text.count("\n")
