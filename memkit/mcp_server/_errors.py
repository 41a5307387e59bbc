"""The MCP server's own error: what ``serve`` raises before serving (the tools' errors are MCP tool errors)."""

from __future__ import annotations

__all__ = ["ListenError"]


class ListenError(OSError):
    """The HTTP port could not be bound: in use, not allowed, or an address this machine does not have."""

    def __str__(self) -> str:  # the message alone, not OSError's "[Errno 98] ..."
        return str(self.strerror)
