"""A tool call's arguments cut to fit the budget stay JSON of the same shape, in both output formats."""

from __future__ import annotations

import json

import pytest

from memkit import Memkit, ShortTermConfig
from memkit.layers.shortterm._render import rendered_tokens, truncate_arguments
from memkit.tokens import EstimateTokenizer

pytestmark = pytest.mark.anyio

BUDGET = 300


async def _messages(arguments: str, fmt: str = "openai") -> list[dict[str, object]]:
    config = ShortTermConfig(max_tokens=BUDGET, keep_last=2, tokenizer="estimate")
    async with Memkit("memory://", embedder="hashing", short_term=config) as mem:
        session = mem.short_term.session("s", user_id="ada")
        await session.add({"role": "user", "content": "go"})
        await session.add({"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "search", "arguments": arguments}}]})  # fmt: skip
        await session.add({"role": "tool", "tool_call_id": "c1", "content": "result " * 3000})
        return await session.to_messages(format=fmt)  # type: ignore[arg-type]


async def test_cut_arguments_are_json_of_the_same_shape() -> None:
    arguments = json.dumps({"q": "x " * 1500, "filters": {"tags": ["a" * 900, "b"], "limit": 5}})
    messages = await _messages(arguments)
    [call] = [c for m in messages for c in m.get("tool_calls") or []]  # type: ignore[attr-defined]
    cut = json.loads(call["function"]["arguments"])
    assert set(cut) == {"q", "filters"} and cut["filters"]["limit"] == 5 and cut["filters"]["tags"][1] == "b"
    assert "cut by memkit" in cut["q"] and len(cut["q"]) < 3000
    assert rendered_tokens(messages, EstimateTokenizer()) <= BUDGET


async def test_anthropic_tool_use_input_keeps_its_keys() -> None:
    messages = await _messages(json.dumps({"q": "x " * 1500}), fmt="anthropic")
    [block] = [b for m in messages if isinstance(m["content"], list) for b in m["content"] if b["type"] == "tool_use"]
    assert set(block["input"]) == {"q"} and "cut by memkit" in block["input"]["q"]


def test_arguments_that_are_not_json_are_cut_as_text() -> None:
    tokenizer = EstimateTokenizer()
    cut = truncate_arguments("not json " * 500, 50, tokenizer)
    assert "cut by memkit" in cut and tokenizer.count(cut) <= 50


def test_a_structure_too_large_for_the_budget_becomes_one_marker() -> None:
    tokenizer = EstimateTokenizer()
    wide = json.dumps({f"key{i}": i for i in range(400)})
    cut = truncate_arguments(wide, 40, tokenizer)
    assert json.loads(cut) == {"memkit": json.loads(cut)["memkit"]} and tokenizer.count(cut) <= 40
