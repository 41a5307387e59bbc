"""Which in-process work runs on the event loop and which in a worker thread (``memory://`` and the
``sqlite://`` copy alike)."""

from __future__ import annotations

from typing import Final

from memkit.backend import Scope
from memkit_backends._embedded.columnar import ColumnarCollection

__all__ = ["OFFLOAD_MIN_ROWS", "offloaded"]

OFFLOAD_MIN_ROWS: Final = 20_000
"""Scans of collections this large (queries, scans, counts, near-duplicate checks, big writes) run in a worker
thread so the event loop never stalls. Small operations (a get, a one-record write) stay on the loop: a
thread hop costs ~50-190 us (this 2-core machine), and at 20k rows per-item hops were most of a store_many
batch (profiled)."""


def offloaded(found: ColumnarCollection, *, scans: bool, scope: Scope | None) -> bool:
    """Whether the work goes to a thread: a scan of ``scope``'s rows (every row for None) that is large."""
    return scans and (len(found) if scope is None else found.scope_size(scope)) >= OFFLOAD_MIN_ROWS
