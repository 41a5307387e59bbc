"""The arrays of a columnar collection, and writing records' values into them.

What the kernel reads (vectors, scales, importance, timestamps, expiry, liveness, scope codes) and the
access counters are arrays indexed by row, grown by amortised doubling. A row's scope codes are written,
indexed (``ScopeRows``) and released (``ScopeInterner``) together, so the interner and the scope index live
here with them. ``ColumnarCollection`` builds on this and keeps the records, their ids and the field and
text indexes: each file then reads as one piece (a batch's columns are written two ways, by scalar writes
for small batches and one numpy assignment per column for large ones, and both must do the same).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from memkit.backend import Record, Scope
from memkit.scoring import StorageDtype, encode_vectors
from memkit_backends._embedded.indexes import ScopeInterner, ScopeRows

__all__ = ["RowColumns"]

_MIN_CAPACITY = 64
_VECTORISE_MIN = 32
"""Batches at least this large write each column with one numpy assignment."""
_ROW_COLUMNS = (
    "_vectors", "_scales", "_importance", "_timestamps", "_expires", "_alive", "_access", "_last_access", "_has_vector",
)  # fmt: skip
"""Arrays indexed by row first; ``_scope`` (3 x capacity) is the one indexed by row last."""


class RowColumns:
    """A collection's per-row arrays and the scope codes of its rows; rows are numbered by the collection."""

    def __init__(self, dim: int | None = None, dtype: StorageDtype = "float32") -> None:
        self.dim = dim
        self.dtype: StorageDtype = dtype
        self._reset()

    # -- storage -------------------------------------------------------------------------------
    def _reset(self, rows: int = 0) -> None:
        """No scope ids, and empty columns with room for twice ``rows`` (at least ``_MIN_CAPACITY``)."""
        self._interner = ScopeInterner()
        self._scope_rows = ScopeRows()
        self._allocate(max(_MIN_CAPACITY, rows * 2))

    def _allocate(self, capacity: int) -> None:
        dim = self.dim or 0
        stored_dtype = {"float32": np.float32, "float16": np.uint16, "int8": np.int8}[self.dtype]
        self._vectors = np.zeros((capacity, dim), dtype=stored_dtype)
        self._scales = np.ones(capacity, np.float32)
        self._importance = np.zeros(capacity, np.float32)
        self._timestamps = np.zeros(capacity, np.float64)
        self._expires = np.full(capacity, np.inf, np.float64)
        self._alive = np.zeros(capacity, np.uint8)
        self._scope = np.full((3, capacity), -1, np.int32)
        self._access = np.zeros(capacity, np.int64)
        self._last_access = np.full(capacity, np.nan, np.float64)
        """NaN: never touched."""
        self._has_vector = np.zeros(capacity, np.uint8)

    def _grow(self, used: int, more: int) -> None:
        """Room for ``more`` rows after the ``used`` ones (whose values are kept)."""
        capacity = self._alive.shape[0]
        needed = used + more
        if needed <= capacity:
            return
        old = {name: getattr(self, name) for name in _ROW_COLUMNS}
        old_scope = self._scope
        # Powers of two from _MIN_CAPACITY, whatever the batches: a growth holds the old and the new columns
        # at once (the process's peak), and capacities that followed the first batch's size (1,300 rows
        # with its pages' holes) moved the last growth of a 100k ingest to 90k rows, 70 MB higher.
        self._allocate(_MIN_CAPACITY << max(0, (needed - 1) // _MIN_CAPACITY).bit_length())
        for name, values in old.items():
            getattr(self, name)[:used] = values[:used]
        self._scope[:, :used] = old_scope[:, :used]

    def stored_vector(self, row: int) -> npt.NDArray[np.float32]:
        """Row ``row``'s vector as stored, widened to float32 (exact for float32 storage)."""
        stored = self._vectors[row]
        widened: npt.NDArray[np.float32]
        if self.dtype == "float16":
            widened = stored.view(np.float16).astype(np.float32)
        elif self.dtype == "int8":
            widened = stored.astype(np.float32) * self._scales[row]
        else:
            widened = stored.copy()
        return widened

    def set_dim(self, dim: int) -> None:
        """Fix the vector dimension of a collection that has none yet."""
        if self.dim is None:
            self.dim = dim
            self._vectors = np.zeros((self._alive.shape[0], dim), dtype=self._vectors.dtype)

    @property
    def scope_ids(self) -> int:
        """How many distinct scope ids live rows use (each interned once)."""
        return len(self._interner)

    # -- writes ---------------------------------------------------------------------------------
    def _write_rows(self, rows: list[int], batch: list[Record], rewritten: list[int], keep_counters: bool) -> None:
        """The batch's values into its rows (``rewritten``: those that held a record before)."""
        if len(batch) < _VECTORISE_MIN:
            for row, record in zip(rows, batch, strict=True):
                self._write_row(row, record, row in rewritten, keep_counters)
        else:
            self._write_columns(np.asarray(rows, dtype=np.int64), batch, rewritten, keep_counters)

    def _write_row(self, row: int, record: Record, rewritten: bool, keep_counters: bool) -> None:
        """One record's columns by scalar writes: for small batches, where numpy's per-call overhead
        would cost more (a 1-record upsert took 65 us vectorised, 12 us like this)."""
        self._has_vector[row] = record.vector is not None
        if record.vector is not None:
            stored, scales = encode_vectors(record.vector[None, :], self.dtype)
            self._vectors[row], self._scales[row] = stored[0], scales[0]
        elif self.dim:
            self._vectors[row] = 0
        self._importance[row] = record.importance
        self._timestamps[row] = record.timestamp
        self._expires[row] = np.inf if record.expires_at is None else record.expires_at
        old = tuple(self._scope[:, row].tolist()) if rewritten else ()
        scope, acquire = record.scope, self._interner.acquire
        codes = (acquire(scope.user_id), acquire(scope.agent_id), acquire(scope.session_id))
        self._scope[:, row] = codes
        if old != codes:  # else rewritten in its scope: its place in the scope index holds
            if rewritten:
                self._scope_rows.remove(row, old)
            self._scope_rows.add(row, codes)
        for code in old:  # after the acquisitions: a rewrite in the same scope keeps its codes
            self._interner.release(code)
        if not keep_counters:
            self._access[row] = record.access_count
            self._last_access[row] = np.nan if record.last_accessed is None else record.last_accessed
        elif not rewritten:
            self._access[row], self._last_access[row] = 0, np.nan
        self._alive[row] = 1

    def _write_columns(
        self, rows: npt.NDArray[np.int64], batch: list[Record], rewritten: list[int], keep_counters: bool
    ) -> None:
        """The batch's columns, one numpy assignment each (per-row scalar writes were 60% of an upsert)."""
        n = len(batch)
        with_vector = [i for i, record in enumerate(batch) if record.vector is not None]
        self._has_vector[rows] = [record.vector is not None for record in batch]
        if with_vector:
            stored, scales = encode_vectors(np.stack([batch[i].vector for i in with_vector]), self.dtype)
            self._vectors[rows[with_vector]], self._scales[rows[with_vector]] = stored, scales
        if self.dim and len(with_vector) < n:
            self._vectors[rows[[i for i, record in enumerate(batch) if record.vector is None]]] = 0
        self._importance[rows] = np.fromiter((r.importance for r in batch), np.float32, n)
        self._timestamps[rows] = np.fromiter((r.timestamp for r in batch), np.float64, n)
        self._expires[rows] = np.fromiter((np.inf if r.expires_at is None else r.expires_at for r in batch),
                                          np.float64, n)  # fmt: skip
        # Acquire the new scope ids before releasing the old: a rewrite in the same scope keeps its codes.
        old = self._scope[:, rewritten].T.tolist() if rewritten else []
        acquire = self._interner.acquire
        new = [(acquire(r.scope.user_id), acquire(r.scope.agent_id), acquire(r.scope.session_id)) for r in batch]
        self._scope[:, rows] = np.array(new, dtype=np.int32).T
        before = {row: tuple(codes) for row, codes in zip(rewritten, old, strict=True)}
        added: tuple[list[int], list[tuple[int, int, int]]] = ([], [])
        for row, codes in zip(rows.tolist(), new, strict=True):
            held = before.get(row)
            if held == codes:
                continue  # rewritten in its scope (a graph node's list): its place in the scope index holds
            if held is not None:
                self._scope_rows.remove(row, held)
            added[0].append(row)
            added[1].append(codes)
        self._scope_rows.add_many(*added)
        for codes in old:
            for code in codes:
                self._interner.release(code)
        if keep_counters:  # new rows start at zero; rewritten ones keep theirs
            fresh = rows[np.isin(rows, rewritten, invert=True)] if rewritten else rows
            self._access[fresh], self._last_access[fresh] = 0, np.nan
        else:
            self._access[rows] = np.fromiter((r.access_count for r in batch), np.int64, n)
            self._last_access[rows] = np.fromiter(
                (np.nan if r.last_accessed is None else r.last_accessed for r in batch), np.float64, n
            )
        self._alive[rows] = 1

    def _clear_row(self, row: int) -> None:
        """A deleted row: its scope ids released, dead, its counters dropped."""
        codes = self._scope[:, row].tolist()
        self._scope_rows.remove(row, codes)
        for code in codes:
            self._interner.release(code)
        self._scope[:, row] = -1
        self._alive[row] = 0
        self._access[row], self._last_access[row] = 0, np.nan

    # -- scope masks ----------------------------------------------------------------------------
    def _scope_want(self, scope: Scope) -> tuple[int, int, int] | None:
        user = self._interner.lookup(scope.user_id)
        agent = self._interner.lookup(scope.agent_id)
        session = self._interner.lookup(scope.session_id)
        if user is None or agent is None or session is None:
            return None  # an id no live row has: nothing can match
        return (user, agent, session)

    def _in_scope(self, rows: npt.NDArray[np.int64], want: tuple[int, int, int]) -> npt.NDArray[np.bool_]:
        keep = self._alive[rows].astype(bool)
        for axis, wanted in enumerate(want):
            if wanted >= 0:
                keep &= self._scope[axis, rows] == wanted
        return keep
