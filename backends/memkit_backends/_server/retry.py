"""Retrying idempotent backend operations across lost connections, with exponential backoff."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import anyio

from memkit.errors import BackendUnavailableError

__all__ = ["Retrying", "retrying"]

P = ParamSpec("P")
T = TypeVar("T")
B = TypeVar("B", bound="Retrying")


class Retrying(Protocol):
    retries: int
    backoff_s: float
    transient_errors: tuple[type[BaseException], ...]

    @property
    def url(self) -> object: ...


def retrying(
    method: Callable[Concatenate[B, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[B, P], Coroutine[Any, Any, T]]:
    """Re-run an idempotent operation after a transient failure: up to ``retries`` times, waiting
    ``backoff_s * 2**attempt`` (at most 2 s) in between, then ``BackendUnavailableError``.

    Writes are transactions (or single commands), so a failed attempt left nothing behind; a write
    whose acknowledgement was lost is repeated as the same upsert or delete, which changes nothing.
    """

    @functools.wraps(method)
    async def wrapper(self: B, *args: P.args, **kwargs: P.kwargs) -> T:
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
            await anyio.sleep(min(self.backoff_s * 2**attempt, 2.0))
            attempt += 1

    return wrapper  # type: ignore[return-value]  # functools.wraps loses the ParamSpec here
