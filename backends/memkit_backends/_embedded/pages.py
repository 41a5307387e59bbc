"""Where a new record's row goes: near its owner's other rows.

A scope's scan (a recall's vector pass, a store's near-duplicate check) reads its rows' vectors. Appended in
arrival order, the rows of 100 users writing in turns were 1.5 KB each and ~150 KB apart: every row started
with a TLB miss and a memory round trip the prefetcher could not hide. Here each owner (the scope's user,
else its agent, else its session) takes rows in pages at the end of the columns, so its rows sit in runs:
measured on 100 users' 100k rows of dimension 384, one query against a user's 1,000 rows took 55 us in
runs of 64 against 150 us scattered, and a batch's near-duplicate check 13-15 ms against 22 ms.

A page holds a quarter as many rows as its owner has taken before it, from 1 up to ``MAX_PAGE_ROWS``: its
unused rows (holes: never alive, skipped like deleted rows, not counted as deleted) are under a quarter of
the owner's rows, and under a page for a large owner. (Half as many left a third of a 100-row owner's rows
empty: loading 1,000 such users' 100k memories took 141k rows.) Rows of one owner still ascend in arrival
order (a page is always taken past every row before it), which ties within a scope rely on; ties between
owners (an agent's query across its users) go to the owner whose page came first. A compaction, whose
records come owner by owner, takes rows densely (``dense``): an owner's rows are one run without holes.
"""

from __future__ import annotations

from typing import Final

from memkit.backend import Scope

__all__ = ["MAX_PAGE_ROWS", "RowPages", "most_rows", "owner_of"]

MAX_PAGE_ROWS: Final = 64
"""Rows a page holds at most: a run of 64 rows of 384 float32 is 96 KB, long enough for the prefetcher (runs
of 16 were 76 us for the query above, of 64 and more 53-55 us); at most 63 holes per owner."""


def owner_of(scope: Scope) -> tuple[int, str | None]:
    """The scope's owner: the first id it has, by axis (a user id never shares pages with an agent id)."""
    if scope.user_id is not None:
        return 0, scope.user_id
    if scope.agent_id is not None:
        return 1, scope.agent_id
    return 2, scope.session_id


class RowPages:
    """Each owner's open page: its next free row, the row past the page, and the rows the owner has taken."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[tuple[int, str | None], list[int]] = {}

    def take(self, owner: tuple[int, str | None], end: int, *, dense: bool = False) -> tuple[int, int]:
        """A row for a new record of ``owner``, and how many rows the columns hold after it (``end`` before):
        the owner's open page's next row, else the first row of a new page that starts at ``end`` (``dense``:
        a page of one row, for records that come owner by owner)."""
        page = self._open.get(owner)
        if page is not None and page[0] < page[1]:
            row = page[0]
            page[0] += 1
            page[2] += 1
            return row, end
        taken = 0 if page is None else page[2]
        size = 1 if dense else max(1, min(MAX_PAGE_ROWS, taken // 4))
        self._open[owner] = [end + 1, end + size, taken + 1]
        return end, end + size


def most_rows(new_records: int, owners: int) -> int:
    """The most rows ``new_records`` of ``owners`` owners can take: each owner's last page may have holes."""
    return new_records + owners * (MAX_PAGE_ROWS - 1)
