"""The tool-call cache: the same tool with the same arguments runs once while its result is fresh."""

from memkit.layers.toolcache._cache import ToolCache
from memkit.layers.toolcache._config import CacheStats, ToolCacheConfig, ToolStats
from memkit.layers.toolcache._keys import canonical_arguments
from memkit.layers.toolcache._mcp import CachedMCPSession

__all__ = ["CacheStats", "CachedMCPSession", "ToolCache", "ToolCacheConfig", "ToolStats", "canonical_arguments"]
