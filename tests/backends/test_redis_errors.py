"""Redis errors and options: refusals said as such, timeouts not retried, retries never nested, options checked."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from memkit_backends.redis import RedisBackend
from memkit_backends.redis import _bulk as bulk
from memkit_backends.redis._backend import PLAIN, STACK
from redis.exceptions import ConnectionError as RedisConnectionError

from memkit import (
    BackendRefusedError,
    BackendTimeoutError,
    BackendUnavailableError,
    InvalidURLError,
    open_backend,
)
from memkit.backend import Scope
from memkit.testing import make_record
from tests.conftest import fresh_redis_url, with_option

pytestmark = pytest.mark.anyio


@pytest.fixture
def acl_user(redis_plain_url: str) -> Iterator[tuple[str, redis.Redis]]:
    """A user ``memkit-test`` with password ``right`` on the plain server; the URL without credentials."""
    client = redis.Redis.from_url(redis_plain_url)
    client.execute_command("ACL", "SETUSER", "memkit-test", "reset", "on", ">right", "~*", "&*", "+@all")
    yield redis_plain_url, client
    client.execute_command("ACL", "DELUSER", "memkit-test")
    client.close()


def with_user(url: str, user: str, password: str) -> str:
    return url.replace("redis://", f"redis://{user}:{password}@", 1)


async def test_a_server_that_refuses_says_so_at_open(acl_user: tuple[str, redis.Redis]) -> None:
    url, _ = acl_user
    for refused in (with_user(url, "memkit-test", "wrong"), url.rsplit("/", 1)[0] + "/999"):
        started = time.monotonic()
        with pytest.raises(BackendRefusedError) as caught:
            async with open_backend(refused):
                pass
        assert not isinstance(caught.value, BackendUnavailableError) and caught.value.__cause__ is not None
        assert "wrong" not in str(caught.value) and time.monotonic() - started < 1  # masked, and not retried
    async with open_backend(with_user(url, "memkit-test", "right")) as backend:
        await backend.kv_set("ns", "k", b"v")


async def test_a_password_refused_on_reconnect_is_not_retried(acl_user: tuple[str, redis.Redis]) -> None:
    url, admin = acl_user
    async with open_backend(with_option(with_user(url, "memkit-test", "right"), "retries", "6")) as backend:
        await backend.kv_set("ns", "k", b"v")
        admin.execute_command("ACL", "SETUSER", "memkit-test", "resetpass", ">changed")
        admin.execute_command("CLIENT", "KILL", "USER", "memkit-test")
        started = time.monotonic()
        with pytest.raises(BackendRefusedError):
            await backend.kv_get("ns", "k")
        assert time.monotonic() - started < 0.5  # six retries with backoff would take ~3 s


async def test_a_command_that_times_out_raises_at_once(redis_plain_url: str) -> None:
    url = with_option(with_option(fresh_redis_url(redis_plain_url), "socket_timeout", "0.1"), "retries", "6")
    async with open_backend(url) as backend:
        await backend.kv_set("ns", "k", b"v")
        admin = redis.Redis.from_url(redis_plain_url)
        admin.execute_command("CLIENT", "PAUSE", "500", "ALL")  # the server stops answering for 0.5 s
        started = time.monotonic()
        with pytest.raises(BackendTimeoutError) as caught:
            await backend.kv_get("ns", "k")
        assert isinstance(caught.value, TimeoutError) and time.monotonic() - started < 0.4
        admin.execute_command("CLIENT", "UNPAUSE")
        admin.close()
        assert await backend.kv_get("ns", "k") == b"v"  # the timed-out connection was not reused


class Failing:
    """Stands in for a redis-py call that always loses its connection; counts the attempts."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        raise RedisConnectionError("connection lost (test)")


async def test_retries_are_counted_once_per_operation(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Operations that call others (upsert -> ensure_collection, delete -> get) must not multiply attempts.
    async with open_backend(with_option(fresh_redis_url(redis_url), "retries", "2")) as backend:
        backend.backoff_s = 0.0  # type: ignore[attr-defined]
        await backend.ensure_collection("c", 8)
        failing = Failing()
        monkeypatch.setattr(bulk, "transaction", failing)
        with pytest.raises(BackendUnavailableError):
            await backend.upsert("c", [make_record("r", seed=1)])
        assert failing.calls == 3
        for call in (backend.get("c", ["r"]), backend.delete("c", ["r"], Scope(user_id="alice"))):
            failing = Failing()  # records are read by one script, deleted by a pipeline: both lose the connection
            monkeypatch.setattr(backend._client, "pipeline", failing)  # type: ignore[attr-defined]
            monkeypatch.setattr(backend, "_get_script", failing)
            with pytest.raises(BackendUnavailableError) as caught:
                await call
            assert failing.calls == 3 and isinstance(caught.value.__cause__, RedisConnectionError)
            monkeypatch.undo()


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("redis://h/0?connect_timeout=abc", "connect_timeout"),
        ("redis://h/0?retries=-1", "retries"),
        ("redis://h/0?index=ivf", "index"),
        ("redis://h/0?synchronus=full", "synchronus"),
        ("redis://h/0?ssl_cert_reqs=none", "ssl_cert_reqs"),  # TLS options need rediss://
        ("rediss://h/0?ssl_cert_reqs=sometimes", "ssl_cert_reqs"),
        ("redis://h/zero", "zero"),
    ],
)
def test_url_options_are_typed_and_checked(url: str, named: str) -> None:
    with pytest.raises(InvalidURLError, match=named):
        open_backend(url)


def test_tls_options_reach_redis_py() -> None:
    backend = open_backend("rediss://h:6380/2?ssl_cert_reqs=none&ssl_check_hostname=false&socket_timeout=3")
    kwargs = backend._client.connection_pool.connection_kwargs  # type: ignore[attr-defined]
    assert (kwargs["ssl_cert_reqs"], kwargs["ssl_check_hostname"], kwargs["socket_timeout"], kwargs["db"]) == (
        "none", False, 3.0, 2,
    )  # fmt: skip
    assert kwargs["retry"].get_retries() == 0  # no retries inside redis-py: the operations retry


async def test_capabilities_are_the_instances(redis_url: str, redis_plain_url: str) -> None:
    async with open_backend(fresh_redis_url(redis_url)) as stack, open_backend(redis_plain_url) as plain:
        assert stack.capabilities == STACK and plain.capabilities == PLAIN
        assert not plain.capabilities.records and not plain.capabilities.filtered_scan
    assert RedisBackend.capabilities == STACK
