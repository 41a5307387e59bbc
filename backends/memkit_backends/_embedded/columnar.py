"""A columnar, in-process collection: the arrays ``memory://`` is and ``sqlite://`` caches.

Vectors live in one contiguous matrix grown by amortised doubling; scope ids
are interned to integers (reference counted, so ids nobody uses any more are
released) and the kernel masks by scope without touching strings; deletes
leave tombstones that are compacted once they are half the rows. Filterable
fields (scalars, and each tag of a tuple) and text have inverted indexes,
turned into masks and lexical scores per query. Access counters are two more
columns, beside the records: writes of a record keep them, a delete drops them.
The arrays, and writing records' values into them, are ``RowColumns`` (``columns.py``);
this module holds the records, their ids and the indexes, and reads them.

Scans, counts, queries and text scores read a scope's rows only: each scope id
has its rows in an index (``ScopeRows``), and the smaller of that and the field
index's rows (a dedupe key has about one) is where they start; the kernel and
BM25 are handed those rows. At 100k rows of 100 users, a recall went from 4.3 ms
to 1.7 ms (BM25 had scored every user's postings) and a store's dedupe lookup
from 5.6 ms (every id sorted per call) to 0.03 ms.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain
from typing import Final

import msgspec
import numpy as np
import numpy.typing as npt

from memkit.backend import FieldValue, FilterValue, Hit, Page, Query, Record, Scope, Scores, Vector, scope_matches
from memkit.errors import DimensionMismatchError, ValidationError
from memkit.scoring import Columns, ScoreParams, StorageDtype, top_k
from memkit.scoring._lexical import Bm25Index
from memkit.text import tokenize
from memkit_backends._embedded.columns import RowColumns
from memkit_backends._embedded.indexes import (
    FieldIndex,
    dim_after,
    field_keys,
    filter_keys,
    replace_verdict,
    require_dim,
)
from memkit_backends._embedded.pages import RowPages, most_rows, owner_of
from memkit_backends._embedded.text_scores import scaled_to_best

__all__ = ["ColumnarCollection", "refuse_past_float16"]

_COMPACT_MIN_DEAD = 1024
_NO_ROWS = np.zeros(0, np.int64)
_FLOAT16_MAX = float(np.finfo(np.float16).max)


def refuse_past_float16(dtype: StorageDtype, vectors: Iterable[tuple[str, Vector | None]]) -> None:
    """Raise for the first (id, vector) with a value past +-65504 when ``dtype`` is float16: stored, it would
    become infinite (a store that keeps only rounded rows would return it; any would score it NaN)."""
    if dtype != "float16":
        return
    for record_id, vector in vectors:
        if vector is not None and np.abs(vector).max(initial=0.0) > _FLOAT16_MAX:
            raise ValidationError(f"record {record_id!r}: its vector has a value past +-65504, which "
                                  "this float16 store (?dtype=float16) cannot hold; use float32")  # fmt: skip


_NO_FIELDS: Final[dict[str, FieldValue | tuple[str, ...]]] = {}
"""The fields of every stored struct: a row's own are kept flat (``_flat``) and put back by every read."""


def _bare(record: Record, keep_vector: bool) -> Record:
    """Counters live in their columns; the stored struct carries none, so a read never shows stale ones.
    The vector lives in the matrix alone unless ``keep_vector`` (kept twice it was 1.5 KB more per 384-dim
    record: 150 MB at 100k). Its fields are kept apart, flat."""
    vector = record.vector if keep_vector else None
    return msgspec.structs.replace(record, vector=vector, access_count=0, last_accessed=None, fields=_NO_FIELDS)


def _flat(fields: Mapping[str, FieldValue | tuple[str, ...]]) -> tuple[str | FieldValue | tuple[str, ...], ...]:
    """A record's fields as one tuple, name, value, name, value: a memory's dict of two was 184 bytes (9 MB
    of memory:// at 100k), the tuple 88."""
    return tuple(chain.from_iterable(fields.items())) if fields else ()


def _unflat(flat: tuple[str | FieldValue | tuple[str, ...], ...]) -> dict[str, FieldValue | tuple[str, ...]]:
    return {flat[at]: flat[at + 1] for at in range(0, len(flat), 2)}  # type: ignore[misc]  # names at even places


def _same_fields(old: tuple[object, ...], new: tuple[object, ...]) -> bool:
    """Equal, and of the same types: ``{"n": 1} == {"n": True}``, but the index tells them apart."""
    return old == new and all(type(a) is type(b) for a, b in zip(old, new, strict=True))


def _owner_order(record: Record) -> tuple[int, str]:
    axis, owner = owner_of(record.scope)
    return axis, owner or ""


def _first_dim(records: Iterable[Record], dim: int | None) -> int | None:
    """The dimension of checked records: the collection's, or the first vector's."""
    if dim is not None:
        return dim
    return next((int(r.vector.shape[0]) for r in records if r.vector is not None), None)


class ColumnarCollection(RowColumns):
    """The records, their ids and indexes, over the columns of ``RowColumns``."""

    def __init__(self, dim: int | None = None, dtype: StorageDtype = "float32", *, exact_vectors: bool = True) -> None:
        """``exact_vectors=False``: a quantized collection keeps only its rounded rows, and reads return them
        widened to float32 (memory://, where nothing else holds the vectors: keeping each record's float32
        vector beside an int8 row held 1.9 KB of vector a memory at dim 384, more than float32 storage).
        With float32 storage the matrix holds the exact vectors either way."""
        super().__init__(dim, dtype)
        self._keep_vectors = exact_vectors and dtype != "float32"
        self._records: list[Record | None] = []
        self._fields_of: list[tuple[str | FieldValue | tuple[str, ...], ...]] = []
        """Each row's fields, flat (``_flat``); ``()`` for a hole."""
        self._row_of: dict[str, int] = {}
        self._fields = FieldIndex()
        self._lexical = Bm25Index()
        self._pages = RowPages()
        self._dead = 0

    # -- storage -------------------------------------------------------------------------------
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

    def __contains__(self, record_id: object) -> bool:
        return record_id in self._row_of

    # -- writes ---------------------------------------------------------------------------------
    require_dim = staticmethod(require_dim)

    def reserve(self, rows: int) -> None:
        """Room for ``rows`` more rows at once (a cache about to load that many: growing by doubling copied
        the columns a dozen times)."""
        self._grow(len(self._records), rows + rows // 4)  # pages leave under a quarter of the rows as holes

    def check_records(self, records: Sequence[Record]) -> int | None:
        """The collection's dimension after these records; raises, changing nothing, on a record the store
        cannot hold (a dimension mismatch, NaN or infinity in its numbers or fields, a vector value past
        float16's range in a float16 store, where it would become infinite)."""
        dim = dim_after(records, self.dim)
        refuse_past_float16(self.dtype, [(record.id, record.vector) for record in records])
        return dim

    def upsert(
        self,
        records: Sequence[Record],
        *,
        keep_counters: bool = True,
        tokens: Mapping[str, list[str]] | None = None,
        checked: bool = False,
        dense: bool = False,
    ) -> None:
        """Validate every record first, then write: all or nothing. A record already here keeps its access
        counters (the contract's rule); ``keep_counters=False`` takes them from the records instead (a
        cache loading what its store holds). ``tokens``: a record's text already tokenized, by id (a
        cache loading a file that stores them: tokenizing 100k texts again added 4 s to an open).
        ``checked``: the caller checked the records against this collection already (``check_records``).
        ``dense``: the records come owner by owner (a compaction): new rows are taken one after another."""
        dim = _first_dim(records, self.dim) if checked else self.check_records(records)
        if dim is not None:
            self.set_dim(dim)
        batch = list(records)
        if not batch:
            return
        if len(batch) > 1 and len({record.id for record in batch}) < len(batch):  # the last write of an id wins
            batch = list({record.id: record for record in batch}.values())
        used = len(self._records)
        # Room first, before anything changes: a failed growth (out of memory) leaves the collection as it was.
        fresh = [record.scope for record in batch if record.id not in self._row_of]
        self._grow(used, most_rows(len(fresh), len({owner_of(scope) for scope in fresh})))
        rows, rewritten = [], []
        texts: list[tuple[int, list[str]]] = []
        for record in batch:
            row = self._row_of.get(record.id)
            flat = _flat(record.fields)
            same_fields = same_text = False
            if row is None:
                row, end = self._pages.take(owner_of(record.scope), len(self._records), dense=dense)
                self._fields_of.extend([()] * (end - len(self._records)))
                self._records.extend([None] * (end - len(self._records)))  # the page's rows past this one: holes
                self._row_of[record.id] = row
            else:
                # A rewrite that changes only the body (a graph node's list of edges, a counter) keeps
                # its index entries: re-indexing them was a third of a graph upsert.
                old = self._records[row]
                same_fields = old is not None and _same_fields(self._fields_of[row], flat)
                same_text = old is not None and old.text == record.text
                self._unindex(row, fields=not same_fields, text=not same_text)
                rewritten.append(row)
            self._records[row] = _bare(record, self._keep_vectors)
            self._fields_of[row] = flat
            if not same_fields:
                self._index_fields(row, record)
            if record.text and not same_text:
                words = None if tokens is None else tokens.get(record.id)
                texts.append((row, tokenize(record.text) if words is None else words))
            rows.append(row)
        self._lexical.add_many(texts)
        self._write_rows(rows, batch, rewritten, keep_counters)

    def _index_fields(self, row: int, record: Record) -> None:
        self._fields.add_fields(row, record.fields)

    def replace(self, record: Record, expected_body: bytes | None) -> bool:
        """Compare-and-set by body (``None``: create only if absent), idempotent for a retried call."""
        row = self._row_of.get(record.id)
        stored = None if row is None else self._records[row]
        verdict = replace_verdict(None if stored is None else stored.body, record.body, expected_body)
        if verdict == "write":
            self.upsert([record])
        return verdict != "refuse"

    def replace_many(self, pairs: Sequence[tuple[Record, bytes | None]]) -> list[bool]:
        """``replace`` for each pair, the writes done as one ``upsert`` (a batch of ten thousand graph merges
        spent most of its time in per-record upserts)."""
        if len({record.id for record, _ in pairs}) < len(pairs):
            raise ValidationError("replace_many takes each record id once")
        verdicts = []
        for record, expected in pairs:
            row = self._row_of.get(record.id)
            stored = None if row is None else self._records[row]
            verdicts.append(replace_verdict(None if stored is None else stored.body, record.body, expected))
        self.upsert([record for (record, _), verdict in zip(pairs, verdicts, strict=True) if verdict == "write"])
        return [verdict != "refuse" for verdict in verdicts]

    def touch(self, counts: Mapping[str, int], at: float) -> None:
        """Add each count to the record's access counter; keep the latest access time. Indexes nothing."""
        if not math.isfinite(at):
            raise ValidationError(f"touch time must be a finite number, got {at!r}")
        for record_id, count in counts.items():
            row = self._row_of.get(record_id)
            if row is None:
                continue
            self._access[row] += int(count)
            last = self._last_access[row]
            if np.isnan(last) or at > last:
                self._last_access[row] = at

    def set_counts(self, counts: Mapping[str, tuple[int, float | None]]) -> None:
        """Set records' access counters to what their store holds (a cache catching up). Indexes nothing."""
        for record_id, (count, last) in counts.items():
            row = self._row_of.get(record_id)
            if row is not None:
                self._access[row] = count
                self._last_access[row] = math.nan if last is None else last

    def _unindex(self, row: int, *, fields: bool = True, text: bool = True) -> None:
        record = self._records[row]
        if record is None:
            return
        if fields:
            for name, value in _unflat(self._fields_of[row]).items():
                for key in field_keys(name, value):
                    self._fields.discard(key, row)
        if text:
            self._lexical.remove(row)

    def delete(self, ids: Iterable[str], scope: Scope | None = None) -> list[str]:
        deleted = []
        for record_id in ids:
            row = self._row_of.get(record_id)
            record = None if row is None else self._records[row]
            if row is None or record is None or (scope is not None and not scope_matches(record.scope, scope)):
                continue
            self._unindex(row)
            self._clear_row(row)
            self._records[row] = None
            self._fields_of[row] = ()
            del self._row_of[record_id]
            self._dead += 1
            deleted.append(record_id)
        if self._dead >= _COMPACT_MIN_DEAD and self._dead >= len(self._row_of):  # half the records (holes aside)
            self._compact()
        return deleted

    def _compact(self) -> None:
        """The live rows written again, each owner's together (in their order: one run of pages each)."""
        held = sorted(((row, record) for row, record in enumerate(self._records) if record is not None),
                      key=lambda pair: _owner_order(pair[1]))  # fmt: skip
        live = [msgspec.structs.replace(record, fields=_unflat(self._fields_of[row])) for row, record in held]
        rows = np.asarray([row for row, _ in held], dtype=np.int64)
        old = (self._vectors, self._scales, self._access, self._last_access, self._has_vector)
        self._records, self._row_of, self._fields, self._lexical, self._dead = [], {}, FieldIndex(), Bm25Index(), 0
        self._fields_of = []
        self._pages = RowPages()
        self._reset(len(live))
        self.upsert(live, dense=True)
        # Re-encoding quantized vectors would compound rounding error: copy the stored bits instead.
        new = np.asarray([self._row_of[record.id] for record in live], dtype=np.int64)
        self._vectors[new], self._scales[new] = old[0][rows], old[1][rows]
        self._access[new], self._last_access[new], self._has_vector[new] = old[2][rows], old[3][rows], old[4][rows]

    # -- reads ----------------------------------------------------------------------------------
    def _out(self, row: int) -> Record:
        """The stored record with its counters, vector and fields, as a new struct."""
        return self._with_counters(row, int(self._access[row]), float(self._last_access[row]),
                                   bool(self._has_vector[row]))  # fmt: skip

    def _with_counters(self, row: int, count: int, last: float, has_vector: bool) -> Record:
        record = self._records[row]
        if record is None:  # callers pass live rows only
            raise RuntimeError(f"row {row} was deleted")
        vector = self.stored_vector(row) if record.vector is None and has_vector else record.vector
        return msgspec.structs.replace(record, vector=vector, access_count=count,
                                       last_accessed=None if math.isnan(last) else last,
                                       fields=_unflat(self._fields_of[row]))  # fmt: skip

    def _out_many(self, rows: npt.NDArray[np.int64]) -> list[Record]:
        """``_out`` of each row, the counters read for all rows at once."""
        counts, lasts = self._access[rows].tolist(), self._last_access[rows].tolist()
        has = self._has_vector[rows].tolist()
        return [self._with_counters(row, count, last, bool(vector))
                for row, count, last, vector in zip(rows.tolist(), counts, lasts, has, strict=True)]  # fmt: skip

    def get(self, ids: Iterable[str], scope: Scope | None = None) -> list[Record]:
        found = []
        for record_id in ids:
            row = self._row_of.get(record_id)
            record = None if row is None else self._records[row]
            if (
                row is not None
                and record is not None
                and (scope is None or record.scope == scope or scope_matches(record.scope, scope))  # == in C first
            ):
                found.append(self._out(row))
        return found

    def _filter_rows(self, filters: Mapping[str, FilterValue]) -> set[int]:
        """Rows passing every filter, straight from the inverted index: the smallest filter's rows, then a
        membership test per further filter (a dedupe key's one row is never intersected with a whole
        ``kind`` set). Returns a new set, never one of the index's."""
        wanted = sorted(
            ([self._fields.rows(key) for key in filter_keys(name, value)] for name, value in filters.items()),
            key=lambda sets: sum(len(rows) for rows in sets),
        )
        result: set[int] = set().union(*wanted[0]) if wanted else set()
        for sets in wanted[1:]:
            if not result:
                break
            result = {row for row in result if any(row in rows for rows in sets)}
        return result

    def scope_size(self, scope: Scope) -> int:
        """How many rows a scan of ``scope`` reads (its index's rows; every row for no id at all)."""
        want = self._scope_want(scope)
        rows = None if want is None else self._scope_rows.smallest(want)
        return 0 if want is None else len(self._records) if rows is None else int(rows.shape[0])

    def candidate_rows(
        self, want: tuple[int, int, int], filters: Mapping[str, FilterValue] | None
    ) -> npt.NDArray[np.int64] | None:
        """Ascending rows that may be in the scope and pass the filters, from the scope and field indexes
        (a superset: each still needs its checks); None when neither narrows (every row)."""
        scoped = self._scope_rows.smallest(want)
        if not filters:
            return scoped
        if len(filters) == 1:  # one key of one field (a graph node's edges): its sorted rows, often kept
            [(name, value)] = filters.items()
            [*keys] = filter_keys(name, value)
            if len(keys) == 1 and (scoped is None or scoped.shape[0] >= len(self._fields.rows(keys[0]))):
                return self._fields.sorted_rows(keys[0])
        allowed = self._filter_rows(filters)
        if scoped is not None and scoped.shape[0] < len(allowed):  # a big filter (a kind) within a scope
            inside: npt.NDArray[np.int64] = scoped[np.fromiter((r in allowed for r in scoped.tolist()), bool)]
            return inside
        return np.sort(np.fromiter(allowed, np.int64, len(allowed)))

    def matching_rows(
        self, scope: Scope, filters: Mapping[str, FilterValue] | None, now: float | None
    ) -> npt.NDArray[np.int64]:
        """Live rows in ``scope`` passing ``filters``, unexpired at ``now`` (None: expiry ignored)."""
        want = self._scope_want(scope)
        n = len(self._records)
        if want is None or n == 0:
            return _NO_ROWS
        candidates = self.candidate_rows(want, filters)
        if candidates is not None and candidates.shape[0] == 0:
            return _NO_ROWS
        index: slice | npt.NDArray[np.int64] = slice(0, n) if candidates is None else candidates
        mask = self._alive[index] == 1
        for axis, wanted in enumerate(want):
            if wanted >= 0:
                mask &= self._scope[axis, index] == wanted
        if now is not None:
            mask &= self._expires[index] > now
        return np.flatnonzero(mask) if isinstance(index, slice) else index[mask]

    def count(self, scope: Scope, filters: Mapping[str, FilterValue] | None, now: float | None) -> int:
        return int(self.matching_rows(scope, filters, now).shape[0])

    def scan(
        self,
        scope: Scope,
        filters: Mapping[str, FilterValue] | None,
        limit: int,
        cursor: str | None,
        now: float | None,
        *,
        newest_first: bool = False,
    ) -> Page:
        """One page ordered by (timestamp, id), keyset-paginated: the cursor is the last pair seen."""
        from memkit_backends._embedded.scan import scan_page  # scan.py imports this module

        return scan_page(self, self.matching_rows(scope, filters, now), limit, cursor, newest_first)

    def ids_of(self, rows: npt.NDArray[np.int64]) -> list[str]:
        return [self._id(row) for row in rows.tolist()]

    def timestamps_of(self, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        return self._timestamps[rows]

    def record_at(self, row: int) -> Record:
        return self._out(row)

    def _id(self, row: int) -> str:
        record = self._records[row]
        return "" if record is None else record.id

    def expired_ids(self, now: float) -> list[str]:
        n = len(self._records)
        rows = np.flatnonzero((self._expires[:n] <= now) & (self._alive[:n] == 1))
        return [r.id for r in (self._records[int(i)] for i in rows) if r is not None]

    # -- search ---------------------------------------------------------------------------------
    def query(self, query: Query) -> list[Hit]:
        """Top-k by the fused kernel, text scored by the collection's own BM25 index."""
        want = self._scope_want(query.scope)
        if want is None or not self._records:
            return []
        n = len(self._records)
        candidates = self.candidate_rows(want, query.filters)
        if candidates is not None and candidates.shape[0] == 0:
            return []
        if candidates is not None and not candidates.flags.writeable:  # the index's own: the kernel gets a copy
            candidates = candidates.copy()
        # Scaled by the best match of the scope, not of the filtered rows: scores compare across filters.
        scoped = self._scope_rows.smallest(want)
        lexical = self._lexical_scores(query.text, want, n, scoped) if query.text else None
        if query.vector is not None and self.dim is not None and query.vector.shape[0] != self.dim:
            raise DimensionMismatchError(
                f"query vector has {query.vector.shape[0]} dimensions; collection has {self.dim}"
            )
        params = ScoreParams.from_query(query)
        vector = query.vector if self.dim else None
        best = top_k(self.columns(), params, query.k, scope_want=want, query=vector, lexical=lexical, rows=candidates)
        return self._hits(best.rows, best.final.tolist(), best.similarity.tolist(), lexical, params)

    def _lexical_scores(
        self, text: str, want: tuple[int, int, int], n: int, candidates: npt.NDArray[np.int64] | None
    ) -> npt.NDArray[np.float32] | None:
        raw, matched = self._lexical.score(tokenize(text), n, candidates)
        return scaled_to_best(raw, candidates, lambda rows: self._in_scope(rows, want)) if matched else None

    def _hits(
        self, rows: npt.NDArray[np.int64], finals: list[float], similarities: list[float],
        lexical: npt.NDArray[np.float32] | None, params: ScoreParams,
    ) -> list[Hit]:  # fmt: skip
        """The hits of ``rows``, their columns read once for all (a numpy scalar read a field a hit was a
        fifth of a recall on memory://)."""
        ages = np.maximum(params.now - self._timestamps[rows], 0.0)
        recency = (0.5 ** (ages / params.half_life_s)).tolist()
        importance = self._importance[rows].tolist()
        text = lexical[rows].tolist() if lexical is not None else [0.0] * len(rows)
        records = self._out_many(rows)
        return [Hit(record=record, scores=Scores(final=final, similarity=sim, lexical=lex, recency=rec, importance=imp))
                for record, final, sim, lex, rec, imp
                in zip(records, finals, similarities, text, recency, importance, strict=True)]  # fmt: skip
