"""The tool-call cache: never call the same tool with the same arguments twice while the result is fresh.

A result is one entry of the backend's key-value face, under a key made of the namespace, the tool, its
version and the canonical arguments (``_keys``), with the store's own TTL. Concurrent identical calls run
the tool once:

- in one process, the first caller runs it and the others wait for its outcome (result or exception);
- across workers sharing a backend, the first to create the call's *lease* (create-if-absent
  compare-and-set with a TTL) runs it, renewing the lease while it runs; the others poll for the result.
  A worker that dies holding a lease holds nobody up for longer than ``lease_s``: the lease expires, and
  a waiting worker takes it.

Errors are not cached unless ``cache_errors`` is on (then with their own TTL, and a cached failure is
raised as ``CachedToolError``). Each namespace holds at most about ``max_entries``: every tenth of that
many writes, the oldest entries beyond it are deleted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import msgspec

from memkit._background import BackgroundTask
from memkit._time import new_id
from memkit._validation import MAX_ID_CHARS, check_text
from memkit.backend import Backend
from memkit.errors import CachedToolError, ValidationError
from memkit.layers.toolcache._config import CacheStats, ToolCacheConfig, ToolStats
from memkit.layers.toolcache._keys import canonical_arguments, entry_key, namespace_prefix, tool_prefix

__all__ = ["ToolCache"]

log = logging.getLogger("memkit")
T = TypeVar("T")
ENTRIES = "memkit.tool_cache"
LEASES = "memkit.tool_leases"
_MISS: Any = object()


class _Entry(msgspec.Struct, array_like=True, gc=False):
    value: msgspec.Raw
    stored_at: float
    took_s: float
    """How long the call that produced it took: what each hit saves."""
    error_type: str | None = None
    error_message: str | None = None


_encode = msgspec.msgpack.Encoder().encode
_decode_entry = msgspec.msgpack.Decoder(_Entry).decode


class _Flight:
    """One call in progress in this process; identical calls wait for its outcome."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class ToolCache:
    """``await mem.tool_cache.call("weather", {"city": "Oslo"}, fetch)``, or ``@mem.tool_cache.cached()``."""

    name = "tool_cache"
    needs = frozenset({"kv"})

    def __init__(self, backend: Backend, config: ToolCacheConfig | None = None) -> None:
        if config is not None and not isinstance(config, ToolCacheConfig):
            raise ValidationError(f"tool_cache must be a ToolCacheConfig or None, got {type(config).__name__}")
        self.backend = backend
        self.config = config or ToolCacheConfig()
        self._flights: dict[str, _Flight] = {}
        self._writes: dict[str, int] = {}
        self._stats: dict[str, ToolStats] = {}
        self._warned: set[str] = set()

    async def setup(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    # -- calling ---------------------------------------------------------------------------------------
    async def call(
        self,
        tool: str,
        arguments: object,
        run: Callable[[], Awaitable[T]],
        *,
        version: str = "",
        ttl_s: float | None = None,
        namespace: str = "default",
        type: Any = Any,
    ) -> T:
        """``run()``'s result for this tool and these arguments: from the cache when fresh, else by running it
        (once, however many callers ask at the same time). ``type`` decodes a cached result (default: builtins)."""
        key = self._key(tool, arguments, version, namespace)
        ttl = self._ttl(tool, ttl_s)
        stats = self._stats.setdefault(tool, ToolStats())
        found = await self._lookup(key, tool, type, stats)
        if found is not _MISS:
            return found  # type: ignore[no-any-return]
        flight = self._flights.get(key)
        if flight is not None:  # the same call is running in this process: its outcome is ours
            await flight.done.wait()
            stats.joined += 1
            if flight.error is not None:
                raise flight.error
            return flight.result  # type: ignore[no-any-return]
        flight = self._flights[key] = _Flight()
        try:
            flight.result = await self._run_once(key, tool, run, ttl=ttl, as_type=type, stats=stats)
            return flight.result  # type: ignore[no-any-return]
        except BaseException as exc:
            flight.error = exc
            raise
        finally:
            del self._flights[key]
            flight.done.set()

    def _key(self, tool: str, arguments: object, version: str, namespace: str) -> str:
        check_text(tool, "tool", MAX_ID_CHARS)
        check_text(namespace, "namespace", MAX_ID_CHARS)
        if not isinstance(version, str):
            raise ValidationError(f"version must be a string, got {version!r}")
        return entry_key(namespace, tool, version, canonical_arguments(tool, arguments))

    def _ttl(self, tool: str, ttl_s: float | None) -> float:
        ttl = ttl_s if ttl_s is not None else self.config.ttls.get(tool, self.config.default_ttl_s)
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl < 1e10:
            raise ValidationError(f"ttl_s must be a positive number of seconds, got {ttl!r}")
        return float(ttl)

    async def _lookup(self, key: str, tool: str, as_type: Any, stats: ToolStats) -> Any:
        raw = await self.backend.kv_get(ENTRIES, key)
        if raw is None:
            return _MISS
        try:
            entry = _decode_entry(raw)
            value = None if entry.error_type else msgspec.msgpack.decode(entry.value, type=as_type)
        except msgspec.DecodeError as exc:  # a changed return type, or bytes damaged outside memkit
            log.warning("memkit: cached result of %r unreadable (%s); calling the tool again", tool, exc)
            return _MISS
        stats.hits += 1
        stats.saved_s += entry.took_s
        if entry.error_type:
            raise CachedToolError(
                f"tool {tool!r} failed with these arguments {time.time() - entry.stored_at:.0f} s ago and the failure "
                f"is cached: {entry.error_type}: {entry.error_message}",
                tool=tool, error_type=entry.error_type, error_message=entry.error_message or "",
            )  # fmt: skip
        return value

    async def _run_once(
        self, key: str, tool: str, run: Callable[[], Awaitable[T]], *, ttl: float, as_type: Any, stats: ToolStats
    ) -> T:
        """Run the tool under the call's lease, or wait for the worker that holds it."""
        config = self.config
        while True:
            token = new_id().encode()
            if await self.backend.kv_replace(LEASES, key, token, expected=None, ttl_s=config.lease_s):
                return await self._run_leased(key, tool, run, ttl=ttl, token=token, stats=stats)
            await anyio.sleep(config.poll_s)  # another worker runs it: its result, or its lease expiring
            found = await self._lookup(key, tool, as_type, stats)
            if found is not _MISS:
                stats.hits -= 1  # counted as a wait for another worker's call, not as a hit
                stats.joined += 1
                return found  # type: ignore[no-any-return]

    async def _run_leased(
        self, key: str, tool: str, run: Callable[[], Awaitable[T]], *, ttl: float, token: bytes, stats: ToolStats
    ) -> T:
        stats.misses += 1
        started = time.perf_counter()
        # The renewal runs beside the tool, not in a task group: the tool's own exception must reach the
        # caller as itself, not wrapped in an ExceptionGroup.
        renewal = BackgroundTask.start(lambda: self._renew(key, token))
        try:
            try:
                result = await run()
            finally:
                with anyio.CancelScope(shield=True):
                    await renewal.stop()
        except Exception as exc:
            stats.errors += 1
            if self.config.cache_errors:
                took = time.perf_counter() - started
                entry = _Entry(msgspec.Raw(b"\xc0"), time.time(), took, type(exc).__name__, str(exc))
                await self._store(key, _encode(entry), self.config.error_ttl_s)
            raise
        else:  # stored before the lease goes, so a waiting worker finds the result, not a free lease
            await self._store_result(key, tool, result, ttl, time.perf_counter() - started)
            return result
        finally:
            with anyio.CancelScope(shield=True):
                await self._release(key, token)

    async def _renew(self, key: str, token: bytes) -> None:
        """Keep the lease while the tool runs (a long call must not look like a dead worker)."""
        lease = self.config.lease_s
        while True:
            await anyio.sleep(lease / 3)
            await self.backend.kv_set(LEASES, key, token, lease)

    async def _release(self, key: str, token: bytes) -> None:
        if await self.backend.kv_get(LEASES, key) == token:  # not another worker's, taken after ours expired
            await self.backend.kv_delete(LEASES, key)

    async def _store_result(self, key: str, tool: str, result: object, ttl: float, took_s: float) -> None:
        try:
            value = _encode(result)
        except (TypeError, msgspec.EncodeError, OverflowError, RecursionError) as exc:
            if tool not in self._warned:  # the caller still gets the result; it is just not cached
                self._warned.add(tool)
                log.warning("memkit: results of tool %r are not cached: msgspec cannot encode them (%s)", tool, exc)
            return
        await self._store(key, _encode(_Entry(msgspec.Raw(value), time.time(), took_s)), ttl)

    async def _store(self, key: str, entry: bytes, ttl: float) -> None:
        await self.backend.kv_set(ENTRIES, key, entry, ttl)
        namespace = key[: key.index("|") + 1]
        self._writes[namespace] = self._writes.get(namespace, 0) + 1
        if self._writes[namespace] >= max(self.config.max_entries // 10, 1):
            self._writes[namespace] = 0
            await self._trim(namespace)

    async def _trim(self, prefix: str) -> None:
        """Delete the oldest entries of the namespace beyond ``max_entries``."""
        stamps: list[tuple[float, str]] = []
        cursor: str | None = None
        while True:
            page = await self.backend.kv_scan(ENTRIES, prefix=prefix, limit=1000, cursor=cursor)
            for key, raw in page.items:
                try:
                    stamps.append((_decode_entry(raw).stored_at, key))
                except msgspec.DecodeError:
                    stamps.append((0.0, key))  # unreadable: the first to go
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        stamps.sort()
        for _, key in stamps[: max(len(stamps) - self.config.max_entries, 0)]:
            await self.backend.kv_delete(ENTRIES, key)

    # -- invalidating and counting ----------------------------------------------------------------------
    async def invalidate(
        self, tool: str, arguments: object = _MISS, *, version: str = "", namespace: str = "default"
    ) -> int:
        """Forget one call's result (with ``arguments``), or every result of ``tool`` (all versions)."""
        if arguments is _MISS:
            check_text(tool, "tool", MAX_ID_CHARS)
            return await self.backend.kv_delete_prefix(ENTRIES, tool_prefix(namespace, tool))
        return int(await self.backend.kv_delete(ENTRIES, self._key(tool, arguments, version, namespace)))

    async def clear(self, namespace: str | None = None) -> int:
        """Forget every cached result (of one namespace, or all)."""
        prefix = "" if namespace is None else namespace_prefix(check_text(namespace, "namespace", MAX_ID_CHARS))
        return await self.backend.kv_delete_prefix(ENTRIES, prefix)

    @property
    def stats(self) -> CacheStats:
        """This process's counters: hits, misses, calls saved and the time they would have taken, per tool."""
        return CacheStats.of(self._stats)

    def cached(
        self, tool: str | None = None, **options: Any
    ) -> Callable[[Callable[..., Awaitable[T]]], Callable[..., Awaitable[T]]]:
        """Decorate an async tool function: ``@mem.tool_cache.cached(ttl_s=600, version="2")``."""
        from memkit.layers.toolcache._decorator import cache_function

        return lambda fn: cache_function(self, fn, tool, options)

    def mcp(self, session: Any, **options: Any) -> Any:
        """An MCP ``ClientSession`` whose ``call_tool`` is cached (``memkit.layers.toolcache.CachedMCPSession``)."""
        from memkit.layers.toolcache._mcp import CachedMCPSession

        return CachedMCPSession(session, self, **options)
