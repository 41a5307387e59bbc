"""One page of a columnar scan: rows ordered by (timestamp, id), keyset-paginated."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from memkit.backend import Page
from memkit.errors import ValidationError
from memkit_backends._embedded.columnar import ColumnarCollection
from memkit_backends._embedded.cursor import decode_scan_cursor, encode_scan_cursor

__all__ = ["scan_page"]


def scan_page(
    collection: ColumnarCollection, rows: npt.NDArray[np.int64], limit: int, cursor: str | None, newest_first: bool
) -> Page:
    """The page of ``rows`` (the matching rows) after ``cursor``: the last (timestamp, id) pair seen."""
    if limit < 1:
        raise ValidationError(f"scan limit must be >= 1, got {limit}")
    if cursor is not None:
        rows = _beyond(collection, rows, decode_scan_cursor(cursor), newest_first)
    more = rows.shape[0] > limit
    timestamps = collection.timestamps_of(rows)
    if more:  # keep the `limit` first timestamps (and their ties) before sorting anything
        key = -timestamps if newest_first else timestamps
        kth = np.partition(key, limit - 1)[limit - 1]
        keep = key <= kth
        rows, timestamps = rows[keep], timestamps[keep]
    ordered = sorted(
        zip(timestamps.tolist(), collection.ids_of(rows), rows.tolist(), strict=True), reverse=newest_first
    )[:limit]
    records = [collection.record_at(row) for _, _, row in ordered]
    next_cursor = encode_scan_cursor(ordered[-1][0], ordered[-1][1]) if more else None
    return Page(records=records, next_cursor=next_cursor)


def _beyond(
    collection: ColumnarCollection, rows: npt.NDArray[np.int64], after: tuple[float, str], newest_first: bool
) -> npt.NDArray[np.int64]:
    """The rows strictly after the cursor's (timestamp, id) in scan order."""
    timestamps = collection.timestamps_of(rows)
    last_ts, last_id = after
    keep = timestamps < last_ts if newest_first else timestamps > last_ts
    ties = np.flatnonzero(timestamps == last_ts)
    for i, record_id in zip(ties.tolist(), collection.ids_of(rows[ties]), strict=True):  # ties: compare ids
        keep[i] = record_id < last_id if newest_first else record_id > last_id
    return rows[keep]
