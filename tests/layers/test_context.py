"""mem.context(): every layer's part gathered at once, within the budget, the relevant memories only, and a
failing or slow layer left out and reported while the others answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from memkit import ContextConfig, Memkit, ValidationError
from memkit.embedders import Embedder
from memkit.layers.episodic import Action, Episode
from memkit.tokens import EstimateTokenizer

pytestmark = pytest.mark.anyio

FACTS = [
    "I am allergic to peanuts.",
    "I prefer window seats on flights.",
    "My sister Bea lives in Porto.",
    "I work at Acme as a designer.",
    "My favourite band is Radiohead.",
    "I go running every Tuesday morning.",
    "I drive a blue Fiat.",
    "I studied chemistry in Lyon.",
]


@pytest.fixture
async def mem(local_embedder: Embedder) -> AsyncIterator[Memkit]:
    async with Memkit("memory://", embedder=local_embedder) as client:
        for fact in FACTS:
            await client.long_term.store(fact, user_id="ada")
            await client.graph.ingest(fact, user_id="ada")
        failed = Episode(trigger="Book a flight to Porto for the weekend", outcome="failure",
                         actions=[Action(tool="book_flight", ok=False, error="card declined")])  # fmt: skip
        await client.episodic.record(failed, user_id="ada")
        await client.working.task("s1", user_id="ada").set("destination", "Porto")
        yield client


async def test_every_layer_contributes_within_the_budget(mem: Memkit) -> None:
    ctx = await mem.context(user_id="ada", session_id="s1", query="Book me a flight to visit my sister Bea")
    assert set(ctx.sections) == {"memories", "working", "lessons", "graph"} and ctx.errors == {}
    assert "Bea lives in Porto" in ctx.sections["memories"] and "destination: Porto" in ctx.sections["working"]
    assert "card declined" in ctx.sections["lessons"] and "has sister Bea" in ctx.sections["graph"]
    assert ctx.text.index("What you know") < ctx.text.index("Current task") < ctx.text.index("Lessons")
    assert ctx.tokens == EstimateTokenizer().count(ctx.text) <= ctx.budget_tokens


async def test_only_the_relevant_memories_and_never_more_than_the_limit(mem: Memkit) -> None:
    ctx = await mem.context(user_id="ada", query="Book me a flight to visit my sister Bea")
    contents = [hit.memory.content for hit in ctx.memories]
    assert contents[0] == "My sister Bea lives in Porto." and len(contents) <= 5
    assert "I drive a blue Fiat." not in contents and "I go running every Tuesday morning." not in contents
    scores = [hit.score for hit in ctx.memories]
    assert scores == sorted(scores, reverse=True) and min(scores) >= 0.5 * scores[0]
    two = await mem.context(user_id="ada", query="Book me a flight", config=ContextConfig(max_memories=2))
    assert len(two.memories) <= 2


async def test_smaller_budgets_keep_whole_lines_and_the_most_important_sections(mem: Memkit) -> None:
    tokenizer = EstimateTokenizer()
    sizes = []
    for budget in (16, 40, 80, 160, 400, 2000):
        ctx = await mem.context(user_id="ada", session_id="s1", query="Book a flight to see Bea", budget_tokens=budget)
        assert tokenizer.count(ctx.text) <= budget
        assert all(line.strip() for line in ctx.text.splitlines() if line) and "…" not in ctx.text
        sizes.append(ctx.tokens)
    assert sizes == sorted(sizes) and sizes[-1] > sizes[2] > 0
    tight = await mem.context(user_id="ada", session_id="s1", query="Book a flight to see Bea", budget_tokens=40)
    assert list(tight.sections)[:1] == ["memories"]  # the first priority gets its share first


async def test_the_memories_listed_are_those_in_the_block() -> None:
    """A memory too long for the budget is passed over for a shorter one below it: the list named the long one."""
    async with Memkit("memory://", embedder="hashing", config=False) as mem:
        await mem.long_term.store("Peanuts: " + "I am severely allergic to peanuts and peanut oil, " * 12,
                                  user_id="ada", importance=1.0)  # fmt: skip
        await mem.long_term.store("Peanuts make me sick.", user_id="ada", importance=0.2)
        ctx = await mem.context(user_id="ada", query="peanuts", budget_tokens=60)
        assert ctx.text.endswith("- Peanuts make me sick.")
        assert [hit.memory.content for hit in ctx.memories] == ["Peanuts make me sick."]


async def test_a_failing_or_slow_layer_is_reported_and_the_others_answer(
    mem: Memkit, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> str:
        raise RuntimeError("graph store on fire")

    async def slow(*args: Any, **kwargs: Any) -> str:
        await anyio.sleep(10)
        return "never"

    monkeypatch.setattr(mem.graph, "to_context", broken)
    monkeypatch.setattr(mem.episodic, "lessons_for", slow)
    with anyio.fail_after(5):
        ctx = await mem.context(user_id="ada", query="flight to Porto",
                                config=ContextConfig(timeout_s=1.5, first_call_timeout_s=1.5))  # fmt: skip
    assert "graph store on fire" in ctx.errors["graph"] and "timed out" in ctx.errors["lessons"]
    assert "memories" in ctx.sections and "graph" not in ctx.sections


async def test_the_first_call_of_a_process_waits_for_kernels_and_models_to_load(
    mem: Memkit, monkeypatch: pytest.MonkeyPatch
) -> None:
    import memkit._context as context_module

    monkeypatch.setattr(context_module, "_warm", context_module._Warm())  # as in a fresh process
    real = mem.episodic.lessons_for

    async def loading(*args: Any, **kwargs: Any) -> Any:
        await anyio.sleep(0.6)  # what a first recall loading the scoring kernels takes
        return await real(*args, **kwargs)

    monkeypatch.setattr(mem.episodic, "lessons_for", loading)
    config = ContextConfig(timeout_s=0.3, first_call_timeout_s=5)
    first = await mem.context(user_id="ada", query="flight to Porto", config=config)
    assert first.errors == {}
    later = await mem.context(user_id="ada", query="flight to Porto", config=config)
    assert "timed out after 0.3 s" in later.errors["lessons"]


async def test_layers_a_backend_cannot_serve_are_reported(redis_plain_url: str, local_embedder: Embedder) -> None:
    async with Memkit(redis_plain_url, embedder=local_embedder, layer_urls={"long_term": "memory://"}) as mem:
        await mem.long_term.store("I am allergic to peanuts.", user_id="ada")
        ctx = await mem.context(user_id="ada", query="what should I cook for Ada?")
    assert "peanuts" in ctx.text and set(ctx.errors) == {"lessons", "graph"}
    assert "layer_urls" in ctx.errors["graph"]


async def test_bad_arguments(mem: Memkit) -> None:
    with pytest.raises(ValidationError):
        await mem.context(user_id="ada", query="hi", budget_tokens=3)
    with pytest.raises(ValidationError):
        await mem.context(user_id="ada", query="")
    with pytest.raises(ValidationError):
        await mem.context(user_id="ada", query="hi", config={"max_memories": 3})  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        ContextConfig(shares={"memories": 1.0})
