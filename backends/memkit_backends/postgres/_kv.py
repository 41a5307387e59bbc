"""The key-value face on one table, ``memkit_kv``: liveness by the caller's clock, compare-and-set in one
statement, ordered listing by prefix with a keyset cursor."""

from __future__ import annotations

import math
import time

from memkit.backend import KVPage, check_key
from memkit.errors import ValidationError
from memkit_backends._server.retry import retrying
from memkit_backends.postgres._base import PostgresBase
from memkit_backends.postgres._codec import decode_key_cursor, encode_cursor

__all__ = ["PostgresKeyValue", "prefix_end"]

_LIVE = "(expires_at IS NULL OR expires_at > $3)"
"""Live at the caller's ``now`` (always $3 below): never the server's clock."""


def prefix_end(prefix: str) -> str | None:
    """The least string above every string starting with ``prefix``, in code-point order (None: no bound).

    With ``key >= prefix AND key < prefix_end(prefix)`` a prefix is a range of the primary key (in the "C"
    collation, byte order of UTF-8 = code-point order), read in order, and no character is a wildcard."""
    chars = list(prefix)
    while chars:
        after = ord(chars.pop()) + 1
        if 0xD800 <= after <= 0xDFFF:  # surrogates cannot be stored: skip to the next encodable character
            after = 0xE000
        if after <= 0x10FFFF:
            return "".join(chars) + chr(after)
    return None


def _expiry(ttl_s: float | None, now: float) -> float | None:
    if ttl_s is None:
        return None
    if math.isnan(ttl_s):
        raise ValidationError("ttl_s is NaN")
    return now + float(ttl_s)


class PostgresKeyValue(PostgresBase):
    @property
    def _kv(self) -> str:
        return self.table("memkit_kv")

    @retrying
    async def kv_get(self, namespace: str, key: str, *, now: float | None = None) -> bytes | None:
        check_key(namespace, key)
        value = await self.pool.fetchval(
            f"SELECT value FROM {self._kv} WHERE namespace = $1 AND key = $2 AND {_LIVE}",
            namespace, key, time.time() if now is None else now,
        )  # fmt: skip
        return None if value is None else bytes(value)

    @retrying
    async def kv_set(
        self, namespace: str, key: str, value: bytes, ttl_s: float | None = None, *, now: float | None = None
    ) -> None:
        check_key(namespace, key)
        expires_at = _expiry(ttl_s, time.time() if now is None else now)
        await self.pool.execute(
            f"INSERT INTO {self._kv} (namespace, key, value, expires_at) VALUES ($1, $2, $3, $4) "
            "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at",
            namespace, key, bytes(value), expires_at,
        )  # fmt: skip

    @retrying
    async def kv_delete(self, namespace: str, key: str, *, now: float | None = None) -> bool:
        check_key(namespace, key)
        # An expired value goes too, but only a live one counts as deleted.
        live = await self.pool.fetchval(
            f"DELETE FROM {self._kv} WHERE namespace = $1 AND key = $2 RETURNING {_LIVE}",
            namespace, key, time.time() if now is None else now,
        )  # fmt: skip
        return bool(live)

    @retrying
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
        now = time.time() if now is None else now
        params = [namespace, key, now, bytes(value), _expiry(ttl_s, now)]
        # One statement each way, atomic under READ COMMITTED: the row is locked and the condition re-read on
        # its newest version. Also true when the live value already is ``value``: a retry of a call that won.
        if expected is None:
            sql = (
                f"INSERT INTO {self._kv} AS kv (namespace, key, value, expires_at) VALUES ($1, $2, $4, $5) "
                "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at "
                "WHERE (kv.expires_at IS NOT NULL AND kv.expires_at <= $3) OR kv.value = excluded.value RETURNING 1"
            )
        else:
            sql = (
                f"UPDATE {self._kv} SET value = $4, expires_at = $5 WHERE namespace = $1 AND key = $2 AND {_LIVE} "
                "AND (value = $6 OR value = $4) RETURNING 1"
            )
            params.append(bytes(expected))
        return await self.pool.fetchval(sql, *params) is not None

    @retrying
    async def kv_scan(
        self, namespace: str, *, prefix: str = "", limit: int = 100, cursor: str | None = None, now: float | None = None
    ) -> KVPage:
        check_key(namespace, prefix)
        after = decode_key_cursor(cursor)
        params: list[object] = [namespace, prefix, time.time() if now is None else now, limit]
        where = f"namespace = $1 AND key >= $2 AND starts_with(key, $2) AND {_LIVE}"
        if (end := prefix_end(prefix)) is not None:
            params.append(end)
            where += f" AND key < ${len(params)}"
        if after is not None:
            params.append(after)
            where += f" AND key > ${len(params)}"
        rows = await self.pool.fetch(
            f'SELECT key, value FROM {self._kv} WHERE {where} ORDER BY key COLLATE "C" LIMIT $4', *params
        )
        items = [(row["key"], bytes(row["value"])) for row in rows]
        return KVPage(items=items, next_cursor=encode_cursor(items[-1][0]) if items and len(items) == limit else None)

    @retrying
    async def kv_delete_prefix(self, namespace: str, prefix: str = "") -> int:
        check_key(namespace, prefix)
        params: list[object] = [namespace, prefix, time.time()]
        where = "namespace = $1 AND key >= $2 AND starts_with(key, $2)"
        if (end := prefix_end(prefix)) is not None:
            params.append(end)
            where += " AND key < $4"
        # Expired keys go too; the count is of the live ones, as kv_delete's.
        rows = await self.pool.fetch(f"DELETE FROM {self._kv} WHERE {where} RETURNING {_LIVE} AS live", *params)
        return sum(1 for row in rows if row["live"])
