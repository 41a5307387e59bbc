"""The knowledge graph through the client: extraction (offline patterns, and a model over real HTTP), the
prompt block's budget, configuration, backends that cannot hold a graph, and writers in several processes."""

from __future__ import annotations

import functools
import logging
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

from memkit import ConfigurationError, Memkit, ValidationError
from memkit.layers.graph import Edge, GraphConfig, Node, heuristic_extraction
from memkit.llm import OpenAIChat
from memkit.testing.llm_double import LLMDouble, json_reply, text_reply
from memkit.tokens import EstimateTokenizer

pytestmark = pytest.mark.anyio


@pytest.fixture
async def mem() -> AsyncIterator[Memkit]:
    async with Memkit("memory://", embedder="hashing") as client:
        yield client


@pytest.fixture
def double() -> Iterator[LLMDouble]:
    with LLMDouble() as served:
        yield served


def _triples(text: str, speaker: str = "user") -> set[tuple[str, str, str]]:
    return {(e.source, e.relation, e.target) for e in heuristic_extraction(text, speaker).edges}


# -- offline extraction -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("My sister Bea lives in Porto.", {("user", "has_sister", "Bea"), ("Bea", "lives_in", "Porto")}),
        ("Bea is my sister.", {("user", "has_sister", "Bea")}),
        ("My sister's name is Bea and she is great", {("user", "has_sister", "Bea")}),
        ("I work at Acme Corp as a designer", {("user", "works_at", "Acme Corp")}),
        ("I\u2019m working for Globex now.", {("user", "works_at", "Globex")}),
        ("Actually, I moved to Lisbon last month.", {("user", "lives_in", "Lisbon")}),
        ("I'm from Lyon, but I live in Paris.", {("user", "from", "Lyon"), ("user", "lives_in", "Paris")}),
        ("Tom works at Initech.", {("Tom", "works_at", "Initech")}),
        ("I love hiking and I hate crowds.", {("user", "likes", "hiking"), ("user", "dislikes", "crowds")}),
        ("I don't like olives.", {("user", "dislikes", "olives")}),
        ("My favorite color is green.", {("user", "favorite_color", "green")}),
        ("I'm allergic to peanuts.", {("user", "allergic_to", "peanuts")}),
        ("I have a dog. My dog Rex is lazy.", {("user", "has_dog", "Rex")}),
        ("I'm married to Sam.", {("user", "married_to", "Sam")}),
        ("I studied at MIT.", {("user", "studies_at", "MIT")}),
    ],
)
def test_offline_extraction_reads_first_and_third_person_statements(text: str, expected: set[tuple[str, ...]]) -> None:
    assert _triples(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "I work at night.",  # no employer: lowercase
        "I don't work at Acme any more.",
        "I live in Paris, not any more though",
        "ok thanks",
        "I like it.",
        "I love to travel",  # an activity in the infinitive: not a thing liked, as written
        "What do you think about React?",
        "",
    ],
)
def test_offline_extraction_states_nothing_it_cannot_read(text: str) -> None:
    assert _triples(text) == set()


def test_a_stated_name_becomes_an_alias_of_the_speaker() -> None:
    found = heuristic_extraction("Hi, my name is Ada Lovelace. Call me Ada.", "user")
    assert [(n.name, n.aliases) for n in found.nodes] == [("user", ["Ada Lovelace"]), ("user", ["Ada"])]


async def test_ingest_builds_the_graph_and_a_correction_supersedes(mem: Memkit) -> None:
    graph = mem.graph
    await graph.ingest("My name is Sam. I live in Paris and I work at Acme.", user_id="u", provenance=["turn-1"])
    update = await graph.ingest("Actually, I moved to Lisbon.", user_id="u", provenance=["turn-7"])
    assert [(e.relation, e.target, e.provenance) for e in update.edges] == [("lives_in", "Lisbon", ["turn-7"])]
    text = await graph.to_context("Sam", user_id="u")  # the alias resolves to the speaker
    assert "user lives in Lisbon" in text and "Paris" not in text and "user works at Acme" in text
    [paris] = [e for e in await graph.edges("user", include_ended=True, user_id="u") if e.target == "Paris"]
    assert paris.valid_to is not None and paris.provenance == ["turn-1"]


async def test_a_move_stated_in_the_same_call_ends_the_first_home(mem: Memkit) -> None:
    """Every edge of one call started at the same moment, so none ended another: two current homes."""
    graph = mem.graph
    await graph.ingest("I live in Paris. Actually, I moved to Lisbon.", speaker="Ada", user_id="u")
    assert [e.target for e in await graph.edges("Ada", relation="lives_in", user_id="u")] == ["Lisbon"]
    stated = [("lives_in", "Kyiv"), ("lives_in", "Lviv"), ("likes", "tea"), ("likes", "jazz")]
    await graph.upsert(edges=[Edge(source="Eve", relation=r, target=t) for r, t in stated], user_id="u")
    assert [e.target for e in await graph.edges("Eve", relation="lives_in", user_id="u")] == ["Lviv"]
    assert sorted(e.target for e in await graph.edges("Eve", relation="likes", user_id="u")) == ["jazz", "tea"]
    [kyiv] = [e for e in await graph.edges("Eve", relation="lives_in", include_ended=True, user_id="u")
              if e.target == "Kyiv"]  # fmt: skip
    assert kyiv.valid_to is not None


async def test_the_last_stated_target_holds_whatever_its_name_or_state(mem: Memkit) -> None:
    """Targets are compared as the nodes they resolve to (an alias is its node), and a target already current
    stated again last holds, as separate calls leave it."""
    graph = mem.graph

    async def lives(*targets: str, source: str = "Ada") -> list[str]:
        await graph.upsert(edges=[Edge(source=source, relation="lives in", target=t) for t in targets], user_id="u")
        return [e.target for e in await graph.edges("Ada", relation="lives_in", user_id="u")]

    await graph.upsert_node("Lisbon", aliases=["Lisboa"], type="place", user_id="u")
    await graph.upsert_node("Ada", aliases=["Ada Lovelace"], type="person", user_id="u")
    assert await lives("Lisbon", "Paris", "Lisboa") == ["Lisbon"]
    assert await lives("Lisbon", "Paris") == ["Paris"]  # Paris was current: it still is, after Lisbon
    assert await lives("Rome") == ["Rome"]
    assert await graph.upsert(
        edges=[
            Edge(source="Ada", relation="lives in", target="Oslo"),
            Edge(source="Ada Lovelace", relation="lives in", target="Bergen"),
        ],
        user_id="u",
    )
    assert [e.target for e in await graph.edges("Ada", relation="lives_in", user_id="u")] == ["Bergen"]
    for edge in await graph.edges("Ada", include_ended=True, user_id="u"):
        assert all(i.valid_to is None or i.valid_from <= i.valid_to for i in edge.history)


# -- a model over real HTTP (the loopback double of the OpenAI API) ---------------------------------------------
def _chat(double: LLMDouble) -> OpenAIChat:
    return OpenAIChat("gpt-test", base_url=double.openai_url, api_key="sk-test", backoff_s=0.01, max_backoff_s=0.1,
                      timeout_s=5.0, max_retries=0)  # fmt: skip


async def test_the_model_extracts_when_configured(double: LLMDouble) -> None:
    answer = {"entities": [{"name": "Ada", "type": "person", "aliases": ["Countess"]},
                           {"name": "Analytical Engine", "type": "thing"}],
              "relations": [{"source": "Ada", "relation": "wrote programs for", "target": "Analytical Engine"},
                            {"source": "Ada", "relation": "", "target": "nothing"}]}  # fmt: skip
    double.script("openai", json_reply(answer))
    async with _chat(double) as llm, Memkit("memory://", embedder="hashing", llm=llm) as mem:
        update = await mem.graph.ingest("Ada wrote the first programs for the Analytical Engine.", user_id="u")
        assert [(e.source, e.relation, e.target) for e in update.edges] == [
            ("Ada", "wrote_programs_for", "Analytical Engine")  # the empty relation was skipped, not stored
        ]
        assert (await mem.graph.get_node("countess", user_id="u")).type == "person"
    [request] = double.requests("openai")
    assert "Ada wrote the first programs" in request.body["messages"][-1]["content"]


async def test_a_failing_model_falls_back_to_the_patterns(double: LLMDouble, caplog: pytest.LogCaptureFixture) -> None:
    double.script("openai", text_reply("not json at all"), text_reply("still not json"))
    async with _chat(double) as llm, Memkit("memory://", embedder="hashing", llm=llm) as mem:
        with caplog.at_level(logging.WARNING, logger="memkit"):
            update = await mem.graph.ingest("I work at Acme.", user_id="u")
    assert [(e.source, e.relation, e.target) for e in update.edges] == [("user", "works_at", "Acme")]
    assert "could not extract relations" in caplog.text


# -- the prompt block -------------------------------------------------------------------------------------------
async def test_context_never_exceeds_its_budget(mem: Memkit) -> None:
    edges = [Edge(source="Ada", relation=f"knows_{i % 5}", target=f"Person number {i}", attributes={"note": "x" * i})
             for i in range(40)]  # fmt: skip
    await mem.graph.upsert(edges=edges, user_id="u")
    tokenizer = EstimateTokenizer()
    sizes = []
    for budget in (8, 20, 50, 100, 400, 4000):
        text = await mem.graph.to_context("Ada", max_tokens=budget, user_id="u")
        assert tokenizer.count(text) <= budget or text == ""
        sizes.append(len(text))
    assert sizes == sorted(sizes) and sizes[0] == 0 and 0 < sizes[2] < sizes[-1]


# -- configuration and backends -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "settings",
    [
        {"max_depth": 0},
        {"default_fan_out": 0},
        {"nodes_collection": "same", "edges_collection": "same"},
        {"functional": ["lives_in"]},
        {"llm_timeout_s": float("nan")},
        {"default_depth": 5},
    ],
)
def test_bad_config_is_refused_when_built(settings: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="GraphConfig"):
        GraphConfig(**settings)  # type: ignore[arg-type]


async def test_custom_functional_relations() -> None:
    async with Memkit("memory://", embedder="hashing", graph=GraphConfig(functional=frozenset({"Drives"}))) as mem:
        await _two_cars_two_homes(mem)


async def _two_cars_two_homes(mem: Memkit) -> None:
    graph = mem.graph
    await graph.upsert_edge("Ada", "drives", "a Fiat", user_id="u")
    await graph.upsert_edge("Ada", "drives", "a Volvo", user_id="u")
    await graph.upsert_edge("Ada", "lives_in", "Paris", user_id="u")
    await graph.upsert_edge("Ada", "lives_in", "Rome", user_id="u")  # not functional in this config
    assert {(e.relation, e.target) for e in await graph.edges("Ada", user_id="u")} == {
        ("drives", "a Volvo"),
        ("lives_in", "Paris"),
        ("lives_in", "Rome"),
    }


async def test_a_backend_without_records_refuses_a_graph_that_was_asked_for(redis_plain_url: str) -> None:
    with pytest.raises(ConfigurationError, match=r"the graph layer needs .*records"):
        await Memkit(redis_plain_url, embedder="hashing", graph=GraphConfig(),
                     layer_urls={"long_term": "memory://", "episodic": "memory://"}).open()  # fmt: skip
    async with Memkit(redis_plain_url, embedder="hashing", layer_urls={"long_term": "memory://"}) as mem:
        await mem.working.task("t").set("k", 1)  # the key-value layers still work
        with pytest.raises(ConfigurationError, match="layer_urls"):
            await mem.graph.upsert_node("Ada", user_id="u")


async def test_nodes_and_edges_are_checked_as_types(mem: Memkit) -> None:
    with pytest.raises(ValidationError, match="must be a list"):
        await mem.graph.upsert(nodes=Node(name="Ada"), user_id="u")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="memkit Edge"):
        await mem.graph.upsert(edges=[("Ada", "knows", "Bob")], user_id="u")  # type: ignore[list-item]


# -- writers in several processes -------------------------------------------------------------------------------
_WRITER = textwrap.dedent(
    """
    import sys, anyio
    from memkit import open_backend
    from memkit.layers.graph import Edge, KnowledgeGraph, Node

    async def main(url: str, writer: str) -> None:
        async with open_backend(url) as backend:
            graph = KnowledgeGraph(backend)
            await graph.setup()
            for k in range(15):
                await graph.upsert(nodes=[Node(name="Shared", attributes={f"{writer}-{k}": k})],
                                   edges=[Edge(source="Shared", relation="seen_by", target="Everyone",
                                               attributes={f"{writer}-{k}": k})], user_id="u")

    anyio.run(main, sys.argv[1], sys.argv[2])
    """
)


@pytest.mark.parametrize("kind", ["sqlite", "postgres", "redis"])
async def test_writers_in_several_processes_lose_nothing(kind: str, request: pytest.FixtureRequest,
                                                         tmp_path: Path) -> None:  # fmt: skip
    from tests.conftest import fresh_postgres_url, fresh_redis_url

    url = (f"sqlite:///{tmp_path / 'graph.db'}" if kind == "sqlite"
           else fresh_postgres_url(request.getfixturevalue("postgres_url")) if kind == "postgres"
           else fresh_redis_url(request.getfixturevalue("redis_url")))  # fmt: skip
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    with anyio.fail_after(120):
        async with anyio.create_task_group() as group:
            for i in range(4):  # check=True: a writer that fails fails the test
                group.start_soon(functools.partial(anyio.run_process, [sys.executable, str(script), url, f"w{i}"],
                                                   stdout=None, stderr=None))  # fmt: skip
    async with Memkit(url, embedder="hashing") as mem:
        node = await mem.graph.get_node("shared", user_id="u")
        [edge] = await mem.graph.edges("Shared", user_id="u")
    assert len(node.attributes) == 60 and len(edge.attributes) == 60


@pytest.mark.parametrize(
    "parts",
    [("3:ada|-", "a" * 32, "works_at", "b" * 32), ("", "", "", ""), ("ünï|:", "x|y", "rel:1", "ž\u4e2d")],
)
def test_edge_ids_are_the_digest_of_their_parts(parts: tuple[str, str, str, str]) -> None:
    """``edge_id`` writes ``digest_of``'s key out by hand for speed: stored edges keep the ids they had."""
    from memkit.layers._keys import digest_of
    from memkit.layers.graph._codec import edge_id

    assert edge_id(*parts) == digest_of("edge", *parts)
