"""Hostile inputs at the layers' and the client's entry points: each is refused with a memkit error naming the
argument, before anything is written, the same way on memory:// and sqlite:// (found by an adversarial pass)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from memkit import ContextConfig, Memkit, ToolCacheConfig
from memkit.errors import ConfigurationError, MemkitError, NotOpenError, ValidationError
from memkit.layers.checkpoints import CheckpointConfig
from memkit.layers.shortterm import ShortTermConfig

pytestmark = pytest.mark.anyio

_MESSAGES = [{"role": "user", "content": "I live in Rome"}, {"role": "assistant", "content": "Nice!"}]


def _deep(levels: int = 10_000) -> list[Any]:
    """A list nested ``levels`` deep: a plain ``repr`` of it raises RecursionError."""
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.fixture(params=["memory", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path}/x.db"


@pytest.fixture
async def mem(url: str) -> AsyncIterator[Memkit]:
    async with Memkit(url, embedder="hashing") as client:
        yield client


# -- 1. observe checks every argument before it writes the session ------------------------------------------
@pytest.mark.parametrize(
    "arguments",
    [{"user_id": "ada", "wait": "yes"}, {"user_id": None}, {"user_id": ["ada"]}, {"user_id": ""}],
    ids=["wait-yes", "user-none", "user-list", "user-empty"],
)
async def test_a_refused_observe_leaves_the_session_empty(mem: Memkit, arguments: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match=r"user_id|wait"):
        await mem.observe(messages=_MESSAGES, session_id="s1", **arguments)
    user_id = arguments["user_id"] if isinstance(arguments["user_id"], str) and arguments["user_id"] else None
    assert await mem.short_term.session("s1", user_id=user_id).history() == []
    assert mem._observer is not None and mem._observer.pending == 0


# -- 2. error messages quote caller values through a bounded repr ------------------------------------------
async def test_deep_values_are_refused_with_memkit_errors_not_recursion_errors(tmp_path: Path) -> None:
    deep = _deep()
    builds: list[Callable[[], object]] = [
        lambda: Memkit(deep, embedder="hashing"),  # type: ignore[arg-type]
        lambda: Memkit("memory://", embedder=deep),  # type: ignore[arg-type]
        lambda: Memkit("memory://", embedder="hashing", config=deep),  # type: ignore[arg-type]
        lambda: ToolCacheConfig(default_ttl_s=deep),  # type: ignore[arg-type]
        lambda: ToolCacheConfig(ttls={"weather": deep}),  # type: ignore[dict-item]
        lambda: CheckpointConfig(keep_last=deep),  # type: ignore[arg-type]
        lambda: CheckpointConfig(serializer=deep),  # type: ignore[arg-type]
        lambda: ShortTermConfig(max_tokens=deep),  # type: ignore[arg-type]
        lambda: ShortTermConfig(compact_at=deep),  # type: ignore[arg-type]
        lambda: ShortTermConfig(tokenizer=deep),
        lambda: ContextConfig(relative_min_score=deep),  # type: ignore[arg-type]
    ]
    for build in builds:
        with pytest.raises(MemkitError) as caught:
            build()
        assert len(str(caught.value)) < 400
    async with Memkit("memory://", embedder="hashing") as mem:
        with pytest.raises(ValidationError, match=r"messages\[0\]"):
            await mem.observe(user_id="ada", messages=[deep])
        with pytest.raises(ValidationError, match="type"):
            await mem.working.task("t", user_id="ada").get("k", type=deep)


# -- 3. type= that is not a type: refused before the store, and before the tool runs -----------------------
@pytest.mark.parametrize("bad", [5, "dict", object(), [int]], ids=["int", "str", "object", "list"])
async def test_a_type_that_is_not_a_type_is_refused_first(mem: Memkit, bad: Any) -> None:
    ran = 0

    async def tool() -> dict[str, int]:
        nonlocal ran
        ran += 1
        return {"a": 1}

    task = mem.working.task("t", user_id="ada")
    await task.set("k", {"a": 1})
    await mem.checkpoints.save("th", {"a": 1}, user_id="ada")
    for _ in range(2):  # a miss ran the tool and cached it; the next identical call raised TypeError
        with pytest.raises(ValidationError, match="type"):
            await mem.tool_cache.call("weather", {}, tool, type=bad)
    assert ran == 0 and mem.tool_cache.stats.misses == 0
    with pytest.raises(ValidationError, match="type"):
        await task.get("k", type=bad)
    with pytest.raises(ValidationError, match="type"):
        await mem.checkpoints.load("th", user_id="ada", type=bad)
    assert await mem.tool_cache.call("weather", {}, tool, type=dict[str, int]) == {"a": 1} and ran == 1


# -- 4. flush and context(wait_for_writes=True) check user_id ----------------------------------------------
@pytest.mark.parametrize("user_id", [["ada"], 5, "", {"a": 1}])
async def test_flush_and_context_refuse_a_user_id_that_is_not_text(mem: Memkit, user_id: Any) -> None:
    with pytest.raises(ValidationError, match="user_id"):
        await mem.flush(user_id=user_id)
    with pytest.raises(ValidationError, match="user_id"):
        await mem.context(user_id=user_id, query="What do I like?", wait_for_writes=True)


# -- 5. working memory: update's change and restore's items ------------------------------------------------
async def test_working_update_and_restore_refuse_what_they_cannot_use(mem: Memkit) -> None:
    task = mem.working.task("t", user_id="ada")
    await task.set("k", 1)
    with pytest.raises(ValidationError, match="change"):
        await task.update("k", None)  # type: ignore[arg-type]
    for items in (None, 5, "abc", {"k": 1}):
        with pytest.raises(ValidationError, match="restore"):
            await task.restore(items)  # type: ignore[arg-type]
    assert [(i.key, i.value) for i in await task.items()] == [("k", 1)]


# -- 6. ContextConfig checks every field at construction ---------------------------------------------------
@pytest.mark.parametrize(
    "fields",
    [
        {"relative_min_score": None}, {"relative_min_score": float("nan")}, {"relative_min_score": 2},
        {"max_memories": "5"}, {"max_memories": 2.5}, {"max_memories": 0}, {"max_memories": True},
        {"shares": None}, {"shares": {"x": 1}}, {"shares": [("memories", 1)]},
        {"shares": {"memories": "1", "working": 0, "lessons": 0, "graph": 0}},
        {"max_query_entities": "x"}, {"max_query_entities": -3}, {"max_query_entities": 1.5},
        {"graph_entity": 5}, {"graph_entity": ""}, {"graph_entity": "a\x00b"},
        {"min_score": "0.1"}, {"min_score": float("inf")}, {"timeout_s": None}, {"first_call_timeout_s": 0},
    ],
)  # fmt: skip
def test_context_config_refuses_every_bad_field(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="ContextConfig"):
        ContextConfig(**fields)


def test_context_config_keeps_its_good_values() -> None:
    config = ContextConfig(max_memories=3, max_query_entities=0, graph_entity="Ada", min_score=0.2)
    assert (config.max_memories, config.max_query_entities, config.graph_entity) == (3, 0, "Ada")


# -- 7. ToolCacheConfig.ttls ---------------------------------------------------------------------------------
@pytest.mark.parametrize("ttls", [None, [("weather", 60)], "weather", {5: 60}])
def test_tool_cache_config_refuses_ttls_that_are_not_a_dict_of_names(ttls: Any) -> None:
    with pytest.raises(ConfigurationError, match="ttls"):
        ToolCacheConfig(ttls=ttls)


# -- 8. a config path the system cannot look at ------------------------------------------------------------
def test_a_config_path_too_long_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match=r"config=\.\.\.\)\) cannot be read"):
        Memkit("memory://", embedder="hashing", config="x" * 300)
    monkeypatch.setenv("MEMKIT_CONFIG", "y" * 300)
    with pytest.raises(ConfigurationError, match=r"MEMKIT_CONFIG\) cannot be read"):
        Memkit("memory://", embedder="hashing")


# -- 9. a layer kept past aclose() ---------------------------------------------------------------------------
async def test_a_layer_kept_past_aclose_raises_not_open_on_every_backend(store_url: str) -> None:
    url = store_url  # memory, sqlite, Postgres and Redis Stack
    async with Memkit(url, embedder="hashing") as mem:
        long_term, task = mem.long_term, mem.working.task("t", user_id="ada")
        await long_term.store("Ada likes tea", user_id="ada")
    names_memkit = rf"Memkit\({re.escape(repr(url))}\) is not open .*async with Memkit"  # not the backend's words
    with pytest.raises(NotOpenError, match=names_memkit):
        await long_term.store("Ada likes coffee", user_id="ada")
    with pytest.raises(NotOpenError, match=names_memkit):
        await long_term.list(user_id="ada")
    with pytest.raises(NotOpenError, match=names_memkit):
        await task.set("k", 1)
    with pytest.raises(NotOpenError, match=names_memkit):
        await task.get("k")
    async with Memkit(url, embedder="hashing") as mem:  # the refused write left nothing behind
        if not url.startswith("memory"):  # a new memory:// client starts empty
            assert [m.content for m in (await mem.long_term.list(user_id="ada")).memories] == ["Ada likes tea"]
