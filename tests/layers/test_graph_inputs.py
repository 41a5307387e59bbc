"""Hostile arguments to the graph (and the text rules every layer shares): each refused with a memkit error
that names it, nothing written, and nothing stored that a later read cannot decode."""

from __future__ import annotations

import enum
import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memkit import ContentError, Memkit, ScopeError, ValidationError

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory", "sqlite"])
async def mem(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Memkit]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'graph.db'}"
    async with Memkit(url, embedder="hashing") as client:
        yield client


def deep(levels: int = 10_000) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


async def stored(mem: Memkit) -> int:
    walk = await mem.graph.resolve("Ada", user_id="u")
    return -1 if walk is None else len(await mem.graph.edges("Ada", include_ended=True, user_id="u"))


async def test_a_moment_past_year_9999_in_utc_is_refused_and_datetime_max_reads_back(mem: Memkit) -> None:
    await mem.graph.upsert_node("Ada", user_id="u")
    late = datetime(9999, 12, 31, 23, 59, tzinfo=timezone(timedelta(hours=-5)))  # year 10000 in UTC
    for field in ("valid_to", "valid_from"):
        with pytest.raises(ValidationError, match=f"edge.{field}"):
            await mem.graph.upsert_edge("Ada", "works at", "Acme", user_id="u", **{field: late})
    assert await stored(mem) == 0
    forever = datetime.max.replace(tzinfo=UTC)
    edge = await mem.graph.upsert_edge("Ada", "likes", "Tea", valid_to=forever, user_id="u")
    assert edge.valid_to == forever
    [again] = await mem.graph.edges("Ada", user_id="u")
    assert again.valid_to == forever
    assert (await mem.graph.related("Ada", user_id="u")).edges[0].target == "Tea"


async def test_an_end_without_a_start_ends_what_held_then_and_never_runs_backwards(mem: Memkit) -> None:
    """``valid_from`` defaults to now: an end in the past made an interval from now back to it."""
    now = datetime.now(UTC)
    await mem.graph.upsert_edge("Ada", "works at", "Acme", user_id="u", valid_from=now - timedelta(days=30))
    ended = await mem.graph.upsert_edge("Ada", "works at", "Acme", user_id="u", valid_to=now - timedelta(days=1))
    assert [(i.valid_from, i.valid_to) for i in ended.history] == [(now - timedelta(days=30), now - timedelta(days=1))]
    never = await mem.graph.upsert_edge("Ada", "knows", "Bob", user_id="u", valid_to=now - timedelta(days=2))
    assert all(i.valid_from <= i.valid_to for i in never.history if i.valid_to)  # held at no moment
    assert [e.target for e in await mem.graph.edges("Ada", as_of=now - timedelta(days=2), user_id="u")] == ["Acme"]
    today = await mem.graph.upsert_edge("Ada", "likes", "tea", user_id="u")
    stopped = await mem.graph.upsert_edge("Ada", "likes", "tea", user_id="u", valid_to=now - timedelta(days=3))
    assert stopped.history == today.history  # it began today: nothing held then to end
    assert (await mem.graph.upsert_edge("Ada", "likes", "tea", user_id="u", valid_to=datetime.now(UTC))).valid_to


async def test_a_string_is_not_a_list_of_names(mem: Memkit) -> None:
    with pytest.raises(ValidationError, match="aliases must be a list"):
        await mem.graph.upsert_node("Ada Lovelace", aliases="Ada", user_id="u")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="provenance must be a list"):
        await mem.graph.upsert_edge("Ada", "likes", "Tea", provenance="mem-42", user_id="u")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="provenance must be a list"):
        await mem.graph.ingest("I love hiking.", speaker="Ada", provenance="mem-7", user_id="u")  # type: ignore[arg-type]
    for bad in (None, 5):
        with pytest.raises(ValidationError, match="aliases"):
            await mem.graph.upsert_node("Ada", aliases=bad, user_id="u")  # type: ignore[arg-type]
    assert await mem.graph.resolve("d", user_id="u") is None
    assert await stored(mem) == -1


async def test_falsy_attributes_and_flags_are_checked_not_read_as_empty(mem: Memkit) -> None:
    for bad in (0, False, "", [], {"x": math.nan}):  # named as the caller named them, not as "metadata"
        with pytest.raises(ValidationError, match=r"^node\.attributes"):
            await mem.graph.upsert_node("Ada", attributes=bad, user_id="u")  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match=r"^edge\.attributes"):
            await mem.graph.upsert_edge("Ada", "likes", "Tea", attributes=bad, user_id="u")  # type: ignore[arg-type]
    assert await stored(mem) == -1
    await mem.graph.upsert_edge("Ada", "likes", "Tea", user_id="u")
    with pytest.raises(ValidationError, match="include_ended"):
        await mem.graph.edges("Ada", include_ended="no", user_id="u")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="relation"):
        await mem.graph.delete_edge("Nobody", 5, "No one", user_id="u")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["\u2605", "\u200b", "\u0301", "--", "..."])
async def test_a_name_needs_a_letter_or_digit(mem: Memkit, name: str) -> None:
    with pytest.raises(ValidationError, match="letters or digits"):
        await mem.graph.upsert_node(name, user_id="u")
    with pytest.raises(ValidationError, match="letters or digits"):
        await mem.graph.upsert_edge("Ada", "likes", name, user_id="u")
    assert await stored(mem) == -1


async def test_deeply_nested_values_are_refused_not_a_recursion_error(mem: Memkit) -> None:
    value = deep()
    with pytest.raises(ScopeError, match="user_id"):
        await mem.graph.resolve("Ada", user_id=value)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="name"):
        await mem.graph.upsert_node(value, user_id="u")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        await mem.long_term.recall("q", k=value, user_id="u")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        await mem.long_term.get(value, user_id="u")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        await mem.long_term.list(user_id="u", metadata={"a": [value]})  # type: ignore[arg-type]


class Sub(str):
    """A str subclass the encoders cannot write: refused up front, not a TypeError mid-write."""


class Kind(enum.StrEnum):
    FACT = "fact"


async def test_text_is_a_str_or_a_str_enum_member(mem: Memkit) -> None:
    with pytest.raises(ContentError, match="content"):
        await mem.long_term.store(Sub("Ada has a dog"), user_id="u")
    with pytest.raises(ValidationError, match="kind"):
        await mem.long_term.store("Ada has a cat", kind=Sub("fact"), user_id="u")
    with pytest.raises(ScopeError, match="user_id"):
        await mem.long_term.store("Ada has a cat", user_id=Sub("u"))
    with pytest.raises(ScopeError, match=r"pass str\(value\)"):  # an id read from a numpy array
        await mem.long_term.store("Ada has a cat", user_id=np.array(["u"])[0])
    assert (await mem.long_term.list(user_id="u")).memories == []
    result = await mem.long_term.store("Ada has a cat", kind=Kind.FACT, user_id="u")
    assert result.memory is not None
    [memory] = (await mem.long_term.list(user_id="u")).memories
    assert memory.kind == "fact" and type(memory.kind) is str
