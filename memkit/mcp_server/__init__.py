"""memkit as an MCP server (the official ``mcp`` SDK): memory tools and resources over one storage URL.

    memkit mcp --url sqlite:///memories.db                       # stdio, for Claude Desktop and the like
    memkit mcp --url ... --transport http --port 8765            # streamable HTTP on 127.0.0.1

Only this package imports ``mcp`` (``pip install 'memkit-sdk[mcp]'``); ``import memkit`` never does.
Tools and their registry are in ``_tools.py`` (``context`` in ``_context_tool.py``) and ``_registry.py``,
the scoping rule in ``_scoping.py``.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from memkit.mcp_server._errors import ListenError
from memkit.mcp_server._http import listen
from memkit.mcp_server._registry import REGISTRY, App, bind, served
from memkit.mcp_server._scoping import Scoping

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from memkit._client import Memkit

__all__ = ["App", "ListenError", "Scoping", "build_server", "listen", "serve"]

log = logging.getLogger("memkit")


def _instructions(scoping: Scoping) -> str:
    who = (f"Calls act for user {scoping.user_id!r} unless they name another in user_id."
           if scoping.allow_any_user else f"Every call acts for user {scoping.user_id!r}.")  # fmt: skip
    return ("Long-term memory for this user: remember facts and preferences worth keeping, recall them before "
            "answering (or call context for one block of everything relevant), forget what the user asks to "
            "forget. Episodes record finished tasks; lessons gives advice from them. The knowledge graph holds "
            f"entities and how they relate. Working state and checkpoints hold a task's progress. {who}")  # fmt: skip


def build_server(mem: Memkit, scoping: Scoping) -> MCPServer[Any]:
    """An MCP server over an open client: the tools of every layer its backend serves, and the resources."""
    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations

    import memkit.mcp_server._context_tool  # (registers the context tool)
    import memkit.mcp_server._tools  # noqa: F401  (registers the tools)
    from memkit import __version__
    from memkit.mcp_server._resources import add_resources

    server: MCPServer[Any] = MCPServer("memkit", version=__version__, instructions=_instructions(scoping),
                                       log_level="WARNING")  # fmt: skip
    app = App(mem, scoping)
    for spec in REGISTRY:
        if not served(mem, spec.layer):
            continue
        hints = ToolAnnotations(title=spec.title, read_only_hint=spec.read_only, destructive_hint=spec.destructive,
                                idempotent_hint=spec.idempotent, open_world_hint=False)  # fmt: skip
        server.add_tool(bind(spec, app), name=spec.name, title=spec.title, annotations=hints)
    add_resources(server, app)
    return server


async def _warm_up(mem: Memkit) -> None:
    """Load the embedding model now rather than in the first recall (seconds for the local model)."""
    try:
        await mem.embedder.embed(["warm up"])
    except Exception as exc:  # the tools will report it where it matters
        log.warning("memkit mcp: the embedder could not be loaded: %s", exc)


async def serve(mem: Memkit, scoping: Scoping, *, transport: str = "stdio", host: str = "127.0.0.1",
                port: int = 8765, token: str | None = None, listener: socket.socket | None = None,
                on_listening: Callable[[], None] | None = None) -> None:  # fmt: skip
    """Serve ``mem`` until the client goes (stdio) or the process is stopped (HTTP). Over HTTP the port is
    bound first (or ``listener``, bound by the caller with ``listen``, is used and closed): a port in use (or
    not allowed) raises ``ListenError`` before anything runs, and ``on_listening`` is called once clients can
    connect."""
    server = build_server(mem, scoping)
    if transport != "stdio" and listener is None:
        listener = listen(host, port)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_warm_up, mem)
            if listener is None:
                await server.run_stdio_async()
            else:
                from memkit.mcp_server._http import serve_http

                if on_listening is not None:
                    on_listening()
                await serve_http(server, listener, host=host, token=token)
            group.cancel_scope.cancel()
    finally:
        if listener is not None:
            listener.close()
