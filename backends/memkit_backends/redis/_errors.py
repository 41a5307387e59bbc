"""redis-py errors to memkit errors: one class table, applied to every operation by ``operation``.

redis-py files a refused password (``AuthenticationError``) under ``ConnectionError``, the class the
shared ``retrying`` treats as transient; ``operation`` raises it as ``BackendRefusedError`` first, so a
wrong password is said at once instead of being retried into "unreachable".
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, Final, ParamSpec, TypeVar

from redis.exceptions import (
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    NoPermissionError,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from memkit.backend import StorageURL
from memkit.errors import (
    BackendError,
    BackendRefusedError,
    BackendTimeoutError,
    BackendUnavailableError,
    MemkitError,
    NotOpenError,
)
from memkit_backends._server.errors import ErrorTable, map_error
from memkit_backends._server.retry import retrying

__all__ = ["REDIS_ERRORS", "RedisErrors", "is_missing_index", "operation", "redis_error"]

P = ParamSpec("P")
T = TypeVar("T")
B = TypeVar("B", bound="RedisErrors")

REDIS_ERRORS: Final[ErrorTable] = (
    (AuthenticationError, BackendRefusedError),  # a ConnectionError: listed before it
    (AuthenticationWrongNumberOfArgsError, BackendRefusedError),  # a username given to a Redis < 6
    (NoPermissionError, BackendRefusedError),  # an ACL user denied the command
    (RedisTimeoutError, BackendTimeoutError),
    (RedisConnectionError, BackendUnavailableError),
    (RedisError, BackendError),  # ResponseError (WRONGTYPE, OOM, syntax) and the rest
)
_REFUSED_CONNECTING: Final = (AuthenticationError,)
"""Refusals redis-py files under ConnectionError, which the retry loop would take for transient."""


def _is_bad_db_index(exc: BaseException) -> bool:
    # The one refusal redis-py has no class for: SELECT of a DB index the server lacks, a plain
    # ResponseError ("DB index is out of range" on Redis 6+, "invalid DB index" before).
    text = str(exc)
    return isinstance(exc, ResponseError) and ("DB index is out of range" in text or "invalid DB index" in text)


def is_missing_index(exc: BaseException) -> bool:
    """An FT.* command on an index that does not exist (dropped by another client, or never made): a
    ResponseError without a class of its own ("Unknown index name" on 2.10, "no such index" before)."""
    text = str(exc).lower()
    return isinstance(exc, ResponseError) and ("unknown index name" in text or "no such index" in text)


def redis_error(exc: BaseException, where: object) -> MemkitError | None:
    """The memkit error for a redis-py error (a memkit error passes through), or None when unmapped."""
    if _is_bad_db_index(exc):
        return BackendRefusedError(f"{where}: the server has no such database: {exc}")
    return map_error(REDIS_ERRORS, exc, where)


class RedisErrors:
    """What the shared ``retrying`` reads from a backend: retries, backoff, transient errors, mapping."""

    url: StorageURL
    owner: str | None
    retries: int
    backoff_s: float = 0.05
    is_open: bool = False
    """Set by ``open()``, cleared by ``aclose()``: redis-py reconnects on any command, so a layer kept past
    ``Memkit.aclose()`` went on reading and writing here while memory://, sqlite:// and Postgres refused."""
    transient_errors: tuple[type[BaseException], ...] = (RedisConnectionError,)
    """Lost or refused connections, and a server still loading its data (BusyLoadingError). Timeouts are
    not retried: a command that ran out of time is raised as ``BackendTimeoutError`` at once, rather
    than sent again (up to ``retries`` times the socket timeout) to a server already too slow."""

    def map_error(self, exc: BaseException) -> BaseException | None:
        return redis_error(exc, self.url)


def operation(
    method: Callable[Concatenate[B, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[B, P], Coroutine[Any, Any, T]]:
    """A backend operation: retried after a lost connection (the shared ``retrying``, which never nests),
    every redis-py error mapped, a refused password raised as such on the first attempt."""

    @functools.wraps(method)
    async def refusals_first(self: B, *args: P.args, **kwargs: P.kwargs) -> T:
        if not self.is_open:
            raise NotOpenError.closed(
                self.owner,
                f"the Redis backend ({self.url}) is not open (never opened, or closed); use "
                "'async with Memkit(...) as mem:' (or 'async with backend:')",
            )
        try:
            return await method(self, *args, **kwargs)
        except _REFUSED_CONNECTING as exc:
            raise BackendRefusedError(f"{self.url}: {type(exc).__name__}: {exc}") from exc

    return retrying(refusals_first)  # type: ignore[arg-type]  # functools.wraps loses the ParamSpec
