"""The key-value face of a store that has none (Pinecone, Weaviate): every call is a ``CapabilityError``.

Such a store declares ``kv=False``; ``Memkit`` keeps the keys of a layer given its URL under the main URL
(``memkit._split``), so these are reached only by calling the backend directly.
"""

from __future__ import annotations

from typing import NoReturn

from memkit.backend import Backend, KVPage
from memkit.errors import CapabilityError

__all__ = ["RecordsOnlyBackend"]


class RecordsOnlyBackend(Backend):
    """A backend whose key-value methods refuse, naming what to use instead."""

    def _no_kv(self) -> NoReturn:
        raise CapabilityError(
            f"{self.url.scheme}:// has no key-value face (no conditional writes, no listing by key); give the "
            "layers that need one a key-value-capable URL, e.g. Memkit('sqlite:///memkit.db', layer_urls="
            f"{{'long_term': '{self.url.scheme}://...'}}) keeps that layer's keys in SQLite, or redis:// / "
            "postgresql://"
        )

    async def kv_get(self, namespace: str, key: str, *, now: float | None = None) -> bytes | None:
        self._no_kv()

    async def kv_set(
        self, namespace: str, key: str, value: bytes, ttl_s: float | None = None, *, now: float | None = None
    ) -> None:
        self._no_kv()

    async def kv_delete(self, namespace: str, key: str, *, now: float | None = None) -> bool:
        self._no_kv()

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
        self._no_kv()

    async def kv_scan(
        self, namespace: str, *, prefix: str = "", limit: int = 100, cursor: str | None = None, now: float | None = None
    ) -> KVPage:
        self._no_kv()

    async def kv_delete_prefix(self, namespace: str, prefix: str = "") -> int:
        self._no_kv()
