"""A columnar, in-process collection: the arrays ``memory://`` is and ``sqlite://`` caches.

Vectors live in one contiguous matrix grown by amortised doubling; scope ids
are interned to integers so the kernel masks by scope without touching
strings; deletes leave tombstones that are compacted once they are half the
rows. Filterable fields and text have inverted indexes, turned into masks
and lexical scores per query.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from memkit.backend import FieldValue, FilterValue, Hit, Page, Query, Record, Scope, Scores, scope_matches
from memkit.errors import DimensionMismatchError
from memkit.scoring import Columns, ScoreParams, StorageDtype, encode_vectors, top_k
from memkit.scoring._lexical import Bm25Index
from memkit.text import tokenize

__all__ = ["ColumnarCollection"]

_MIN_CAPACITY = 64
_COMPACT_MIN_DEAD = 1024


class _Interner:
    def __init__(self) -> None:
        self._ids: dict[str, int] = {}

    def intern(self, value: str | None) -> int:
        if value is None:
            return -1
        return self._ids.setdefault(value, len(self._ids))

    def lookup(self, value: str | None) -> int | None:
        """-1 for "any", None when the value was never stored (nothing can match)."""
        if value is None:
            return -1
        return self._ids.get(value)


class ColumnarCollection:
    def __init__(self, dim: int | None = None, dtype: StorageDtype = "float32", *, index_text: bool = True) -> None:
        self.dim = dim
        self._index_text = index_text
        self.dtype: StorageDtype = dtype
        self._interner = _Interner()
        self._records: list[Record | None] = []
        self._row_of: dict[str, int] = {}
        self._fields: dict[tuple[str, FieldValue], set[int]] = {}
        self._lexical = Bm25Index()
        self._dead = 0
        self._allocate(_MIN_CAPACITY)

    # -- storage -------------------------------------------------------------------------------
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

    def _grow(self, needed: int) -> None:
        capacity = self._alive.shape[0]
        if needed <= capacity:
            return
        new_capacity = max(needed, capacity * 2)
        old = (self._vectors, self._scales, self._importance, self._timestamps, self._expires, self._alive, self._scope)
        n = len(self._records)
        self._allocate(new_capacity)
        self._vectors[:n] = old[0][:n]
        self._scales[:n] = old[1][:n]
        self._importance[:n] = old[2][:n]
        self._timestamps[:n] = old[3][:n]
        self._expires[:n] = old[4][:n]
        self._alive[:n] = old[5][:n]
        self._scope[:, :n] = old[6][:, :n]

    def columns(self) -> Columns:
        return Columns(
            len(self._records),
            self._vectors,
            self._scales,
            self._importance,
            self._timestamps,
            self._expires,
            self._alive,
            self._scope,
        )

    def __len__(self) -> int:
        return len(self._row_of)

    # -- writes ---------------------------------------------------------------------------------
    def set_dim(self, dim: int) -> None:
        """Fix the vector dimension of a collection that has none yet."""
        if self.dim is None:
            self.dim = dim
            self._vectors = np.zeros((self._alive.shape[0], dim), dtype=self._vectors.dtype)

    @staticmethod
    def require_dim(name: str, have: int | None, want: int) -> None:
        if have is not None and have != want:
            raise DimensionMismatchError(f"collection {name!r} holds {have}-dimensional vectors, not {want}")

    def check_dims(self, records: Iterable[Record]) -> int | None:
        """The collection's dimension after these records; raises, changing nothing, on a mismatch."""
        dim = self.dim
        for record in records:
            if record.vector is None:
                continue
            have = int(record.vector.shape[0])
            if dim is None:
                dim = have
            elif have != dim:
                raise DimensionMismatchError(
                    f"record {record.id!r} has a {have}-dimensional vector; this collection holds {dim}"
                )
        return dim

    def upsert(self, records: Sequence[Record]) -> None:
        """Validate every record first, then write: all or nothing."""
        dim = self.check_dims(records)
        if dim is not None:
            self.set_dim(dim)
        self._grow(len(self._records) + len(records))
        for record in records:
            row = self._row_of.get(record.id)
            if row is None:
                row = len(self._records)
                self._records.append(record)
                self._row_of[record.id] = row
            else:
                self._unindex(row)
                self._records[row] = record
            self._write_row(row, record)

    def replace(self, record: Record, expected_body: bytes) -> bool:
        current = self.get([record.id])
        if not current or current[0].body != expected_body:
            return False
        self.upsert([record])
        return True

    def _write_row(self, row: int, record: Record) -> None:
        if record.vector is not None:
            stored, scales = encode_vectors(record.vector[None, :], self.dtype)
            self._vectors[row] = stored[0]
            self._scales[row] = scales[0]
        elif self.dim:
            self._vectors[row] = 0
        self._importance[row] = record.importance
        self._timestamps[row] = record.timestamp
        self._expires[row] = np.inf if record.expires_at is None else record.expires_at
        self._scope[0, row] = self._interner.intern(record.scope.user_id)
        self._scope[1, row] = self._interner.intern(record.scope.agent_id)
        self._scope[2, row] = self._interner.intern(record.scope.session_id)
        for key, value in record.fields.items():
            self._fields.setdefault((key, value), set()).add(row)
        if record.text and self._index_text:
            self._lexical.add(row, tokenize(record.text))
        self._alive[row] = 1

    def _unindex(self, row: int) -> None:
        record = self._records[row]
        if record is None:
            return
        for key, value in record.fields.items():
            rows = self._fields.get((key, value))
            if rows is not None:
                rows.discard(row)
                if not rows:
                    del self._fields[(key, value)]
        self._lexical.remove(row)

    def delete(self, ids: Iterable[str], scope: Scope | None = None) -> list[str]:
        deleted = []
        for record_id in ids:
            row = self._row_of.get(record_id)
            record = None if row is None else self._records[row]
            if row is None or record is None or (scope is not None and not scope_matches(record.scope, scope)):
                continue
            self._unindex(row)
            self._alive[row] = 0
            self._records[row] = None
            del self._row_of[record_id]
            self._dead += 1
            deleted.append(record_id)
        if self._dead >= _COMPACT_MIN_DEAD and self._dead * 2 >= len(self._records):
            self._compact()
        return deleted

    def _compact(self) -> None:
        live = [r for r in self._records if r is not None]
        rows = np.fromiter((self._row_of[r.id] for r in live), dtype=np.int64, count=len(live))
        old = (self._vectors, self._scales)
        self._records, self._row_of, self._fields, self._lexical, self._dead = [], {}, {}, Bm25Index(), 0
        self._allocate(max(_MIN_CAPACITY, len(live) * 2))
        for record in live:
            self.upsert([record])
        # Re-encoding quantized vectors would compound rounding error: copy the stored bits instead.
        self._vectors[: len(live)] = old[0][rows]
        self._scales[: len(live)] = old[1][rows]

    # -- reads ----------------------------------------------------------------------------------
    def get(self, ids: Iterable[str], scope: Scope | None = None) -> list[Record]:
        found = []
        for record_id in ids:
            row = self._row_of.get(record_id)
            record = None if row is None else self._records[row]
            if record is not None and (scope is None or scope_matches(record.scope, scope)):
                found.append(record)
        return found

    def _scope_want(self, scope: Scope) -> tuple[int, int, int] | None:
        user = self._interner.lookup(scope.user_id)
        agent = self._interner.lookup(scope.agent_id)
        session = self._interner.lookup(scope.session_id)
        if user is None or agent is None or session is None:
            return None  # an id never stored: nothing can match
        return (user, agent, session)

    def _filter_rows(self, filters: Mapping[str, FilterValue]) -> set[int] | None:
        """Rows passing every filter, or None when there are no filters."""
        result: set[int] | None = None
        for key, wanted in filters.items():
            values = wanted if isinstance(wanted, list | tuple) else (wanted,)
            rows: set[int] = set()
            for value in values:
                rows |= self._fields.get((key, value), set())
            result = rows if result is None else result & rows
            if not result:
                return set()
        return result

    def query(self, query: Query, external_lexical: Mapping[str, float] | None = None) -> list[Hit]:
        """Top-k by the fused kernel; ``external_lexical`` (id -> raw score) replaces the own text index."""
        want = self._scope_want(query.scope)
        if want is None or not self._records:
            return []
        n = len(self._records)
        extra_mask = None
        if query.filters:
            allowed = self._filter_rows(query.filters)
            if not allowed:
                return []
            extra_mask = np.zeros(n, np.uint8)
            extra_mask[np.fromiter(allowed, np.int64, len(allowed))] = 1
        if external_lexical is not None:
            lexical = self._external_lexical(external_lexical, n)
        else:
            lexical = self._lexical_scores(query.text, want, n) if query.text else None
        if query.vector is not None and self.dim is not None and query.vector.shape[0] != self.dim:
            raise DimensionMismatchError(
                f"query vector has {query.vector.shape[0]} dimensions; collection has {self.dim}"
            )
        weights = query.weights
        params = ScoreParams(
            query.now,
            query.half_life_s,
            query.min_importance,
            weights.similarity,
            weights.lexical,
            weights.recency,
            weights.importance,
            query.min_score,
        )
        vector = query.vector if self.dim else None
        best = top_k(self.columns(), params, query.k, scope_want=want, query=vector, lexical=lexical,
                     extra_mask=extra_mask)  # fmt: skip
        return [self._hit(int(row), float(final), float(sim), lexical, params)
                for row, final, sim in zip(best.rows, best.final, best.similarity, strict=True)]  # fmt: skip

    def _lexical_scores(self, text: str, want: tuple[int, int, int], n: int) -> npt.NDArray[np.float32] | None:
        """BM25 scores scaled by the best in-scope match to 0..1 (zeros elsewhere)."""
        raw, matched = self._lexical.score(tokenize(text), n)
        if not matched:
            return None
        rows = np.flatnonzero(raw)
        in_scope = self._alive[rows].astype(bool)
        for axis, wanted in enumerate(want):
            if wanted >= 0:
                in_scope &= self._scope[axis, rows] == wanted
        top = float(raw[rows[in_scope]].max()) if in_scope.any() else 0.0
        if top <= 0:
            return None
        raw /= top
        return raw

    def _external_lexical(self, raw: Mapping[str, float], n: int) -> npt.NDArray[np.float32] | None:
        top = max(raw.values(), default=0.0)
        if top <= 0:
            return None
        lexical = np.zeros(n, np.float32)
        for record_id, score in raw.items():
            row = self._row_of.get(record_id)
            if row is not None:
                lexical[row] = score / top
        return lexical

    def _hit(
        self, row: int, final: float, sim: float, lexical: npt.NDArray[np.float32] | None, params: ScoreParams
    ) -> Hit:
        record = self._records[row]
        if record is None:  # the kernel only returns alive rows
            raise RuntimeError(f"scoring returned deleted row {row}")
        age = max(params.now - float(self._timestamps[row]), 0.0)
        scores = Scores(
            final=final,
            similarity=sim,
            lexical=0.0 if lexical is None else float(lexical[row]),
            recency=float(0.5 ** (age / params.half_life_s)),
            importance=float(self._importance[row]),
        )
        return Hit(record=record, scores=scores)

    def scan(
        self,
        scope: Scope,
        filters: Mapping[str, FilterValue] | None,
        limit: int,
        cursor: str | None,
        now: float | None,
    ) -> Page:
        allowed = self._filter_rows(filters) if filters else None
        ids = sorted(i for i in self._row_of if cursor is None or i > cursor)
        page: list[Record] = []
        for record_id in ids:
            row = self._row_of[record_id]
            record = self._records[row]
            if record is None or not scope_matches(record.scope, scope):
                continue
            if (allowed is not None and row not in allowed) or (now is not None and record.is_expired(now)):
                continue
            page.append(record)
            if len(page) == limit:
                return Page(records=page, next_cursor=record_id)
        return Page(records=page, next_cursor=None)

    def expired_ids(self, now: float) -> list[str]:
        n = len(self._records)
        rows = np.flatnonzero((self._expires[:n] <= now) & (self._alive[:n] == 1))
        return [r.id for r in (self._records[int(i)] for i in rows) if r is not None]
