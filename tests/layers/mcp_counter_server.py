"""A real MCP server over stdio for the tool-cache tests: each tool call appends a line to the file named by
its first argument, so the test can count the calls that reached the server."""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("memkit-test-counter")


def _record(tool: str) -> None:
    with open(sys.argv[1], "a") as log:
        log.write(tool + "\n")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    _record("add")
    return a + b


@server.tool()
def flaky(reason: str) -> str:
    """Always fails (the server turns the exception into an is_error result)."""
    _record("flaky")
    raise ValueError(f"flaky failed: {reason}")


if __name__ == "__main__":
    server.run()
