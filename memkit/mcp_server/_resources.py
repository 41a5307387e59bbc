"""MCP resources: a user's memories and a thread's checkpoints, as JSON, under the same scoping rule.

    memkit://users/{user_id}/memories                          the newest 100 memories
    memkit://users/{user_id}/threads/{thread_id}/checkpoints   the thread's checkpoints, newest first

The server's own user's memories are also listed as a plain resource, so a client that only lists
resources finds them.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import msgspec

from memkit.errors import MemkitError
from memkit.mcp_server._registry import App, error_text, served

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

__all__ = ["add_resources"]

_NEWEST = 100


async def _memories(app: App, user_id: str) -> str:
    page = await app.mem.long_term.list(user_id=app.scoping.user(user_id), limit=_NEWEST, newest_first=True)
    return json.dumps({"user_id": user_id, "memories": msgspec.to_builtins(page.memories),
                       "more": page.next_cursor is not None})  # fmt: skip


async def _checkpoints(app: App, user_id: str, thread_id: str) -> str:
    listed = await app.mem.checkpoints.list(thread_id, user_id=app.scoping.user(user_id))
    return json.dumps({"user_id": user_id, "thread_id": thread_id, "checkpoints": msgspec.to_builtins(listed)})


def _guarded(read: Any) -> Any:
    """Memkit's errors as resource errors with memkit's message (anything else: the SDK's generic one)."""
    from mcp.server.mcpserver.exceptions import ResourceError

    async def guarded(*args: Any) -> str:
        try:
            return str(await read(*args))
        except MemkitError as exc:
            raise ResourceError(error_text(exc)) from exc

    return guarded


def add_resources(server: MCPServer[Any], app: App) -> None:
    json_type = "application/json"
    if served(app.mem, "long_term"):
        memories = _guarded(_memories)

        @server.resource("memkit://users/{user_id}/memories", name="memories", mime_type=json_type,
                         description="A user's newest memories (JSON).")  # fmt: skip
        async def user_memories(user_id: str) -> str:
            return str(await memories(app, user_id))

        own = app.scoping.user_id

        @server.resource(f"memkit://users/{quote(own, safe='')}/memories", name=f"memories of {own}",
                         mime_type=json_type, description="The server's user's newest memories (JSON).")  # fmt: skip
        async def own_memories() -> str:
            return str(await memories(app, own))

    if served(app.mem, "checkpoints"):
        checkpoints = _guarded(_checkpoints)

        @server.resource("memkit://users/{user_id}/threads/{thread_id}/checkpoints", name="checkpoints",
                         mime_type=json_type, description="A thread's checkpoints, newest first (JSON).")  # fmt: skip
        async def thread_checkpoints(user_id: str, thread_id: str) -> str:
            return str(await checkpoints(app, user_id, thread_id))
