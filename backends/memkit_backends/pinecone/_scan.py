"""A scan page from the records Pinecone's fetch by metadata returned, in (timestamp, id) order.

Pinecone returns a filter's matches in no set order and cannot sort them, so a page is found here: the
caller fetches every match from the cursor's timestamp on (``_ts >= t``, or ``<= t`` newest first), and
the page is the ``limit`` first of them after the cursor. The cursor is the last (timestamp, id) seen, the
same keyset cursor as the embedded backends' (never an offset): a record present for the whole scan is
visited exactly once whatever is written meanwhile. The cost is reading the rest of the scope per page.
"""

from __future__ import annotations

from collections.abc import Sequence

from pinecone.models.vectors.vector import Vector

from memkit.backend import Page, Record
from memkit_backends._embedded.cursor import decode_scan_cursor, encode_scan_cursor
from memkit_backends.pinecone._layout import decode_record

__all__ = ["decode_cursor", "page_of"]

decode_cursor = decode_scan_cursor


def page_of(rows: Sequence[Vector], after: tuple[float, str] | None, *, limit: int, newest_first: bool) -> Page:
    records: list[Record] = [decode_record(v.metadata or {}, list(v.values)) for v in rows]
    records.sort(key=lambda r: (r.timestamp, r.id), reverse=newest_first)
    if after is not None:
        records = [r for r in records if ((r.timestamp, r.id) < after if newest_first else (r.timestamp, r.id) > after)]
    page = records[:limit]
    more = len(records) > limit
    return Page(records=page, next_cursor=encode_scan_cursor(page[-1].timestamp, page[-1].id) if more else None)
