"""postgresql://: URL options, and every driver error surfacing as the memkit error it means."""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from memkit_backends.postgres import PostgresBackend

from memkit import open_backend
from memkit.backend import Backend, Record, Scope, StorageURL
from memkit.errors import (
    BackendRefusedError,
    BackendTimeoutError,
    InvalidURLError,
    MemkitError,
    ValidationError,
)
from memkit.testing import make_record
from memkit.testing._helpers import query, unit
from tests.conftest import fresh_postgres_url, with_option

pytestmark = pytest.mark.anyio

COLLECTION = "errors"


async def _open(url: str) -> PostgresBackend:
    backend = PostgresBackend(StorageURL(url))
    await backend.open()
    return backend


@pytest.fixture
async def backend(postgres_url: str) -> AsyncIterator[PostgresBackend]:
    backend = await _open(fresh_postgres_url(postgres_url))
    try:
        await backend.ensure_collection(COLLECTION, 8)
        yield backend
    finally:
        await backend.aclose()


def _with(record: Record, **changes: Any) -> Record:
    return Record(**{**{name: getattr(record, name) for name in record.__struct_fields__}, **changes})


# -- URL options -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "options",
    ["synchronus=full", "pool_max=abc", "pool_min=5&pool_max=2", "connect_timeout=0", "vector=float",
     "index=ivf", "retries=-1", "sslmode=sometimes", "schema=Bad-Name", "port=0"],
)  # fmt: skip
def test_bad_options_are_refused_when_the_url_is_read(options: str) -> None:
    with pytest.raises(InvalidURLError):
        PostgresBackend(StorageURL(f"postgresql://u@127.0.0.1/db?{options}"))


def test_pass_through_options_reach_asyncpg_and_memkits_do_not() -> None:
    backend = PostgresBackend(StorageURL("postgres://u:pw@h/db?schema=s&pool_max=3&sslmode=require&application_name=a"))
    assert backend.settings.dsn == "postgresql://u:pw@h/db?sslmode=require&application_name=a"
    assert backend.settings.pool_max == 3 and backend.schema == "s"
    assert "pw" not in repr(backend.settings) and "pw" not in repr(backend)


async def test_pass_through_settings_apply_to_the_session(postgres_url: str) -> None:
    url = fresh_postgres_url(postgres_url, application_name="memkit-test", statement_timeout="5s")
    backend = await _open(url)
    async with backend.pool.acquire() as conn:
        assert await conn.fetchval("SHOW application_name") == "memkit-test"
        assert await conn.fetchval("SHOW statement_timeout") == "5s"
    await backend.aclose()


# -- refused, timed out, unreachable -------------------------------------------------------------------
@pytest.mark.parametrize("change", ["role", "database", "nologin"])
async def test_a_server_that_refuses_says_so_at_open(postgres_url: str, change: str) -> None:
    if change == "nologin":
        admin = await _open(fresh_postgres_url(postgres_url))
        async with admin.pool.acquire() as conn:
            await conn.execute("DROP ROLE IF EXISTS memkit_nologin")
            await conn.execute("CREATE ROLE memkit_nologin NOLOGIN")
        await admin.aclose()
    base = StorageURL(postgres_url)
    host = f"?host={base.options['host']}" if "host" in base.options else ""
    netloc = f"{base.host or ''}" + (f":{base.port}" if base.port else "")
    user, database = {"role": ("no_such_role", base.database), "database": (base.username, "no_such_db"),
                      "nologin": ("memkit_nologin", base.database)}[change]  # fmt: skip
    url = with_option(f"postgresql://{user}@{netloc}/{database}{host}", "password", "hunter2")
    with pytest.raises(BackendRefusedError) as caught:
        async with open_backend(url):
            pass
    assert "hunter2" not in str(caught.value) and "***" in str(caught.value)
    assert isinstance(caught.value.__cause__, asyncpg.PostgresError)


async def test_a_statement_timeout_is_a_timeout_not_retried(postgres_url: str) -> None:
    backend = await _open(fresh_postgres_url(postgres_url, statement_timeout="200"))
    async with backend:
        await backend.kv_set("ns", "held", b"v")
        async with backend.pool.acquire() as conn, conn.transaction():
            await conn.execute(f"SELECT 1 FROM {backend.table('memkit_kv')} WHERE key = 'held' FOR UPDATE")
            started = time.monotonic()
            with pytest.raises(BackendTimeoutError) as caught:
                await backend.kv_set("ns", "held", b"w")
            assert time.monotonic() - started < 2, "a timeout must not be retried"
        assert isinstance(caught.value.__cause__, asyncpg.QueryCanceledError)
        assert await backend.kv_get("ns", "held") == b"v"


# -- input the server cannot hold, refused before the round trip -----------------------------------------
@pytest.mark.parametrize(
    "changes",
    [{"id": "a\x00b"}, {"text": "nul \x00 here"}, {"scope": Scope(user_id="al\x00ice")},
     {"scope": Scope(user_id="alice", session_id="\x00")}, {"fields": {"kind": "a\x00"}},
     {"fields": {"ki\x00nd": "a"}}, {"fields": {"tags": ("ok", "n\x00")}}, {"fields": {"n": math.nan}},
     {"fields": {"n": math.inf}}, {"importance": math.nan}, {"timestamp": math.inf}],
)  # fmt: skip
async def test_unstorable_records_are_refused_and_nothing_is_written(backend: Backend, changes: dict[str, Any]) -> None:
    good = make_record("good", seed=1)
    bad = _with(make_record("bad", seed=2), **changes)
    for write in (backend.upsert(COLLECTION, [good, bad]), backend.replace(COLLECTION, bad, expected_body=None)):
        with pytest.raises(ValidationError):
            await write
    assert await backend.count(COLLECTION, Scope(), all_scopes=True) == 0


@pytest.mark.parametrize("filters", [{"kind": "a\x00"}, {"k\x00": 1}, {"n": math.nan}, {"kind": ["a", "\x00"]}])
async def test_unmatchable_filters_are_refused(backend: Backend, filters: dict[str, Any]) -> None:
    alice = Scope(user_id="alice")
    with pytest.raises(ValidationError):
        await backend.scan(COLLECTION, alice, filters=filters)
    with pytest.raises(ValidationError):
        await backend.count(COLLECTION, alice, filters=filters)
    with pytest.raises(ValidationError):
        await backend.query(COLLECTION, query(alice, vector=unit(1), filters=filters))


@pytest.mark.parametrize("cursor", ["not base64!", "bm90IGpzb24=", "WzEsMiwzXQ==", "WyJ4IiwgMV0=", ""])
async def test_a_malformed_cursor_is_a_validation_error(backend: Backend, cursor: str) -> None:
    with pytest.raises(ValidationError):
        await backend.scan(COLLECTION, Scope(user_id="alice"), cursor=cursor)
    with pytest.raises(ValidationError):
        await backend.kv_scan("ns", cursor=cursor)


async def test_server_side_refusals_are_validation_errors(backend: Backend) -> None:
    """What only the server can judge still comes back as a memkit error, with the input named."""
    long_user = secrets.token_urlsafe(3000)  # incompressible: past the 2,704-byte limit of a btree row
    with pytest.raises(ValidationError, match="scope ids"):
        await backend.upsert(COLLECTION, [make_record("r", long_user, seed=1)])
    with pytest.raises(ValidationError, match="record id"):
        await backend.upsert(COLLECTION, [make_record(secrets.token_urlsafe(3000), seed=1)])
    with pytest.raises(ValidationError, match="namespace and key"):
        await backend.kv_set("ns", secrets.token_urlsafe(3000), b"v")
    with pytest.raises(ValidationError):  # a lone surrogate cannot be encoded as UTF-8
        await backend.get(COLLECTION, ["\ud800"])
    with pytest.raises(ValidationError):  # NUL in a read: the server's refusal, mapped
        await backend.get(COLLECTION, ["a\x00"])
    assert await backend.count(COLLECTION, Scope(), all_scopes=True) == 0


async def test_only_memkit_errors_leave_any_operation(backend: PostgresBackend) -> None:
    """A table dropped behind the backend's back: every operation fails with a memkit error."""
    await backend.upsert(COLLECTION, [make_record("r", seed=1)])
    async with backend.pool.acquire() as conn:
        await conn.execute(f"DROP TABLE {backend._records(COLLECTION)} CASCADE")
    alice = Scope(user_id="alice")
    operations = [
        backend.upsert(COLLECTION, [make_record("r", seed=1)]), backend.get(COLLECTION, ["r"]),
        backend.scan(COLLECTION, alice), backend.count(COLLECTION, alice), backend.delete(COLLECTION, ["r"]),
        backend.touch(COLLECTION, {"r": 1}, time.time()), backend.query(COLLECTION, query(alice, vector=unit(1))),
        backend.replace(COLLECTION, make_record("r", seed=1), expected_body=b"x"),
    ]  # fmt: skip
    for operation in operations:
        with pytest.raises(MemkitError) as caught:
            await operation
        assert isinstance(caught.value.__cause__, asyncpg.PostgresError)


def test_capabilities() -> None:
    caps = PostgresBackend.capabilities
    assert all((caps.records, caps.kv, caps.vector_search, caps.text_search, caps.ttl, caps.persistent,
                caps.filtered_scan, caps.atomic_replace))  # fmt: skip
