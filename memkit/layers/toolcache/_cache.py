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

import builtins
import copy
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import msgspec

from memkit._background import BackgroundTask
from memkit._repr import short_repr
from memkit._time import new_id
from memkit._validation import MAX_ID_CHARS, check_decode_type, check_text
from memkit.backend import Backend
from memkit.errors import BackendError, CachedToolError, NotOpenError, ValidationError
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
_ENCODE_ERRORS = (TypeError, ValueError, OverflowError, RecursionError, UnicodeEncodeError, msgspec.EncodeError)
_decode_entry = msgspec.msgpack.Decoder(_Entry).decode


class _Flight:
    """One call in progress in this process; identical calls wait for its outcome."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.took_s = 0.0


def _copied(error: Exception) -> Exception:
    """The leader's exception for one waiter: a copy, so that raising it in many tasks does not grow one
    traceback with every raise (the original stays its cause)."""
    try:
        twin = copy.copy(error)
    except Exception:
        return error
    twin.__cause__ = error
    return twin


class _Lease:
    """A worker's claim on a running call. Each renewal stores a new value (the contract lets a replace that
    changes nothing skip the write, and with it the new TTL)."""

    def __init__(self, backend: Backend, key: str, lease_s: float) -> None:
        self.backend, self.key, self.lease_s = backend, key, lease_s
        self._base = new_id()
        self._renewals = 0
        self.value = self._next()

    def _next(self) -> bytes:
        self._renewals += 1
        return f"{self._base}:{self._renewals}".encode()

    async def take(self) -> bool:
        try:
            return await self.backend.kv_replace(LEASES, self.key, self.value, expected=None, ttl_s=self.lease_s)
        except BaseException:
            # Cancelled or failed after the store may have taken it: give it back, or the next caller waits
            # out the whole lease.
            with anyio.CancelScope(shield=True):
                await self.release()
            raise

    async def keep(self) -> None:
        """Renew every third of the lease while the tool runs; stop if another worker took it meanwhile."""
        while True:
            await anyio.sleep(self.lease_s / 3)
            renewed = self._next()
            try:
                if not await self.backend.kv_replace(
                    LEASES, self.key, renewed, expected=self.value, ttl_s=self.lease_s
                ):
                    log.warning("memkit: the lease of a running tool call was lost; another worker may run it too")
                    return
            except (BackendError, NotOpenError) as exc:  # try again at the next renewal (closed: it expires)
                log.warning("memkit: renewing a tool call's lease failed: %s", exc)
                continue
            self.value = renewed

    async def release(self) -> None:
        try:
            if await self.backend.kv_get(LEASES, self.key) == self.value:  # not a lease taken after ours expired
                await self.backend.kv_delete(LEASES, self.key)
        except (BackendError, NotOpenError) as exc:  # it expires on its own
            log.warning("memkit: releasing a tool call's lease failed (it expires by itself): %s", exc)


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
        (once, however many callers ask at the same time). ``run`` is an async function (or returns an
        awaitable); a plain function's return value is taken as is (it runs on the event loop: keep it quick,
        or pass ``lambda: anyio.to_thread.run_sync(fn)``). ``type`` decodes a cached result (default: builtins)."""
        key = self._key(tool, arguments, version, namespace)
        ttl = self._ttl(tool, ttl_s)
        # Checked before the lookup: type=5 ran the tool and cached its result, then failed every later call.
        check_decode_type(type)
        if not callable(run):
            raise ValidationError(
                f"run must be an async function taking no arguments, got {builtins.type(run).__name__}"
            )
        stats = self._stats.setdefault(tool, ToolStats())
        while True:
            found = await self._lookup(key, tool, type)
            if found is not _MISS:
                return found  # type: ignore[no-any-return]
            flight = self._flights.get(key)
            if flight is None:
                return await self._lead(key, tool, run, namespace=namespace, ttl=ttl, as_type=type, stats=stats)
            await flight.done.wait()  # the same call is running in this process: its outcome is ours...
            if flight.error is None:
                stats.joined += 1
                stats.saved_s += flight.took_s
                return flight.result  # type: ignore[no-any-return]
            if isinstance(flight.error, Exception):
                stats.joined += 1
                raise _copied(flight.error)
            # ...unless it was cancelled: that was its caller's, not ours. Look again, and lead if need be.

    async def _lead(
        self,
        key: str,
        tool: str,
        run: Callable[[], Awaitable[T]],
        *,
        namespace: str,
        ttl: float,
        as_type: Any,
        stats: ToolStats,
    ) -> T:
        flight = self._flights[key] = _Flight()
        started = time.perf_counter()
        try:
            flight.result = await self._run_once(key, tool, run, namespace=namespace, ttl=ttl, as_type=as_type,
                                                 stats=stats)  # fmt: skip
            flight.took_s = time.perf_counter() - started
            return flight.result  # type: ignore[no-any-return]
        except BaseException as exc:
            flight.error = exc
            raise
        finally:
            del self._flights[key]
            flight.done.set()

    def _key(self, tool: str, arguments: object, version: str, namespace: str) -> str:
        tool, namespace = check_text(tool, "tool", MAX_ID_CHARS), check_text(namespace, "namespace", MAX_ID_CHARS)
        if not isinstance(version, str):
            raise ValidationError(f"version must be a string, got {short_repr(version)}")
        return entry_key(namespace, tool, version, canonical_arguments(tool, arguments))

    def _ttl(self, tool: str, ttl_s: float | None) -> float:
        ttl = ttl_s if ttl_s is not None else self.config.ttls.get(tool, self.config.default_ttl_s)
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl < 1e10:
            raise ValidationError(f"ttl_s must be a positive number of seconds, got {short_repr(ttl)}")
        return float(ttl)

    async def _lookup(self, key: str, tool: str, as_type: Any, *, hit: bool = True) -> Any:
        """The cached result (decoded as ``as_type``), ``_MISS``, or a cached failure raised. Counted as a hit
        unless ``hit`` is false (a wait for another worker's call: its caller counts it as joined)."""
        raw = await self.backend.kv_get(ENTRIES, key)
        if raw is None:
            return _MISS
        try:
            entry = _decode_entry(raw)
            value = None if entry.error_type else msgspec.msgpack.decode(entry.value, type=as_type)
        except msgspec.DecodeError as exc:  # a changed return type, or bytes damaged outside memkit
            log.warning("memkit: cached result of %r unreadable (%s); calling the tool again", tool, exc)
            return _MISS
        stats = self._stats.setdefault(tool, ToolStats())
        stats.saved_s += entry.took_s
        stats.hits += hit
        if entry.error_type:
            raise CachedToolError(
                f"tool {tool!r} failed with these arguments {time.time() - entry.stored_at:.0f} s ago and the failure "
                f"is cached: {entry.error_type}: {entry.error_message}",
                tool=tool, error_type=entry.error_type, error_message=entry.error_message or "",
            )  # fmt: skip
        return value

    async def _run_once(
        self,
        key: str,
        tool: str,
        run: Callable[[], Awaitable[T]],
        *,
        namespace: str,
        ttl: float,
        as_type: Any,
        stats: ToolStats,
    ) -> T:
        """Run the tool under the call's lease, or wait for the worker that holds it."""
        while True:
            lease = _Lease(self.backend, key, self.config.lease_s)
            if await lease.take():
                # Looked up again under the lease: another worker may have stored the result and let its
                # lease go between our miss and our taking it.
                found = await self._lookup(key, tool, as_type, hit=False)
                if found is not _MISS:
                    with anyio.CancelScope(shield=True):
                        await lease.release()
                    stats.joined += 1
                    return found  # type: ignore[no-any-return]
                return await self._run_leased(key, tool, run, namespace=namespace, ttl=ttl, lease=lease, stats=stats)
            await anyio.sleep(self.config.poll_s)  # another worker runs it: its result, or its lease expiring
            found = await self._lookup(key, tool, as_type, hit=False)
            if found is not _MISS:
                stats.joined += 1
                return found  # type: ignore[no-any-return]

    async def _run_leased(
        self,
        key: str,
        tool: str,
        run: Callable[[], Awaitable[T]],
        *,
        namespace: str,
        ttl: float,
        lease: _Lease,
        stats: ToolStats,
    ) -> T:
        stats.misses += 1
        started = time.perf_counter()
        # The renewal runs beside the tool, not in a task group: the tool's own exception must reach the
        # caller as itself, not wrapped in an ExceptionGroup.
        renewal = BackgroundTask.start(lease.keep)
        try:
            try:
                outcome: Any = run()
                # A plain function has run by now: its value is the result (refused here, the tool's side
                # effect happened uncached, and the caller's retry ran it again).
                result: T = await outcome if inspect.isawaitable(outcome) else outcome
            finally:
                with anyio.CancelScope(shield=True):
                    await renewal.stop()
        except Exception as exc:
            stats.errors += 1
            if self.config.cache_errors:
                await self._store_error(key, namespace, exc, time.perf_counter() - started)
            raise
        else:  # stored before the lease goes, so a waiting worker finds the result, not a free lease
            await self._store_result(key, tool, namespace, result, ttl=ttl, took_s=time.perf_counter() - started)
            return result
        finally:
            with anyio.CancelScope(shield=True):
                await lease.release()

    async def _store_result(
        self, key: str, tool: str, namespace: str, result: object, *, ttl: float, took_s: float
    ) -> None:
        """Cache the result; one that cannot be cached is still the caller's (logged once per tool)."""
        try:
            entry = _encode(_Entry(msgspec.Raw(_encode(result)), time.time(), took_s))
        except _ENCODE_ERRORS as exc:
            if tool not in self._warned:
                self._warned.add(tool)
                log.warning("memkit: results of tool %r are not cached: msgspec cannot encode them (%s)", tool, exc)
            return
        await self._store(key, namespace, entry, ttl)

    async def _store_error(self, key: str, namespace: str, error: Exception, took_s: float) -> None:
        try:
            entry = _encode(_Entry(msgspec.Raw(b"\xc0"), time.time(), took_s, type(error).__name__, str(error)))
        except _ENCODE_ERRORS:
            return  # a message that cannot be stored: the failure is raised, just not cached
        await self._store(key, namespace, entry, self.config.error_ttl_s)

    async def _store(self, key: str, namespace: str, entry: bytes, ttl: float) -> None:
        """Write an entry; the tool has run, so a storage failure is logged, never raised over its outcome
        (a caller seeing an error would call a side-effecting tool again)."""
        try:
            await self.backend.kv_set(ENTRIES, key, entry, ttl)
            self._writes[namespace] = self._writes.get(namespace, 0) + 1
            if self._writes[namespace] >= max(self.config.max_entries // 10, 1):
                self._writes[namespace] = 0
                await self._trim(namespace_prefix(namespace))
        except (BackendError, NotOpenError) as exc:  # closed meanwhile: the outcome still stands
            log.warning("memkit: a tool result could not be cached (%s); the call itself succeeded", exc)

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
            tool = check_text(tool, "tool", MAX_ID_CHARS)
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
