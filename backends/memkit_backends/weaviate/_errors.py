"""The Weaviate client's errors as memkit's, and bounded retries of transient failures.

The client raises its own classes and keeps the driver error it caught in the chain (gRPC's
``AioRpcError``, httpx's transport errors), so a failure is classified by the gRPC status code or HTTP
status it carries, never by its message:

- transient, retried here (``retries`` times, backoff 0.1 s doubling up to 2 s, then
  ``BackendUnavailableError``): HTTP 429 / 502 / 503 / 504, gRPC ``UNAVAILABLE`` and ``RESOURCE_EXHAUSTED``
  (Weaviate's 429), a refused or lost connection;
- not retried again: a ``WeaviateRetryError`` (the client itself retried ``UNAVAILABLE`` searches with
  backoff from 1 s to 32 s: a second layer would multiply minutes), raised as ``BackendUnavailableError``;
- refused at once: HTTP 401 / 403, gRPC ``UNAUTHENTICATED`` / ``PERMISSION_DENIED`` (``BackendRefusedError``);
- a timeout (``BackendTimeoutError``), everything else ``BackendError`` with the server's message.

Every operation is idempotent (upserts by UUID, deletes by filter, compare-and-set that reports a retried
success), so a retried write never duplicates.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Concatenate, Final, ParamSpec, Protocol, TypeVar

import anyio

from memkit.errors import (
    BackendError,
    BackendRefusedError,
    BackendTimeoutError,
    BackendUnavailableError,
    MemkitError,
    NotOpenError,
)

__all__ = ["TRANSIENT_GRPC", "TRANSIENT_HTTP", "classify", "operation"]

P = ParamSpec("P")
T = TypeVar("T")

TRANSIENT_HTTP: Final = frozenset({429, 502, 503, 504})
REFUSED_HTTP: Final = frozenset({401, 403})
TRANSIENT_GRPC: Final = frozenset({"UNAVAILABLE", "RESOURCE_EXHAUSTED"})
REFUSED_GRPC: Final = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED"})
FIRST_BACKOFF_S: Final = 0.1
"""Enough for 4 retries (1.5 s) to outlast gRPC's first reconnect backoff (1 s, with jitter) after a drop."""
MAX_BACKOFF_S: Final = 2.0
_TIMEOUTS: Final = frozenset({"WeaviateTimeoutError", "ReadTimeout", "ConnectTimeout", "WriteTimeout", "PoolTimeout"})
_CONNECTION: Final = frozenset({"WeaviateConnectionError", "WeaviateStartUpError", "ConnectError", "ReadError",
                                "RemoteProtocolError", "WriteError", "CloseError"})  # fmt: skip
_inside: contextvars.ContextVar[bool] = contextvars.ContextVar("memkit_weaviate_retrying", default=False)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _grpc_code(error: BaseException) -> str | None:
    code = getattr(error, "code", None)
    if type(error).__name__ not in ("AioRpcError", "_InactiveRpcError", "RpcError") or not callable(code):
        return None
    value = code()
    return str(getattr(value, "name", value))


def classify(exc: BaseException) -> tuple[type[MemkitError], bool, str]:
    """(the memkit error class, whether to retry, what to say) for an error the client raised."""
    names = [type(e).__name__ for e in _chain(exc)]
    if "WeaviateRetryError" in names:
        return BackendUnavailableError, False, "the client's own retries ran out"
    for error in _chain(exc):
        code = _grpc_code(error)
        if code is not None:
            if code in TRANSIENT_GRPC:
                return BackendUnavailableError, True, f"gRPC {code}"
            if code in REFUSED_GRPC:
                return BackendRefusedError, False, f"gRPC {code}"
            if code == "DEADLINE_EXCEEDED":
                return BackendTimeoutError, False, f"gRPC {code}"
            return BackendError, False, f"gRPC {code}"
        status = getattr(error, "status_code", None)
        if type(error).__name__ in ("UnexpectedStatusCodeError", "InsufficientPermissionsError") and status:
            if status in TRANSIENT_HTTP:
                return BackendUnavailableError, True, f"HTTP {status}"
            if status in REFUSED_HTTP:
                return BackendRefusedError, False, f"HTTP {status}"
            return BackendError, False, f"HTTP {status}"
    chain = list(_chain(exc))
    if any(isinstance(e, TimeoutError) for e in chain) or any(n in _TIMEOUTS for n in names):
        return BackendTimeoutError, False, "timed out"
    if any(isinstance(e, OSError) for e in chain) or any(n in _CONNECTION for n in names):
        return BackendUnavailableError, True, "connection failed"
    if "WeaviateClosedClientError" in names:
        return NotOpenError, False, "the client is closed"
    return BackendError, False, "refused"


class _Retrying(Protocol):
    @property
    def url(self) -> object: ...

    @property
    def retries(self) -> int: ...


B = TypeVar("B", bound=_Retrying)


def operation(
    method: Callable[Concatenate[B, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[B, P], Coroutine[Any, Any, T]]:
    """A backend operation: client errors raised as memkit errors (chained), transient ones retried first.
    Operations called by an operation run once (retries never nest)."""

    @functools.wraps(method)
    async def wrapper(self: B, *args: P.args, **kwargs: P.kwargs) -> T:
        if _inside.get():
            return await method(self, *args, **kwargs)
        token = _inside.set(True)
        try:
            return await _attempts(self, method, args, kwargs)
        finally:
            _inside.reset(token)

    return wrapper  # type: ignore[return-value]  # functools.wraps loses the ParamSpec here


async def _attempts(self: B, method: Callable[..., Coroutine[Any, Any, T]], args: Any, kwargs: Any) -> T:
    attempt = 0
    while True:
        try:
            return await method(self, *args, **kwargs)
        except MemkitError:
            raise
        except Exception as exc:
            error, transient, why = classify(exc)
            if not transient or attempt >= self.retries:
                tried = f" after {attempt} retries" if transient else ""
                raise error(f"{self.url}: Weaviate {why}{tried}: {type(exc).__name__}: {_short(exc)}") from exc
        await anyio.sleep(min(FIRST_BACKOFF_S * 2**attempt, MAX_BACKOFF_S))
        attempt += 1


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 500 else text[:500] + "..."
