"""An MCP client session whose tool calls go through the cache: ``mem.tool_cache.mcp(session)``.

Wraps the official ``mcp`` SDK's ``ClientSession`` (any object with its ``call_tool``): every other method
and attribute is the session's own. A result the server marks as an error (``is_error``) is not cached; nor
is a call with a progress callback or other per-call options (those are not the same call twice).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memkit.layers.toolcache._cache import ToolCache

__all__ = ["CachedMCPSession"]


class _ToolFailed(Exception):
    """An ``is_error`` result: passed back to the caller as it is, never cached."""

    def __init__(self, result: Any) -> None:
        self.result = result


class CachedMCPSession:
    def __init__(
        self,
        session: Any,
        cache: ToolCache,
        *,
        namespace: str = "mcp",
        version: str = "",
        ttl_s: float | None = None,
        tools: Collection[str] | None = None,
    ) -> None:
        """``tools``: only these are cached (default: all). ``version`` separates servers whose tools share names."""
        self.session = session
        self._cache = cache
        self._namespace, self._version, self._ttl_s = namespace, version, ttl_s
        self._tools = None if tools is None else frozenset(tools)

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None, *args: Any, **kwargs: Any) -> Any:
        if args or any(v is not None for v in kwargs.values()) or (self._tools is not None and name not in self._tools):
            return await self.session.call_tool(name, arguments, *args, **kwargs)
        from mcp.types import CallToolResult

        async def run() -> Any:
            result = await self.session.call_tool(name, arguments)
            if not isinstance(result, CallToolResult):
                raise _ToolFailed(result)  # input-required and other non-final results are not cacheable
            if result.is_error:
                raise _ToolFailed(result)
            return result.model_dump(mode="json")

        try:
            data = await self._cache.call(name, arguments or {}, run, version=self._version, ttl_s=self._ttl_s,
                                          namespace=self._namespace)  # fmt: skip
        except _ToolFailed as failed:
            return failed.result
        return CallToolResult.model_validate(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)
