"""The tool cache around a real MCP client session, talking over stdio to a real MCP server (a subprocess)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from memkit import Memkit

pytestmark = pytest.mark.anyio
SERVER = Path(__file__).with_name("mcp_counter_server.py")


async def test_an_mcp_session_gets_caching_in_one_line(tmp_path: Path) -> None:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    calls = tmp_path / "calls.log"
    calls.touch()
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER), str(calls)])
    async with Memkit(f"sqlite:///{tmp_path / 'cache.db'}", embedder="hashing") as mem:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            tools = mem.tool_cache.mcp(session, ttl_s=600)  # the one line
            first = await tools.call_tool("add", {"a": 2, "b": 3})
            again = await tools.call_tool("add", {"b": 3, "a": 2})
            other = await tools.call_tool("add", {"a": 2, "b": 4})
            assert type(first).__name__ == "CallToolResult" and first == again
            assert first.structured_content == {"result": 5} and other.structured_content == {"result": 6}
            failed = [await tools.call_tool("flaky", {"reason": "disk"}) for _ in range(2)]
            assert all(f.is_error for f in failed)  # an error result is passed back, never cached
            assert (await tools.list_tools()).tools  # everything else is the session's own
        assert calls.read_text().split() == ["add", "add", "flaky", "flaky"]
        assert mem.tool_cache.stats.by_tool["add"].hits == 1
