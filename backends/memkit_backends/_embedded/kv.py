"""The key-value face in process: sorted keys per namespace, expiry judged by the caller's clock.

A key is live while ``expires_at > now`` of the reader, ``expires_at`` being the writer's ``now + ttl_s``.
Expired keys are dropped by a heap of physical deadlines (this process's clock + ttl_s at the write),
like Redis's PX: a reader with a clock of its own never loses a key it still sees as live before then.
"""

from __future__ import annotations

import heapq
import math
import time
from bisect import bisect_left, bisect_right, insort

from memkit.backend import KVPage
from memkit.errors import ValidationError
from memkit_backends._embedded.cursor import decode_key_cursor, encode_key_cursor

__all__ = ["ExpiringDict", "expiry", "prefix_end"]

_Item = tuple[bytes, float | None, float | None]
"""(value, expires_at by the writer's clock, physical deadline for garbage collection)."""


def expiry(now: float | None, ttl_s: float | None) -> tuple[float | None, float | None]:
    """(logical expiry, physical deadline) of a write at ``now`` (None: this process's clock)."""
    if ttl_s is None:
        return None, None
    if not isinstance(ttl_s, int | float) or not math.isfinite(ttl_s):
        raise ValidationError(f"ttl_s must be a finite number of seconds or None, got {ttl_s!r}")
    wall = time.time()
    return (wall if now is None else now) + ttl_s, wall + ttl_s


def prefix_end(prefix: str) -> str | None:
    """The least string above every string starting with ``prefix`` (None: no bound), in code point
    order, which is also UTF-8 byte order: keys with the prefix are exactly ``prefix <= key < end``."""
    for i in range(len(prefix) - 1, -1, -1):
        code = ord(prefix[i]) + 1
        if code == 0xD800:  # surrogates cannot be stored: the next code point is past them
            code = 0xE000
        if code <= 0x10FFFF:
            return prefix[:i] + chr(code)
    return None


def _live(item: _Item, now: float) -> bool:
    return item[1] is None or item[1] > now


class _Namespace:
    __slots__ = ("items", "keys")

    def __init__(self) -> None:
        self.items: dict[str, _Item] = {}
        self.keys: list[str] = []
        """Sorted; kept so by insort on a new key (a memmove, fast next to a sort per scan)."""

    def remove(self, key: str) -> _Item | None:
        item = self.items.pop(key, None)
        if item is not None:
            del self.keys[bisect_left(self.keys, key)]
        return item


class ExpiringDict:
    def __init__(self) -> None:
        self._spaces: dict[str, _Namespace] = {}
        self._deadlines: list[tuple[float, str, str]] = []

    def get(self, namespace: str, key: str, now: float | None) -> bytes | None:
        space = self._spaces.get(namespace)
        item = None if space is None else space.items.get(key)
        if item is None or not _live(item, time.time() if now is None else now):
            return None
        return item[0]

    def set(self, namespace: str, key: str, value: bytes, ttl_s: float | None, now: float | None) -> None:
        expires_at, deadline = expiry(now, ttl_s)
        space = self._spaces.setdefault(namespace, _Namespace())
        if key not in space.items:
            insort(space.keys, key)
        space.items[key] = (bytes(value), expires_at, deadline)
        if deadline is not None:
            heapq.heappush(self._deadlines, (deadline, namespace, key))
        self._collect()

    def replace(
        self, namespace: str, key: str, value: bytes, expected: bytes | None, ttl_s: float | None, *, now: float | None
    ) -> bool:
        current = self.get(namespace, key, now)
        if current is not None and current == value:
            return True  # a retry whose first attempt succeeded
        if current != expected:
            return False
        self.set(namespace, key, value, ttl_s, now)
        return True

    def delete(self, namespace: str, key: str, now: float | None) -> bool:
        space = self._spaces.get(namespace)
        item = None if space is None else space.remove(key)
        self._drop_if_empty(namespace)
        return item is not None and _live(item, time.time() if now is None else now)

    def scan(self, namespace: str, prefix: str, limit: int, cursor: str | None, now: float | None) -> KVPage:
        if limit < 1:
            raise ValidationError(f"kv_scan limit must be >= 1, got {limit}")
        space = self._spaces.get(namespace)
        if space is None:
            return KVPage(items=[])
        keys, when = space.keys, time.time() if now is None else now
        start = bisect_left(keys, prefix)
        if cursor is not None:
            start = max(start, bisect_right(keys, decode_key_cursor(cursor)))
        items: list[tuple[str, bytes]] = []
        i = start
        while i < len(keys) and keys[i].startswith(prefix):
            item = space.items[keys[i]]
            if _live(item, when):
                items.append((keys[i], item[0]))
                if len(items) == limit:
                    more = i + 1 < len(keys) and keys[i + 1].startswith(prefix)
                    return KVPage(items=items, next_cursor=encode_key_cursor(keys[i]) if more else None)
            i += 1
        return KVPage(items=items)

    def delete_prefix(self, namespace: str, prefix: str) -> int:
        space = self._spaces.get(namespace)
        if space is None:
            return 0
        end = prefix_end(prefix)
        lo = bisect_left(space.keys, prefix)
        hi = len(space.keys) if end is None else bisect_left(space.keys, end)
        for key in space.keys[lo:hi]:
            del space.items[key]
        del space.keys[lo:hi]
        self._drop_if_empty(namespace)
        return hi - lo

    def _collect(self) -> None:
        """Drop keys whose physical deadline passed (entries of keys rewritten since are skipped)."""
        wall = time.time()
        while self._deadlines and self._deadlines[0][0] <= wall:
            deadline, namespace, key = heapq.heappop(self._deadlines)
            space = self._spaces.get(namespace)
            item = None if space is None else space.items.get(key)
            if space is not None and item is not None and item[2] == deadline:
                space.remove(key)
                self._drop_if_empty(namespace)

    def _drop_if_empty(self, namespace: str) -> None:
        space = self._spaces.get(namespace)
        if space is not None and not space.items:
            del self._spaces[namespace]
