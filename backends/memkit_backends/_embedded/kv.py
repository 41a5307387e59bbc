"""A key-value map with expiry, for the in-process KV face."""

from __future__ import annotations

import time

__all__ = ["ExpiringDict"]


class ExpiringDict:
    def __init__(self) -> None:
        self._items: dict[tuple[str, str], tuple[bytes, float | None]] = {}

    def get(self, namespace: str, key: str) -> bytes | None:
        item = self._items.get((namespace, key))
        if item is None:
            return None
        value, expires_at = item
        if expires_at is not None and expires_at <= time.time():
            del self._items[(namespace, key)]
            return None
        return value

    def set(self, namespace: str, key: str, value: bytes, ttl_s: float | None) -> None:
        self._items[(namespace, key)] = (bytes(value), None if ttl_s is None else time.time() + ttl_s)

    def replace(self, namespace: str, key: str, value: bytes, expected: bytes | None, ttl_s: float | None) -> bool:
        if self.get(namespace, key) != expected:
            return False
        self.set(namespace, key, value, ttl_s)
        return True

    def delete(self, namespace: str, key: str) -> bool:
        return self.get(namespace, key) is not None and self._items.pop((namespace, key), None) is not None
