"""The MCP ``context`` tool end to end: the SDK's client over stdio, the server in a subprocess. The block
holds what the server's user has (memories, task state, lessons, graph) and never another user's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli._run import ok_json, sqlite_url
from tests.cli.test_mcp import call, error, stdio_session

pytest.importorskip("mcp")
pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_context_renders_every_layer_for_the_servers_user(tmp_path: Path) -> None:
    async with stdio_session(sqlite_url(tmp_path / "m.db"), "--user-id", "ada") as session:
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
        schema = listed["context"].input_schema
        assert schema["required"] == ["query"] and schema["properties"]["budget_tokens"]["type"] == "integer"
        assert listed["context"].annotations.read_only_hint and listed["context"].output_schema
        empty = await call(session, "context", query="What should I cook tonight?")
        assert empty["text"] == "" and empty["tokens"] == 0 and empty["memory_ids"] == []
        stored = await call(session, "remember", content="I am allergic to peanuts.", importance=0.9)
        await call(session, "working_set", task_id="dinner", key="guests", value=4)
        await call(session, "graph_upsert", source="Ada", relation="lives_in", target="Lisbon")
        await call(session, "record_episode", trigger="Cook dinner for guests", outcome="failure",
                   actions=[{"tool": "order_food", "ok": False, "error": "restaurant closed"}])  # fmt: skip
        block = await call(session, "context", query="Ada cooks dinner, peanuts or not?", task_id="dinner")
        assert "I am allergic to peanuts." in block["text"] and block["memory_ids"] == [stored["memory_id"]]
        assert set(block["sections"]) >= {"memories", "working", "lessons", "graph"}, block
        assert "guests" in block["sections"]["working"] and "Lisbon" in block["sections"]["graph"]
        assert "order_food" in block["sections"]["lessons"]
        assert all(part in block["text"] for part in block["sections"].values())
        assert 0 < block["tokens"] <= block["budget_tokens"] == 1000 and block["errors"] == {}
        small = await call(session, "context", query="peanuts", task_id="dinner", budget_tokens=16)
        assert small["tokens"] <= 16 and len(small["text"]) < len(block["text"])


async def test_context_bad_arguments_are_tool_errors(tmp_path: Path) -> None:
    async with stdio_session(sqlite_url(tmp_path / "m.db"), "--user-id", "ada") as session:
        assert "ContentError" in await error(session, "context", query="  ")
        assert "budget_tokens" in await error(session, "context", query="tea", budget_tokens=3)
        assert "query" in await error(session, "context")  # required by the schema
        assert "query" in await error(session, "context", query=7)
        assert (await call(session, "remember", content="still here"))["status"] == "stored"


async def test_context_never_holds_another_users_memories(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "m.db")
    ok_json("store", "Bob's door code is 4411.", "--user-id", "bob", "--url", url, "--embedder", "hashing")
    async with stdio_session(url, "--user-id", "ada") as session:
        await call(session, "remember", content="Ada's door code is 1234.")
        block = await call(session, "context", query="What is the door code?")
        assert "1234" in block["text"] and "4411" not in block["text"]
        text = await error(session, "context", query="What is the door code?", user_id="bob")
        assert "ScopeError" in text and "--allow-any-user" in text
        assert "4411" not in text
    async with stdio_session(url, "--user-id", "ada", "--allow-any-user") as session:
        trusted = await call(session, "context", query="What is the door code?", user_id="bob")
        assert "4411" in trusted["text"] and "1234" not in trusted["text"]
