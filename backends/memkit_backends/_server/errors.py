"""Driver errors to memkit errors, httpx style: one table per adapter, applied to every operation.

An adapter lists ``(driver exception class, memkit error class)`` pairs, most specific first; the
first match wins and the driver error is chained. Nothing is recognised by its message where the
driver has a class for it.
"""

from __future__ import annotations

from collections.abc import Sequence

from memkit.errors import MemkitError

__all__ = ["ErrorTable", "map_error"]

ErrorTable = Sequence[tuple[type[BaseException], type[MemkitError]]]


def map_error(table: ErrorTable, exc: BaseException, where: object) -> MemkitError | None:
    """The memkit error for ``exc`` (a memkit error passes through unchanged), or None when unmapped."""
    if isinstance(exc, MemkitError):
        return exc
    for driver_error, memkit_error in table:
        if isinstance(exc, driver_error):
            return memkit_error(f"{where}: {type(exc).__name__}: {exc}")
    return None
