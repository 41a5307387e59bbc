"""The MCP server's tool registry and scoping rule, in process: what every client is shown."""

from __future__ import annotations

import pytest

from memkit import Memkit, ScopeError

pytest.importorskip("mcp")
pytestmark = pytest.mark.anyio


async def test_every_tool_describes_each_parameter_and_its_result() -> None:
    from memkit.mcp_server import Scoping, build_server

    async with Memkit("memory://", embedder="hashing") as mem:
        tools = await build_server(mem, Scoping("ada")).list_tools()
    assert len(tools) == 13
    for tool in tools:
        assert tool.description and len(tool.description) > 40, tool.name
        assert tool.output_schema is not None, tool.name
        for name, schema in tool.input_schema["properties"].items():
            assert schema.get("description"), f"{tool.name}.{name}"
        assert "user_id" in tool.input_schema["properties"] and "user_id" not in tool.input_schema.get("required", [])
        assert "app" not in tool.input_schema["properties"]


@pytest.mark.slow  # starts a Redis server
async def test_a_layer_the_backend_cannot_serve_has_no_tools(redis_plain_url: str) -> None:
    from memkit.mcp_server import Scoping, build_server

    # Plain Redis has a key-value face only: the layers that need records (and their tools) are absent.
    async with Memkit(redis_plain_url, embedder="hashing") as mem:
        names = {tool.name for tool in await build_server(mem, Scoping("ada")).list_tools()}
    assert names == {"working_set", "working_get", "checkpoint_save", "checkpoint_load"}


def test_the_scoping_rule() -> None:
    from memkit.mcp_server import Scoping

    locked = Scoping("ada")
    assert locked.user(None) == "ada" and locked.user("ada") == "ada"
    with pytest.raises(ScopeError, match="acts for user 'ada' only"):
        locked.user("bob")
    trusting = Scoping("ada", allow_any_user=True)
    assert trusting.user("bob") == "bob" and trusting.user(None) == "ada"


def test_the_server_user_comes_from_the_option_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from memkit.mcp_server import Scoping

    monkeypatch.setenv("MEMKIT_USER_ID", "env-user")
    assert Scoping.from_options("ada", False).user_id == "ada"
    assert Scoping.from_options(None, False).user_id == "env-user"
    monkeypatch.delenv("MEMKIT_USER_ID")
    assert Scoping.from_options(None, False).user_id == "default"
    for empty in ("", "  "):  # an empty --user-id is a mistake: never the default user's memories
        with pytest.raises(ScopeError, match="--user-id"):
            Scoping.from_options(empty, False)
