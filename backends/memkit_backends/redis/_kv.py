"""The key-value face on Redis (plain Redis is enough): values with the writer's expiry, a sorted index.

A value is stored as ``<expires_at as a big-endian float64, +inf: never><bytes>`` under
``memkit:kvv:<namespace>\\0<key>``: the expiry decides liveness against the caller's ``now``, never
the server's clock; a physical PEXPIRE of the same TTL only collects the garbage. Names hold no NUL
(``check_key``), so the first NUL splits a stored name one way only: no two (namespace, key) pairs
share a key. ``memkit:kvi:<namespace>`` is a sorted set of the namespace's keys (all at score 0, so
ordered by their UTF-8 bytes, which is code point order), written in the same MULTI as the value:
``kv_scan`` reads it with ZRANGE BYLEX and the prefix as a range, so pattern characters are never
special. Members whose value is gone (expired or deleted by another path) are skipped, and removed
when seen.

Version 1 stored plain strings under ``memkit:kv:<namespace>\\0<key>``, expiring by the server's TTL
alone; ``setup()`` moves them to this layout once (marked in ``memkit:meta``).
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
import time
from typing import Any, Final, cast

import redis.asyncio as aioredis
from redis.exceptions import WatchError

from memkit.backend import KeyValueStore, KVPage, check_key
from memkit.errors import CorruptDataError, ValidationError
from memkit_backends.redis._errors import RedisErrors, operation

__all__ = ["KeyValueFace", "migrate_v1"]

_VALUES: Final = b"memkit:kvv:"
_INDEX: Final = b"memkit:kvi:"
_V1: Final = b"memkit:kv:"
_META: Final = "memkit:meta"
_HEADER: Final = struct.Struct(">d")
_BATCH: Final = 500
# Removes the members of ``ARGV`` from the index ``KEYS[1]`` whose value keys (``KEYS[2..]``) are gone,
# checked inside the script: a key set again since it was read is kept.
_FORGET_STALE: Final = """
for i, member in ipairs(ARGV) do
  if redis.call('EXISTS', KEYS[i + 1]) == 0 then redis.call('ZREM', KEYS[1], member) end
end
return 0
"""


def _value_key(namespace: bytes, key: bytes) -> bytes:
    return _VALUES + namespace + b"\x00" + key


def _pack(value: bytes, expires_at: float | None) -> bytes:
    return _HEADER.pack(math.inf if expires_at is None else expires_at) + value


def _live(stored: bytes | None, now: float) -> bytes | None:
    """The value if it is live at ``now``."""
    if stored is None:
        return None
    if len(stored) < _HEADER.size:
        raise CorruptDataError(f"a key-value entry of {len(stored)} bytes has no expiry header")
    (expires_at,) = _HEADER.unpack_from(stored)
    return stored[_HEADER.size :] if expires_at > now else None


def _expiry(ttl_s: float | None, now: float) -> tuple[float | None, int | None]:
    """The logical expiry (caller's clock) and the physical TTL in ms: the same span, plus how far the
    caller's clock is ahead of ours, so the garbage collection never runs before the expiry."""
    if ttl_s is None or ttl_s == math.inf:
        return None, None
    if math.isnan(ttl_s):
        raise ValidationError("ttl_s must be a number of seconds, not NaN")
    ahead = max(0.0, now - time.time())
    return now + ttl_s, max(1, math.ceil((ttl_s + ahead) * 1000))


def _range(prefix: bytes, after: bytes | None) -> tuple[bytes, bytes]:
    """ZRANGE BYLEX bounds of the keys starting with ``prefix`` (after ``after``). UTF-8 has no 0xFF
    byte, so every key with the prefix sorts below ``prefix + 0xFF``."""
    low = b"(" + after if after is not None and after >= prefix else b"[" + prefix
    return low, (b"(" + prefix + b"\xff") if prefix else b"+"


def _encode_cursor(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode()


def _decode_cursor(cursor: str) -> bytes:
    try:
        key = base64.urlsafe_b64decode(cursor.encode())
        key.decode()
    except (ValueError, binascii.Error) as exc:
        raise ValidationError(f"malformed key-value cursor {cursor!r}") from exc
    return key


class KeyValueFace(RedisErrors, KeyValueStore):
    """``kv_*`` of the Redis backend."""

    _client: aioredis.Redis

    @operation
    async def kv_get(self, namespace: str, key: str, *, now: float | None = None) -> bytes | None:
        check_key(namespace, key)
        stored = await self._client.get(_value_key(namespace.encode(), key.encode()))
        return _live(cast("bytes | None", stored), time.time() if now is None else now)

    @operation
    async def kv_set(
        self, namespace: str, key: str, value: bytes, ttl_s: float | None = None, *, now: float | None = None
    ) -> None:
        check_key(namespace, key)
        expiry = _expiry(ttl_s, time.time() if now is None else now)
        async with self._client.pipeline(transaction=True) as pipe:
            self._write(pipe, namespace.encode(), key.encode(), bytes(value), expiry)
            await pipe.execute()

    @staticmethod
    def _write(pipe: Any, namespace: bytes, key: bytes, value: bytes, expiry: tuple[float | None, int | None]) -> None:
        """The value and its index entry, into a MULTI."""
        expires_at, ttl_ms = expiry
        pipe.set(_value_key(namespace, key), _pack(value, expires_at), px=ttl_ms)
        pipe.zadd(_INDEX + namespace, {key: 0})

    @operation
    async def kv_delete(self, namespace: str, key: str, *, now: float | None = None) -> bool:
        check_key(namespace, key)
        name, member = _value_key(namespace.encode(), key.encode()), key.encode()
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.get(name)
            pipe.delete(name)
            pipe.zrem(_INDEX + namespace.encode(), member)
            stored, _, _ = await pipe.execute()
        return _live(stored, time.time() if now is None else now) is not None

    @operation
    async def kv_replace(
        self, namespace: str, key: str, value: bytes, expected: bytes | None, ttl_s: float | None = None, *,
        now: float | None = None,
    ) -> bool:  # fmt: skip
        check_key(namespace, key)
        now = time.time() if now is None else now
        expiry = _expiry(ttl_s, now)
        ns, member, value = namespace.encode(), key.encode(), bytes(value)
        async with self._client.pipeline(transaction=True) as pipe:
            try:
                await pipe.watch(_value_key(ns, member))  # EXEC fails if anyone wrote the key meanwhile
                live = _live(cast("bytes | None", await pipe.get(_value_key(ns, member))), now)
                if live != expected:  # a retry whose first attempt succeeded (True), or a conflict
                    await pipe.unwatch()  # type: ignore[no-untyped-call]
                    return live == value
                # Expected: written, even the same value (a lease renewed with its own value gets its TTL).
                pipe.multi()  # type: ignore[no-untyped-call]
                self._write(pipe, ns, member, value, expiry)
                await pipe.execute()
            except WatchError:
                return False
        return True

    @operation
    async def kv_scan(
        self, namespace: str, *, prefix: str = "", limit: int = 100, cursor: str | None = None, now: float | None = None
    ) -> KVPage:
        check_key(namespace, prefix)
        if limit < 1:
            raise ValidationError(f"limit must be at least 1, got {limit}")
        now = time.time() if now is None else now
        ns, start = namespace.encode(), prefix.encode()
        after = _decode_cursor(cursor) if cursor is not None else None
        items: list[tuple[str, bytes]] = []
        while len(items) < limit:
            low, high = _range(start, after)
            want = limit - len(items)
            members = cast("list[bytes]", await self._client.zrange(_INDEX + ns, low, high, bylex=True, offset=0,
                                                                    num=want))  # fmt: skip
            if not members:
                return KVPage(items=items)
            stored = cast("list[bytes | None]", await self._client.mget([_value_key(ns, m) for m in members]))
            stale = [m for m, s in zip(members, stored, strict=True) if s is None]
            items += [(m.decode(), v) for m, s in zip(members, stored, strict=True) if (v := _live(s, now)) is not None]
            if stale:
                await self._forget(ns, stale)
            if len(members) < want:
                return KVPage(items=items)
            after = members[-1]
        return KVPage(items=items, next_cursor=_encode_cursor(items[-1][0].encode()))

    async def _forget(self, namespace: bytes, members: list[bytes]) -> None:
        keys = [_INDEX + namespace, *(_value_key(namespace, m) for m in members)]
        await self._client.register_script(_FORGET_STALE)(keys, members)

    @operation
    async def kv_delete_prefix(self, namespace: str, prefix: str = "") -> int:
        check_key(namespace, prefix)
        ns, low_high = namespace.encode(), _range(prefix.encode(), None)
        deleted = 0
        while members := cast("list[bytes]", await self._client.zrange(_INDEX + ns, *low_high, bylex=True, offset=0,
                                                                       num=_BATCH)):  # fmt: skip
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.delete(*(_value_key(ns, m) for m in members))
                pipe.zrem(_INDEX + ns, *members)
                count, _ = await pipe.execute()
            deleted += int(count)
        return deleted


async def migrate_v1(client: aioredis.Redis) -> None:
    """Move version 1's key-value entries to this layout, once per database (idempotent, and safe to
    run from several clients at once: SET NX keeps whichever copy came first)."""
    if await client.hget(_META, "kv_layout") == b"2":
        return
    cursor = 0
    while True:
        cursor, names = await client.scan(cursor, match=_V1 + b"*", count=1_000, _type="string")
        if names:
            await _migrate(client, cast("list[bytes]", names))
        if cursor == 0:
            break
    await client.hset(_META, "kv_layout", "2")


async def _migrate(client: aioredis.Redis, names: list[bytes]) -> None:
    async with client.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.get(name)
            pipe.pttl(name)
        replies = await pipe.execute()
    now = time.time()
    async with client.pipeline(transaction=True) as pipe:
        for name, value, ttl_ms in zip(names, replies[::2], replies[1::2], strict=True):
            namespace, nul, key = name[len(_V1) :].partition(b"\x00")
            if value is None or not nul or ttl_ms == -2:  # gone meanwhile, or not one of ours
                continue
            expiring = ttl_ms >= 0
            pipe.set(_value_key(namespace, key), _pack(value, now + ttl_ms / 1000 if expiring else None),
                     px=max(1, ttl_ms) if expiring else None, nx=True)  # fmt: skip
            pipe.zadd(_INDEX + namespace, {key: 0})
            pipe.delete(name)
        await pipe.execute()
