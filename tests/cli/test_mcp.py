"""``memkit mcp`` end to end: the SDK's own client talking to the server in a subprocess, over stdio and
over streamable HTTP on loopback; every tool, bad arguments, and one user never reaching another's data."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.cli._run import COMMAND, ok_json, sqlite_url

pytest.importorskip("mcp")
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TOOLS = {"remember", "recall", "forget", "list_memories", "record_episode", "lessons", "working_set", "working_get",
         "checkpoint_save", "checkpoint_load", "graph_upsert", "graph_related", "context"}  # fmt: skip


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MEMKIT_")} | {"HF_HUB_OFFLINE": "1"}


@asynccontextmanager
async def stdio_session(url: str, *options: str) -> AsyncIterator[Any]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    args = [*COMMAND[1:], "mcp", "--url", url, "--embedder", "hashing", *options]
    params = StdioServerParameters(command=COMMAND[0], args=args, env=_env())
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@asynccontextmanager
async def mcp_session(transport: str, url: str, *options: str) -> AsyncIterator[Any]:
    """A client session with ``memkit mcp`` started with ``options``, over stdio or streamable HTTP."""
    if transport == "stdio":
        async with stdio_session(url, *options) as session:
            yield session
    else:
        with http_server(url, None, *options) as endpoint:
            async with http_session(endpoint, None) as session:
                yield session


TRANSPORTS = pytest.mark.parametrize("transport", ["stdio", "http"])


async def call(session: Any, tool: str, /, **arguments: Any) -> Any:
    """A tool call that must succeed: its structured result."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def error(session: Any, tool: str, /, **arguments: Any) -> str:
    """A tool call that must fail as a tool error (not a protocol error, not a dead server): its text."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    return str(result.content[0].text)


@TRANSPORTS
async def test_every_tool(tmp_path: Path, transport: str) -> None:
    async with mcp_session(transport, sqlite_url(tmp_path / "m.db"), "--user-id", "ada") as session:
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert set(listed) == TOOLS
        for tool in listed.values():
            assert tool.description and tool.input_schema["type"] == "object" and tool.output_schema, tool.name
        assert listed["forget"].annotations.destructive_hint and listed["recall"].annotations.read_only_hint
        stored = await call(session, "remember", content="I am allergic to peanuts.", importance=0.9)
        assert stored["status"] == "stored"
        await call(session, "remember", content="I prefer window seats.", kind="preference", metadata={"src": "chat"})
        hits = (await call(session, "recall", query="peanut allergy", k=3))["hits"]
        assert hits[0]["id"] == stored["memory_id"] and hits[0]["score"] > hits[-1]["score"]
        page = await call(session, "list_memories", kinds=["preference"])
        assert [m["content"] for m in page["memories"]] == ["I prefer window seats."]
        assert page["memories"][0]["metadata"] == {"src": "chat"}
        assert await call(session, "forget", memory_id=stored["memory_id"]) == {
            "memory_id": stored["memory_id"], "forgotten": True,
        }  # fmt: skip
        assert (await call(session, "forget", memory_id=stored["memory_id"]))["forgotten"] is False
        await _episodes_working_checkpoints(session)
        await _graph(session)


async def _graph(session: Any) -> None:
    edge = await call(session, "graph_upsert", source="Ada", relation="works_at", target="Acme",
                      source_type="person", target_type="company")  # fmt: skip
    assert (edge["source"], edge["relation"], edge["target"]) == ("Ada", "works_at", "Acme")
    await call(session, "graph_upsert", source="Acme", relation="located_in", target="Lisbon")
    found = await call(session, "graph_related", name="Ada", depth=2)
    assert found["root"] == "Ada" and {n["name"] for n in found["nodes"]} >= {"Ada", "Acme", "Lisbon"}
    assert {(e["source"], e["target"]) for e in found["edges"]} == {("Ada", "Acme"), ("Acme", "Lisbon")}
    assert "NotFoundError" in await error(session, "graph_related", name="Nobody")


async def _episodes_working_checkpoints(session: Any) -> None:
    episode = await call(session, "record_episode", trigger="Book a flight to Berlin for Friday", outcome="failure",
                         actions=[{"tool": "search_flights", "arguments": {"date": "2020-05-01"}, "ok": False,
                                   "error": "date in the past"}], feedback="The date was wrong.")  # fmt: skip
    assert episode["episode_id"]
    advice = (await call(session, "lessons", situation="Book a flight to Madrid on Monday"))["lessons"]
    assert "Avoid" in advice and "search_flights" in advice
    await call(session, "working_set", task_id="trip", key="goal", value={"city": "Lisbon", "nights": 3})
    await call(session, "working_set", task_id="trip", key="budget", value=600, importance=0.9)
    state = await call(session, "working_get", task_id="trip")
    assert [i["key"] for i in state["items"]] == ["budget", "goal"]  # most important first
    one = await call(session, "working_get", task_id="trip", key="goal")
    assert one["items"][0]["value"] == {"city": "Lisbon", "nights": 3}
    assert (await call(session, "working_get", task_id="trip", key="nope"))["items"] == []
    first = await call(session, "checkpoint_save", thread_id="t1", state={"turn": 1})
    second = await call(session, "checkpoint_save", thread_id="t1", state={"turn": 2}, metadata={"step": "b"})
    latest = await call(session, "checkpoint_load", thread_id="t1")
    assert latest["checkpoint_id"] == second["checkpoint_id"] and latest["state"] == {"turn": 2}
    older = await call(session, "checkpoint_load", thread_id="t1", checkpoint_id=first["checkpoint_id"])
    assert older["state"] == {"turn": 1}


@TRANSPORTS
async def test_bad_arguments_are_tool_errors_and_the_server_lives_on(tmp_path: Path, transport: str) -> None:
    async with mcp_session(transport, sqlite_url(tmp_path / "m.db"), "--user-id", "ada") as session:
        assert "ContentError: content is empty" in await error(session, "remember", content="  ")
        assert "importance" in await error(session, "remember", content="x", importance=3)
        assert "ValidationError" in await error(session, "recall", query="x", k=0)
        assert "query" in await error(session, "recall", query=5)  # the schema's type check
        assert "query" in await error(session, "recall")  # a required argument missing
        assert "outcome" in await error(session, "record_episode", trigger="x", outcome="meh")
        assert "NotFoundError: thread 't9' has no checkpoint" in await error(session, "checkpoint_load", thread_id="t9")
        assert "ttl_s" in await error(session, "working_set", task_id="t", key="k", value=1, ttl_s=-1)
        assert "cursor" in await error(session, "list_memories", cursor="not-a-cursor")
        unknown = await session.call_tool("no_such_tool", {})
        assert unknown.is_error
        assert (await call(session, "remember", content="still here"))["status"] == "stored"


@TRANSPORTS
async def test_a_client_cannot_read_another_users_memories(tmp_path: Path, transport: str) -> None:
    url = sqlite_url(tmp_path / "m.db")
    bob = ok_json("store", "Bob's door code is 4411.", "--user-id", "bob", "--url", url, "--embedder", "hashing")
    bob_id = bob["memory"]["id"]
    async with mcp_session(transport, url, "--user-id", "ada") as session:
        calls = [("recall", {"query": "door code"}), ("list_memories", {}), ("forget", {"memory_id": bob_id}),
                 ("remember", {"content": "x"}), ("working_get", {"task_id": "t"}),
                 ("checkpoint_load", {"thread_id": "t"}), ("graph_related", {"name": "Bob"}),
                 ("graph_upsert", {"source": "Bob", "relation": "knows", "target": "Ada"})]  # fmt: skip
        for name, arguments in calls:
            text = await error(session, name, **arguments, user_id="bob")
            assert "ScopeError" in text and "--allow-any-user" in text, name
        assert (await call(session, "recall", query="door code 4411"))["hits"] == []  # ada's scope: empty
        assert (await call(session, "forget", memory_id=bob_id))["forgotten"] is False
        assert (await call(session, "recall", query="door code", user_id="ada"))["hits"] == []  # own id: allowed
        with pytest.raises(Exception, match="ScopeError"):
            await session.read_resource("memkit://users/bob/memories")
        await call(session, "checkpoint_save", thread_id="t", state={"secret": 1})
    assert ok_json("get", bob_id, "--url", url)["content"] == "Bob's door code is 4411."  # untouched
    async with mcp_session(transport, url, "--user-id", "bob") as session:
        assert "ScopeError" in await error(session, "checkpoint_load", thread_id="t", user_id="ada")
        assert "no checkpoint" in await error(session, "checkpoint_load", thread_id="t")  # ada's thread is hers
    async with mcp_session(transport, url, "--user-id", "ada", "--allow-any-user") as session:
        hits = (await call(session, "recall", query="door code", user_id="bob"))["hits"]
        assert [h["id"] for h in hits] == [bob_id]


@TRANSPORTS
async def test_memories_and_checkpoints_as_resources(tmp_path: Path, transport: str) -> None:
    async with mcp_session(transport, sqlite_url(tmp_path / "m.db"), "--user-id", "ada") as session:
        await call(session, "remember", content="I like tea.")
        await call(session, "checkpoint_save", thread_id="chat-1", state={"turn": 1})
        listed = [str(r.uri) for r in (await session.list_resources()).resources]
        assert listed == ["memkit://users/ada/memories"]
        templates = {t.uri_template for t in (await session.list_resource_templates()).resource_templates}
        assert templates == {"memkit://users/{user_id}/memories",
                             "memkit://users/{user_id}/threads/{thread_id}/checkpoints"}  # fmt: skip
        memories = json.loads((await session.read_resource("memkit://users/ada/memories")).contents[0].text)
        assert [m["content"] for m in memories["memories"]] == ["I like tea."]
        uri = "memkit://users/ada/threads/chat-1/checkpoints"
        checkpoints = json.loads((await session.read_resource(uri)).contents[0].text)["checkpoints"]
        assert len(checkpoints) == 1 and checkpoints[0]["size_bytes"] > 0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def http_server(url: str, token: str | None, *options: str) -> Iterator[str]:
    port = _free_port()
    env = _env() | ({"MEMKIT_MCP_TOKEN": token} if token else {})
    process = subprocess.Popen([*COMMAND, "mcp", "--url", url, "--embedder", "hashing", "--transport", "http",
                                "--port", str(port), *options], env=env, stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=30)


@asynccontextmanager
async def http_session(endpoint: str, token: str | None) -> AsyncIterator[Any]:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as client,
        streamable_http_client(endpoint, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def test_streamable_http_on_loopback_with_a_bearer_token(tmp_path: Path) -> None:
    import httpx

    with http_server(sqlite_url(tmp_path / "m.db"), "s3cret", "--user-id", "ada") as endpoint:
        async with http_session(endpoint, "s3cret") as session:
            assert {t.name for t in (await session.list_tools()).tools} == TOOLS
            stored = await call(session, "remember", content="I like tea.")
            assert (await call(session, "recall", query="tea"))["hits"][0]["id"] == stored["memory_id"]
            assert "ScopeError" in await error(session, "recall", query="tea", user_id="bob")
            assert "ContentError" in await error(session, "remember", content="")
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        async with httpx.AsyncClient() as plain:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
                answer = await plain.post(endpoint, json=message, headers=headers)
                assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer"


async def test_streamable_http_without_a_token_on_loopback(tmp_path: Path) -> None:
    with http_server(sqlite_url(tmp_path / "m.db"), None, "--user-id", "ada") as endpoint:
        async with http_session(endpoint, None) as session:
            assert (await call(session, "remember", content="I like jazz."))["status"] == "stored"


def test_http_beyond_loopback_needs_a_token(tmp_path: Path) -> None:
    result = subprocess.run([*COMMAND, "mcp", "--transport", "http", "--host", "0.0.0.0", "--url",
                             sqlite_url(tmp_path / "m.db")], capture_output=True, text=True, timeout=60,
                            env=_env(), check=False)  # fmt: skip
    assert result.returncode == 2 and "MEMKIT_MCP_TOKEN" in result.stderr


def test_a_port_in_use_is_a_two_line_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = subprocess.run([*COMMAND, "mcp", "--transport", "http", "--port", port, "--embedder", "hashing",
                                 "--url", sqlite_url(tmp_path / "m.db")], capture_output=True, text=True, timeout=60,
                                env=_env(), check=False)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"memkit mcp: error: cannot listen on 127.0.0.1:{port}: Address already in use",
        "  choose another --port, or stop what listens there",
    ]  # nothing said about serving, no traceback
    assert not (tmp_path / "m.db").exists()  # the port is bound before a store is made


def test_import_memkit_does_not_load_mcp() -> None:
    code = "import sys, memkit, memkit.cli; assert 'mcp' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_mcp_benchmark_writes_its_figures(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "mcp.json", tmp_path / "mcp.png"
    command = [sys.executable, "-m", "benchmarks.mcp", "--n", "200", "--calls", "20", "--json", str(out), "--plot",
               str(png)]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=600, env=_env())
    figures = json.loads(out.read_text())
    assert figures["n"] == 200 and figures["mcp_recall_p50_ms"] > 0 and figures["inprocess_recall_p50_ms"] > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
