"""Retention on write: keep the newest ``keep_last`` episodes of an owner (a user and agent), delete the rest.

Safe under concurrent writers in any number of processes without a lock, because an episode is deleted only
when the writer saw ``keep_last`` newer ones: each writer scans newest first and deletes what lies beyond
the first ``keep_last``. The newest ``keep_last`` episodes ever written are therefore never deleted by
retention, and each writer leaves at most ``keep_last`` behind it, so concurrent records leave at most
``keep_last`` plus the number of writers still between their write and their scan. The cheaper "delete
the oldest ``count - keep_last``" is not safe: two writers that both counted one too many, one deleting
after the other's scan, remove two episodes where one was due (a newer one among them).
"""

from __future__ import annotations

from typing import Final

from memkit.backend import RecordStore, Scope
from memkit.layers.episodic._codec import OWNER_FIELD, owner_key

__all__ = ["trim"]

_PAGE: Final = 1_000


async def trim(store: RecordStore, collection: str, owner: Scope, keep_last: int, now: float) -> int:
    """Delete ``owner``'s live episodes beyond its newest ``keep_last``; returns how many were deleted.

    One ``count`` when nothing is due (the usual case below the limit); otherwise a newest-first scan of the
    owner's episodes, which reads ``keep_last`` records before the ones it deletes."""
    filters = {OWNER_FIELD: owner_key(owner)}
    total = await store.count(collection, owner, filters=filters, now=now)
    if total <= keep_last:
        return 0
    seen, doomed, cursor = 0, [], None
    while True:
        page = await store.scan(collection, owner, filters=filters, limit=min(_PAGE, total), cursor=cursor,
                                now=now, newest_first=True)  # fmt: skip
        for record in page.records:
            seen += 1
            if seen > keep_last:
                doomed.append(record.id)
        if page.next_cursor is None or not page.records:
            break
        cursor = page.next_cursor
    deleted = 0
    for start in range(0, len(doomed), _PAGE):
        deleted += await store.delete(collection, doomed[start : start + _PAGE], owner)
    return deleted
