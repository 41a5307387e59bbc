"""The key-value methods of ``SQLiteBackend`` (a mixin over ``_run``; the SQL is in ``_kv``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TypeVar

from memkit.backend import KVPage, check_key
from memkit_backends.sqlite import _kv

__all__ = ["SQLiteKeyValue"]

T = TypeVar("T")
_COLLECT_EVERY = 256
"""Key writes between two sweeps of keys past their physical deadline (an index range scan each)."""


class SQLiteKeyValue:
    _kv_writes = 0

    async def _run(self, action: Callable[[sqlite3.Connection], T]) -> T:
        raise NotImplementedError  # SQLiteBackend's

    def _after_kv_write(self, conn: sqlite3.Connection) -> None:
        self._kv_writes += 1
        if self._kv_writes % _COLLECT_EVERY == 0:
            _kv.kv_collect(conn)

    async def kv_get(self, namespace: str, key: str, *, now: float | None = None) -> bytes | None:
        check_key(namespace, key)
        return await self._run(lambda conn: _kv.kv_get(conn, namespace, key, now))

    async def kv_set(
        self, namespace: str, key: str, value: bytes, ttl_s: float | None = None, *, now: float | None = None
    ) -> None:
        check_key(namespace, key)

        def work(conn: sqlite3.Connection) -> None:
            _kv.kv_set(conn, namespace, key, value, ttl_s=ttl_s, now=now)
            self._after_kv_write(conn)

        await self._run(work)

    async def kv_delete(self, namespace: str, key: str, *, now: float | None = None) -> bool:
        check_key(namespace, key)
        return await self._run(lambda conn: _kv.kv_delete(conn, namespace, key, now))

    async def kv_replace(
        self,
        namespace: str,
        key: str,
        value: bytes,
        expected: bytes | None,
        ttl_s: float | None = None,
        *,
        now: float | None = None,
    ) -> bool:
        check_key(namespace, key)

        def work(conn: sqlite3.Connection) -> bool:
            written = _kv.kv_replace(conn, namespace, key, value, expected=expected, ttl_s=ttl_s, now=now)
            self._after_kv_write(conn)
            return written

        return await self._run(work)

    async def kv_scan(
        self, namespace: str, *, prefix: str = "", limit: int = 100, cursor: str | None = None, now: float | None = None
    ) -> KVPage:
        check_key(namespace, prefix)
        return await self._run(
            lambda conn: _kv.kv_scan(conn, namespace, prefix=prefix, limit=limit, cursor=cursor, now=now)
        )

    async def kv_delete_prefix(self, namespace: str, prefix: str = "") -> int:
        check_key(namespace, prefix)
        return await self._run(lambda conn: _kv.kv_delete_prefix(conn, namespace, prefix))
