"""The connection side of the Postgres backend: options, the pool, the schema and its upgrades, error mapping."""

from __future__ import annotations

import anyio
import asyncpg
from asyncpg import exceptions as pg

from memkit.backend import Backend, StorageURL
from memkit.errors import (
    BackendError,
    BackendRefusedError,
    BackendUnavailableError,
    InvalidURLError,
    MemkitError,
    NotOpenError,
)
from memkit_backends._server.retry import retrying
from memkit_backends.postgres._codec import register_vector_codec
from memkit_backends.postgres._errors import REFUSED, TRANSIENT, postgres_error
from memkit_backends.postgres._options import Settings
from memkit_backends.postgres._sql import SCHEMA_VERSION, schema_ddl, upgrade_collection_ddl, upgrade_schema_ddl

__all__ = ["PostgresBase"]

_UNREACHABLE: tuple[type[BaseException], ...] = (*TRANSIENT, OSError)
"""At open, before any server answered: a timeout (an OSError) means nothing answered in time."""


async def _keep_session(conn: asyncpg.Connection) -> None:
    """What a connection goes back to the pool with: as it is, after asyncpg's own reset (a transaction left
    open rolled back, listeners dropped). asyncpg's default also sends ``SELECT pg_advisory_unlock_all(); CLOSE
    ALL; UNLISTEN *; RESET ALL``: a round trip on every release (a recall releases two), with nothing to undo.
    memkit leaves no session state behind: its settings are ``SET LOCAL`` or ``set_config(..., true)`` (the
    transaction's), its locks ``pg_advisory_xact_lock`` (the extension's session lock is taken and released in
    the connection's ``init``, before the pool hands it out), and it opens no cursors and listens to nothing.
    The bulk path's temporary staging table stays with the session, as it did (``ON COMMIT DELETE ROWS``)."""
    del conn


class PostgresBase(Backend):
    """Both faces share this: one pool, one schema, one error table (``map_error``) for every operation."""

    def __init__(self, url: StorageURL) -> None:
        super().__init__(url)
        self.settings = Settings.from_url(url)
        self.schema = self.settings.schema
        self.retries = self.settings.retries
        self.backoff_s = 0.1
        self.transient_errors: tuple[type[BaseException], ...] = TRANSIENT
        self._pool: asyncpg.Pool | None = None

    def map_error(self, exc: BaseException) -> MemkitError | None:
        """What ``retrying`` raises for a driver error that is not transient (messages show the masked URL)."""
        return postgres_error(exc, f"Postgres at {self.url}")

    # -- connection -----------------------------------------------------------------------------
    async def open(self) -> None:
        if self._pool is not None:
            return
        settings = self.settings
        try:
            with anyio.fail_after(settings.connect_timeout):
                pool = await asyncpg.create_pool(
                    settings.dsn, min_size=settings.pool_min, max_size=settings.pool_max,
                    timeout=settings.connect_timeout, init=register_vector_codec, reset=_keep_session,
                )  # fmt: skip
        except REFUSED as exc:
            raise BackendRefusedError(f"Postgres at {self.url} refused the connection: {exc}") from exc
        except pg.ClientConfigurationError as exc:
            raise InvalidURLError(f"{self.url}: {exc}") from exc
        except _UNREACHABLE as exc:
            raise BackendUnavailableError(f"cannot reach Postgres at {self.url}: {type(exc).__name__}: {exc}") from exc
        except Exception as exc:
            mapped = self.map_error(exc)
            if mapped is None:
                raise
            raise mapped from exc
        self._pool = pool
        try:
            await self.setup()
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise NotOpenError.closed(self.owner, "the Postgres backend is not open; use 'async with backend:'")
        return self._pool

    def table(self, table_name: str) -> str:
        return f'"{self.schema}"."{table_name}"'

    @retrying
    async def setup(self) -> None:
        """Create or upgrade the schema in place; idempotent, serialised across clients by an advisory lock."""
        meta = self.table("memkit_meta")
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('memkit.setup'))")
            for statement in schema_ddl(self.schema):
                await conn.execute(statement)
            current = await conn.fetchval(f"SELECT value FROM {meta} WHERE key = $1", "version")
            if current is not None and int(current) > SCHEMA_VERSION:
                raise BackendError(f"schema {self.schema} was created by a newer memkit (version {current})")
            if current is not None and int(current) == SCHEMA_VERSION:
                return
            if current is not None:  # written by an older memkit: upgrade every table it made
                for statement in upgrade_schema_ddl(self.schema, int(current)):
                    await conn.execute(statement)
                for row in await conn.fetch(f"SELECT table_name FROM {self.table('memkit_collections')}"):
                    for statement in upgrade_collection_ddl(self.schema, row["table_name"], int(current)):
                        await conn.execute(statement)
            await conn.execute(
                f"INSERT INTO {meta} (key, value) VALUES ($1, $2) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                "version",
                str(SCHEMA_VERSION),
            )
