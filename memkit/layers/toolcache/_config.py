"""The tool cache's settings and counters."""

from __future__ import annotations

import math

import msgspec

from memkit._repr import short_repr
from memkit.errors import ConfigurationError

__all__ = ["CacheStats", "ToolCacheConfig", "ToolStats"]


class ToolCacheConfig(msgspec.Struct, frozen=True, kw_only=True):
    default_ttl_s: float = 3600.0
    """How long a result stays fresh unless its tool has its own TTL (``ttls``) or the call gives one."""
    ttls: dict[str, float] = msgspec.field(default_factory=dict)
    """Per-tool TTLs in seconds: ``{"weather": 600, "search": 86_400}``."""
    cache_errors: bool = False
    """Also cache failures (negative caching): a repeated failing call raises ``CachedToolError`` at once."""
    error_ttl_s: float = 60.0
    max_entries: int = 10_000
    """About how many results one namespace keeps (the oldest go first)."""
    lease_s: float = 30.0
    """How long a worker's claim on a running call lasts without renewal (it renews every third of it): a
    worker that dies mid-call holds the others up for at most this long."""
    poll_s: float = 0.05
    """How often a worker waiting for another worker's call looks for its result."""

    def __post_init__(self) -> None:
        # A dict of tool name -> seconds, checked first: ttls=None raised AttributeError on .items() below.
        if not isinstance(self.ttls, dict) or not all(isinstance(k, str) for k in self.ttls):
            raise ConfigurationError(
                f"ToolCacheConfig.ttls must be a dict of tool name -> seconds, got {short_repr(self.ttls)}"
            )
        seconds = {"default_ttl_s": self.default_ttl_s, "error_ttl_s": self.error_ttl_s, "lease_s": self.lease_s,
                   "poll_s": self.poll_s, **{f"ttls[{short_repr(k)}]": v for k, v in self.ttls.items()}}  # fmt: skip
        for name, value in seconds.items():
            good = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not good or not math.isfinite(value) or not 0 < value < 1e10:
                raise ConfigurationError(
                    f"ToolCacheConfig.{name} must be a positive number of seconds, got {short_repr(value)}"
                )
        if isinstance(self.max_entries, bool) or not isinstance(self.max_entries, int) or self.max_entries < 1:
            raise ConfigurationError(
                f"ToolCacheConfig.max_entries must be a positive integer, got {short_repr(self.max_entries)}"
            )
        if not isinstance(self.cache_errors, bool):
            raise ConfigurationError(
                f"ToolCacheConfig.cache_errors must be True or False, got {short_repr(self.cache_errors)}"
            )


class ToolStats(msgspec.Struct, kw_only=True):
    hits: int = 0
    misses: int = 0
    """Calls that ran the tool."""
    joined: int = 0
    """Calls that waited for the same call already running (in this process or another worker)."""
    errors: int = 0
    saved_s: float = 0.0
    """What the hits would have taken, by the time the original calls took."""

    @property
    def saved_calls(self) -> int:
        return self.hits + self.joined


class CacheStats(msgspec.Struct, frozen=True, kw_only=True):
    hits: int
    misses: int
    joined: int
    errors: int
    saved_calls: int
    saved_s: float
    by_tool: dict[str, ToolStats]

    @classmethod
    def of(cls, tools: dict[str, ToolStats]) -> CacheStats:
        copies = {name: msgspec.structs.replace(s) for name, s in tools.items()}
        total = sum
        return cls(
            hits=total(s.hits for s in copies.values()), misses=total(s.misses for s in copies.values()),
            joined=total(s.joined for s in copies.values()), errors=total(s.errors for s in copies.values()),
            saved_calls=total(s.saved_calls for s in copies.values()),
            saved_s=total(s.saved_s for s in copies.values()),
            by_tool=copies,
        )  # fmt: skip
