"""Scan pages in (timestamp, id) order with a keyset cursor, on Weaviate's sort by ``ts``.

Weaviate sorts by a property but cannot compare text ids in a filter, and its cursor API (``after``)
cannot be combined with filters, so a page is read as: every object at the cursor's timestamp (ties are
few) with an id past the cursor's, then the next objects by timestamp (``ts > t``, sorted, ``limit + 1``
of them). When that list is full its last timestamp may go on past it, so that timestamp's objects are
read whole instead. The page is the first ``limit`` in (timestamp, id) order; the cursor is the last
(timestamp, id) returned: a record present for the whole scan is visited exactly once, whatever is
written meanwhile.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from memkit.backend import Page
from memkit_backends._embedded.cursor import decode_scan_cursor, encode_scan_cursor
from memkit_backends.weaviate._filters import And, Cond, Where
from memkit_backends.weaviate._io import QUERY_MAX

__all__ = ["Row", "decode_cursor", "next_rows"]

decode_cursor = decode_scan_cursor
Row = tuple[float, str, Any]
"""(timestamp, record id, the object)."""
Fetch = Callable[[Where, int, "tuple[str, bool] | None"], Awaitable[Sequence[Row]]]


async def next_rows(
    fetch: Fetch, where: And, after: tuple[float, str] | None, *, limit: int, newest_first: bool
) -> tuple[list[Row], bool]:
    """The next ``limit`` rows after ``after`` in (timestamp, id) order (reversed when ``newest_first``), and
    whether more follow. ``fetch(where, limit, sort)`` returns rows the filter admits."""
    rows: list[Row] = []
    later = "lt" if newest_first else "gt"
    beyond = where
    if after is not None:
        at, last_id = after
        ties = await fetch(And((*where.parts, Cond("ts", "eq", at))), QUERY_MAX, None)
        rows += [r for r in ties if (r[1] < last_id if newest_first else r[1] > last_id)]
        beyond = And((*where.parts, Cond("ts", later, at)))
    more = list(await fetch(beyond, limit + 1, ("ts", not newest_first)))
    if len(more) > limit:  # the last timestamp may go on past the list: read it whole
        edge = more[-1][0]
        more = [r for r in more if r[0] != edge]
        more += await fetch(And((*where.parts, Cond("ts", "eq", edge))), QUERY_MAX, None)
    rows += more
    rows.sort(key=lambda r: (r[0], r[1]), reverse=newest_first)
    return rows[:limit], len(rows) > limit


def page_of(records: Sequence[Any], more: bool) -> Page:
    page = list(records)
    cursor = encode_scan_cursor(page[-1].timestamp, page[-1].id) if more and page else None
    return Page(records=page, next_cursor=cursor)
