"""Retrying idempotent backend operations across lost connections, with exponential backoff."""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import anyio

from memkit.errors import BackendUnavailableError

__all__ = ["Retrying", "retrying"]

P = ParamSpec("P")
T = TypeVar("T")
B = TypeVar("B", bound="Retrying")

_retrying: contextvars.ContextVar[bool] = contextvars.ContextVar("memkit_retrying", default=False)
"""Set while a retrying operation runs: operations it calls run once, so retries never nest (an upsert
calling ensure_collection would otherwise retry (retries + 1) ** 2 times)."""


class Retrying(Protocol):
    retries: int
    backoff_s: float
    transient_errors: tuple[type[BaseException], ...]

    @property
    def url(self) -> object: ...

    def map_error(self, exc: BaseException) -> BaseException | None:
        """The memkit error for a driver error (``map_errors``), or None to let it pass."""
        ...


def retrying(
    method: Callable[Concatenate[B, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[B, P], Coroutine[Any, Any, T]]:
    """Re-run an idempotent operation after a transient failure: up to ``retries`` times, waiting
    ``backoff_s * 2**attempt`` (at most 2 s) in between, then ``BackendUnavailableError``. Every other
    driver error is mapped to a memkit error by the backend's ``map_error``.

    Writes are transactions (or single commands), so a failed attempt left nothing behind; a write
    whose acknowledgement was lost is repeated as the same upsert or delete, which changes nothing,
    and a repeated compare-and-set reports the success of the first (the contract's idempotency).
    """

    @functools.wraps(method)
    async def wrapper(self: B, *args: P.args, **kwargs: P.kwargs) -> T:
        if _retrying.get():
            return await method(self, *args, **kwargs)
        token = _retrying.set(True)
        try:
            return await _with_retries(self, method, args, kwargs)
        finally:
            _retrying.reset(token)

    return wrapper  # type: ignore[return-value]  # functools.wraps loses the ParamSpec here


async def _with_retries(self: B, method: Callable[..., Coroutine[Any, Any, T]], args: Any, kwargs: Any) -> T:
    attempt = 0
    while True:
        try:
            return await method(self, *args, **kwargs)
        except self.transient_errors as exc:
            if attempt >= self.retries:
                raise BackendUnavailableError(f"{self.url} unreachable after {attempt} retries: {exc}") from exc
        except BackendUnavailableError as exc:
            if attempt >= self.retries or not isinstance(exc.__cause__, self.transient_errors):
                raise
        except Exception as exc:
            mapped = self.map_error(exc)
            if mapped is None or mapped is exc:
                raise
            raise mapped from exc
        await anyio.sleep(min(self.backoff_s * 2**attempt, 2.0))
        attempt += 1
