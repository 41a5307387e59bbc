"""The Pinecone SDK's errors as memkit's, applied to every operation by ``operation``.

Retries are the SDK's own, not memkit's: its transport retries 429, 408 and 5xx answers and lost
connections 3 times after the first attempt, waiting as ``Retry-After`` says (capped at 60 s) or with
decorrelated jitter from 0.25 s, under a per-host retry budget that stops retrying in a total outage. A
second layer here would multiply the attempts (4 x 4). What is still failing when those bounds run out
is raised as ``BackendUnavailableError``; a refused key as ``BackendRefusedError`` at once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, Final, ParamSpec, Protocol, TypeVar

from pinecone.errors.exceptions import (
    ApiError,
    ForbiddenError,
    PayloadTooLargeError,
    PaymentRequiredError,
    PineconeConnectionError,
    PineconeError,
    PineconeTimeoutError,
    PineconeTypeError,
    PineconeValueError,
    RateLimitError,
    ResponseParsingError,
    ServiceError,
    UnauthorizedError,
)

from memkit.errors import (
    BackendError,
    BackendRefusedError,
    BackendTimeoutError,
    BackendUnavailableError,
    ContentError,
    CorruptDataError,
    MemkitError,
    ValidationError,
)
from memkit_backends._server.errors import ErrorTable, map_error

__all__ = ["PINECONE_ERRORS", "operation", "pinecone_error"]

P = ParamSpec("P")
T = TypeVar("T")

PINECONE_ERRORS: Final[ErrorTable] = (
    (UnauthorizedError, BackendRefusedError),  # a wrong or revoked API key
    (ForbiddenError, BackendRefusedError),
    (PaymentRequiredError, BackendRefusedError),
    (RateLimitError, BackendUnavailableError),  # still throttled after the SDK's retries
    (ServiceError, BackendUnavailableError),  # 5xx after the SDK's retries
    (PayloadTooLargeError, ContentError),
    (PineconeTimeoutError, BackendTimeoutError),
    (PineconeConnectionError, BackendUnavailableError),
    (ResponseParsingError, CorruptDataError),
    (PineconeValueError, ValidationError),  # refused by the SDK before anything was sent
    (PineconeTypeError, ValidationError),
    (ApiError, BackendError),  # 400 (a filter, a dimension) and 404 carry the server's message
    (PineconeError, BackendError),
)


def _status(exc: BaseException) -> str:
    status = getattr(exc, "status_code", None)
    return f" (HTTP {status})" if status is not None else ""


def pinecone_error(exc: BaseException, where: object) -> MemkitError | None:
    """The memkit error for an SDK error (a memkit error passes through), or None when unmapped."""
    mapped = map_error(PINECONE_ERRORS, exc, where)
    if mapped is None or mapped is exc:
        return mapped
    if isinstance(mapped, BackendUnavailableError) and not isinstance(exc, PineconeConnectionError):
        return BackendUnavailableError(f"{where}: Pinecone kept answering {type(exc).__name__}{_status(exc)} "
                                       f"through the SDK's retries: {exc}")  # fmt: skip
    return type(mapped)(f"{mapped}{_status(exc)}")


class _HasURL(Protocol):
    @property
    def url(self) -> object: ...


B = TypeVar("B", bound=_HasURL)


def operation(
    method: Callable[Concatenate[B, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[B, P], Coroutine[Any, Any, T]]:
    """A backend operation whose SDK errors are raised as memkit errors, chained."""

    @functools.wraps(method)
    async def mapped(self: B, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(self, *args, **kwargs)
        except MemkitError:
            raise
        except Exception as exc:
            error = pinecone_error(exc, self.url)
            if error is None:
                raise
            raise error from exc

    return mapped  # type: ignore[return-value]  # functools.wraps loses the ParamSpec here
