"""A collection is a RediSearch index over the hashes under its prefix: made, widened and upgraded here."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Final, cast

import anyio
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from memkit.errors import DimensionMismatchError
from memkit_backends.redis._codec import scope_from_hash, scope_numbers
from memkit_backends.redis._errors import is_missing_index
from memkit_backends.redis._keys import SCOPE_FIELDS, collection_prefix, index_name

__all__ = ["SCOPE_NUMBER_SCHEMA", "Collections", "as_bytes", "pairs"]

SCOPE_NUMBER_SCHEMA: Final = tuple(x for _, field, _ in SCOPE_FIELDS for x in (field, "NUMERIC"))


def pairs(reply: Any) -> dict[Any, Any]:
    """A RESP2 flat list or an already-parsed dict, as a dict with bytes keys."""
    if isinstance(reply, dict):
        return {k.encode() if isinstance(k, str) else k: v for k, v in reply.items()}
    return dict(zip(reply[::2], reply[1::2], strict=False))


def as_bytes(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _taken(exc: ResponseError) -> bool:
    # Another client created or widened the index first; RediSearch has no error class for it, and
    # redis-py none either: "Index already exists", "Duplicate field in schema".
    return "already exists" in str(exc) or "Duplicate field" in str(exc)


async def _scan_keys(client: aioredis.Redis, pattern: str) -> AsyncIterator[list[bytes]]:
    cursor = 0
    while True:
        cursor, keys = await client.scan(cursor, match=pattern, count=1000)
        if keys:
            yield cast("list[bytes]", keys)
        if cursor == 0:
            return


class Collections:
    """Per collection: its vector dimension (cached) and whether its index has the numeric scope fields."""

    _client: aioredis.Redis

    def __init__(self, client: aioredis.Redis, *, hnsw: bool) -> None:
        self._client = client
        self._algorithm = "HNSW" if hnsw else "FLAT"
        self.dims: dict[str, int | None] = {}
        self.scope_numbers: set[str] = set()
        """Collections whose index has the numeric scope fields (created by this version or upgraded)."""

    async def dim(self, collection: str) -> tuple[bool, int | None]:
        """Whether the collection exists, and its dimension (None until a vector was written)."""
        if collection in self.dims:
            return True, self.dims[collection]
        try:
            info = await self._client.execute_command("FT.INFO", index_name(collection))  # type: ignore[no-untyped-call]
        except ResponseError as exc:
            if is_missing_index(exc):
                return False, None
            raise
        dim = None
        names = set()
        for attribute in pairs(info).get(b"attributes", []):
            fields = pairs(attribute)
            names.add(as_bytes(fields.get(b"attribute", b"")))
            if as_bytes(fields.get(b"type", b"")) == b"VECTOR":
                dim = int(fields.get(b"dim", 0)) or None
        if b"un" in names:
            self.scope_numbers.add(collection)
        self.dims[collection] = dim
        return True, dim

    async def ensure(self, name: str, dim: int | None) -> None:
        exists, have = await self.dim(name)
        if exists and name not in self.scope_numbers:
            await self._add_scope_numbers(name)
        if exists and (dim is None or have == dim):
            return
        if have is not None and dim is not None and have != dim:
            raise DimensionMismatchError(f"collection {name!r} holds {have}-dimensional vectors, not {dim}")
        vector = ["emb", "VECTOR", self._algorithm, "6", "TYPE", "FLOAT32", "DIM", str(dim), "DISTANCE_METRIC",
                  "COSINE"]  # fmt: skip
        try:
            if exists:  # created before its dimension was known: add the vector field now
                await self._command("FT.ALTER", index_name(name), "SCHEMA", "ADD", *vector)
            else:
                await self._create(name, vector if dim is not None else [])
        except ResponseError as exc:
            if not _taken(exc):
                raise
            self.dims.pop(name, None)
            _, have = await self.dim(name)
            if dim is not None and have is not None and have != dim:
                raise DimensionMismatchError(
                    f"collection {name!r} holds {have}-dimensional vectors, not {dim}"
                ) from exc
            if dim is not None and have is None:
                raise
            dim = have
        await self._await_scan(name)
        self.dims[name] = dim

    async def _create(self, name: str, vector: list[str]) -> None:
        schema: list[Any] = [
            "rid", "TEXT", "NOINDEX", "SORTABLE", "u", "TAG", "a", "TAG", "s", "TAG", "flt", "TAG",
            "tokens", "TEXT", "NOSTEM",
            # SORTABLE: returned from the index, not read from each hash (-0.5 ms per 300-row list at 100k);
            # ts also orders scans.
            "imp", "NUMERIC", "SORTABLE", "ts", "NUMERIC", "SORTABLE", "exp", "NUMERIC", "SORTABLE",
            *SCOPE_NUMBER_SCHEMA, *vector,
        ]  # fmt: skip
        await self._command("FT.CREATE", index_name(name), "ON", "HASH", "PREFIX", "1", collection_prefix(name),
                            "STOPWORDS", "0", "SCHEMA", *schema)  # fmt: skip
        self.scope_numbers.add(name)

    async def _command(self, *args: Any) -> Any:
        return await self._client.execute_command(*args)  # type: ignore[no-untyped-call]

    async def _add_scope_numbers(self, name: str) -> None:
        """Upgrade an index made before the numeric scope fields: add them, then write them into every
        record (SCAN over the collection's keys), so text queries find old records too."""
        try:
            await self._command("FT.ALTER", index_name(name), "SCHEMA", "ADD", *SCOPE_NUMBER_SCHEMA)
        except ResponseError as exc:
            if not _taken(exc):  # another client upgraded it first
                raise
        await self._await_scan(name)
        async for keys in _scan_keys(self._client, collection_prefix(name) + "*"):
            async with self._client.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.hmget(key, ["scope", "uid", "aid", "sid"])
                raws = await pipe.execute(raise_on_error=False)
            async with self._client.pipeline(transaction=False) as pipe:
                for key, fields in zip(keys, raws, strict=True):
                    if isinstance(fields, ResponseError):
                        continue  # not a hash: not a record
                    scope_json, uid, aid, sid = fields
                    raw = {b"scope": scope_json} if scope_json else {b"uid": uid, b"aid": aid, b"sid": sid}
                    numbers: dict[str, int] = scope_numbers(scope_from_hash({k: v for k, v in raw.items() if v}))
                    pipe.hset(key, mapping=numbers)  # type: ignore[arg-type]  # dict is invariant
                await pipe.execute()
        self.scope_numbers.add(name)

    async def _await_scan(self, name: str) -> None:
        """Wait until a new or altered index has scanned the keyspace for records it should hold.

        RediSearch scans every key in the background after FT.CREATE / FT.ALTER, and indexes again each
        matching key it meets, even one written (and indexed) after the index was created. Records written
        during the scan were indexed twice: with HNSW on a server holding 100k other keys that doubled
        ingest work and kept queries at ~50 ms (measured) until the scan ended.
        """
        delay = 0.002
        while int(pairs(await self._command("FT.INFO", index_name(name))).get(b"indexing", 0) or 0):
            await anyio.sleep(delay)
            delay = min(delay * 2, 0.1)
