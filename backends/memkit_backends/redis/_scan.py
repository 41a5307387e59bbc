"""Scans by (timestamp, id) with a keyset cursor on RediSearch.

FT.SEARCH sorts by one field, ``ts`` (a SORTABLE NUMERIC), and breaks its ties in no set order; ids
are put in order here. A page after the cursor ``(t, id)`` is the records at exactly ``t`` whose id
comes after (read whole, ordered by id here), then the first ``limit + 1`` rows of ``@ts:[(t +inf]``.
When that list was cut, its rows at its last timestamp may be any of that timestamp's rows; if the
page ends among them they are read whole (one more round trip, only for a tie across a page's end).
Never an offset: the v1 offset cursor visited 11 of 20 memories when each page was forgotten before
the next.

The rows' exact timestamps come from the records themselves (read anyway for the page): a sortable
field is returned by FT.SEARCH from its sort vector, rounded to 12 digits.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import msgspec

from memkit.backend import Record
from memkit.errors import ValidationError
from memkit_backends.redis._keys import number

__all__ = ["count", "decode_cursor", "encode_cursor", "scan_page"]

_TIES_FIRST: Final = 1_000
"""Rows asked for at one timestamp before knowing how many there are (then all, in a second read)."""

Run = Callable[[Sequence[tuple[Any, ...]]], Awaitable[list[Any]]]
"""Commands in one round trip, their replies in order."""
Fetch = Callable[[Sequence[str]], Awaitable[list[Record]]]
"""Records by id (missing ones omitted)."""


def encode_cursor(record: Record) -> str:
    return base64.urlsafe_b64encode(msgspec.json.encode([record.timestamp, record.id])).decode()


def decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        timestamp, record_id = msgspec.json.decode(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, TypeError, binascii.Error, msgspec.DecodeError) as exc:
        raise ValidationError(f"malformed scan cursor {cursor!r}") from exc
    if (isinstance(timestamp, bool) or not isinstance(timestamp, int | float) or not math.isfinite(timestamp)
            or not isinstance(record_id, str) or "\x00" in record_id):  # fmt: skip
        raise ValidationError(f"malformed scan cursor {cursor!r}")
    return float(timestamp), record_id


def _where(base: str, clause: str) -> str:
    return clause if base == "*" else f"{base} {clause}"


def _ids(reply: Sequence[Any], prefix_len: int) -> tuple[int, list[str]]:
    """Total and ids of a NOCONTENT reply."""
    return int(reply[0]), [key[prefix_len:].decode() for key in reply[1:]]


async def count(run: Run, index: str, where: str) -> int:
    (reply,) = await run([("FT.SEARCH", index, where, "NOCONTENT", "LIMIT", "0", "0", "DIALECT", "2")])
    return int(reply[0])


class _Scan:
    def __init__(self, run: Run, index: str, prefix: str, where: str, newest_first: bool) -> None:
        self.run, self.index, self.prefix_len, self.where = run, index, len(prefix), where
        self.newest_first = newest_first

    def ties(self, timestamp: float, limit: int) -> tuple[Any, ...]:
        at = number(timestamp)
        return ("FT.SEARCH", self.index, _where(self.where, f"@ts:[{at} {at}]"), "NOCONTENT",
                "LIMIT", "0", str(limit), "DIALECT", "2")  # fmt: skip

    def after(self, cursor: tuple[float, str] | None, limit: int) -> tuple[Any, ...]:
        where = self.where
        if cursor is not None:
            at = number(cursor[0])
            where = _where(where, f"@ts:[-inf ({at}]" if self.newest_first else f"@ts:[({at} +inf]")
        return ("FT.SEARCH", self.index, where, "NOCONTENT", "SORTBY", "ts", "DESC" if self.newest_first else "ASC",
                "LIMIT", "0", str(limit), "DIALECT", "2")  # fmt: skip

    async def all_ties(self, timestamp: float, first: Sequence[Any] | None = None) -> list[str]:
        """Every id at ``timestamp``, in scan order (``first``: the reply of a ``ties`` read already made)."""
        if first is None:
            (first,) = await self.run([self.ties(timestamp, _TIES_FIRST)])
        total, ids = _ids(first, self.prefix_len)
        if total > len(ids):
            (reply,) = await self.run([self.ties(timestamp, total)])
            ids = _ids(reply, self.prefix_len)[1]
        return sorted(ids, reverse=self.newest_first)

    def key(self, record: Record) -> tuple[float, str]:
        return record.timestamp, record.id


async def scan_page(
    run: Run, fetch: Fetch, index: str, prefix: str, where: str, *, limit: int, cursor: str | None,
    newest_first: bool,
) -> tuple[list[Record], str | None]:  # fmt: skip
    """One page of the records matching ``where`` after ``cursor``, and the cursor of the next page
    (None when there is none). Two round trips: the ids, then their records."""
    after = decode_cursor(cursor) if cursor is not None else None
    scan = _Scan(run, index, prefix, where, newest_first)
    while True:
        page, more = await _page(scan, fetch, after, limit)
        if page or not more:  # (an empty page with more to come: its rows were deleted meanwhile)
            return page, encode_cursor(page[-1]) if more else None


async def _page(scan: _Scan, fetch: Fetch, after: tuple[float, str] | None, limit: int) -> tuple[list[Record], bool]:
    commands = [scan.after(after, limit + 1)]  # one more row tells whether the page ends inside a tie
    replies = await scan.run([scan.ties(after[0], _TIES_FIRST), *commands] if after else commands)
    tied: list[str] = []
    if after is not None:
        at, last = after
        tied = [i for i in await scan.all_ties(at, replies[0]) if (i < last if scan.newest_first else i > last)]
    total, listed = _ids(replies[-1], scan.prefix_len)
    found = {r.id: r for r in await fetch([*tied[:limit], *listed])}
    rows = sorted((found[i] for i in listed if i in found), key=scan.key, reverse=scan.newest_first)
    cut = total > len(listed)
    room = limit - min(len(tied), limit)
    if cut and 0 < room <= len(rows) and rows[room - 1].timestamp == rows[-1].timestamp:
        # The page ends among the rows at the list's last timestamp, which may be any of that timestamp's
        # rows: read them all, in id order (one more round trip, only on a tie across the page's end).
        edge = rows[-1].timestamp
        group = await scan.all_ties(edge)
        found.update((r.id, r) for r in await fetch([i for i in group if i not in found]))
        rows = [r for r in rows if r.timestamp != edge] + [found[i] for i in group if i in found]
    page = [*(found[i] for i in tied[:limit] if i in found), *rows]
    return page[:limit], cut or len(tied) + len(rows) > limit
