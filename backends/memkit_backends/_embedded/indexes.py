"""The small indexes of a columnar collection, and the checks a record passes before it is stored.

Scope ids are interned to integers (the kernels mask by scope without touching strings) with a
reference count each, so an id no live row uses any more is released. Field values become keys of an
inverted index: one key per scalar, one per tag of a tuple.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Literal, TypeAlias

import numpy as np
import numpy.typing as npt

from memkit.backend import FieldValue, FilterValue, Record
from memkit.errors import DimensionMismatchError, ValidationError

__all__ = [
    "FieldIndex",
    "FieldKey",
    "RowMask",
    "ScopeInterner",
    "ScopeRows",
    "check_record",
    "dim_after",
    "field_keys",
    "filter_keys",
    "replace_verdict",
    "require_dim",
]

FieldKey: TypeAlias = tuple[str, FieldValue, bool]
"""(field name, value, value is a bool): ``True == 1`` in Python, but a filter ``{"n": 1}`` must not match
``{"n": True}`` (JSON tells them apart, and so do the server backends)."""


def field_keys(name: str, value: FieldValue | tuple[str, ...]) -> Iterator[FieldKey]:
    """The index keys of one field: its value, or each of its tags."""
    if isinstance(value, tuple):
        for tag in value:
            yield (name, tag, False)
    else:
        yield (name, value, isinstance(value, bool))


def filter_keys(name: str, wanted: FilterValue) -> list[FieldKey]:
    """The keys any of which a record must have to pass one filter (a list or tuple means "any of")."""
    values = wanted if isinstance(wanted, list | tuple) else (wanted,)
    return [(name, value, isinstance(value, bool)) for value in values]


def require_dim(name: str, have: int | None, want: int) -> None:
    if have is not None and have != want:
        raise DimensionMismatchError(f"collection {name!r} holds {have}-dimensional vectors, not {want}")


def dim_after(records: Iterable[Record], dim: int | None) -> int | None:
    """A collection's dimension (``dim``, None for none yet) after ``records``; raises on a record it cannot
    hold (a dimension mismatch, NaN or infinity in its numbers or fields)."""
    for record in records:
        check_record(record)
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


_STRINGS = itertools.repeat(str)
"""``str`` forever: ``map(isinstance, tags, _STRINGS)`` tests each tag without a Python-level loop."""


def check_record(record: Record) -> None:
    """Refuse what the store could not hold faithfully: NaN or infinite numbers (JSON has none, and NaN
    breaks ordering and equality), field values of other types. The layer validates metadata too; this is
    the same rule on every backend, as defence in depth."""
    for name, number in (("importance", record.importance), ("timestamp", record.timestamp)):
        if not isinstance(number, int | float) or not math.isfinite(number):
            raise ValidationError(f"record {record.id!r}: {name} must be a finite number, got {number!r}")
    if record.expires_at is not None and math.isnan(record.expires_at):
        raise ValidationError(f"record {record.id!r}: expires_at is NaN")
    for name, value in record.fields.items():
        kind = type(value)
        if type(name) is str and (kind is str or kind is int or kind is bool):  # the common cases, fast
            continue
        if isinstance(value, tuple) and type(name) is str and all(map(isinstance, value, _STRINGS)):  # tags, in C
            continue
        _check_field(record, name, value)


def _check_field(record: Record, name: object, value: object) -> None:
    if not isinstance(name, str):
        raise ValidationError(f"record {record.id!r}: field names must be strings, got {name!r}")
    if isinstance(value, tuple):
        if not all(isinstance(tag, str) for tag in value):
            raise ValidationError(f"record {record.id!r}: field {name!r} is a tuple of non-strings: {value!r}")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationError(f"record {record.id!r}: field {name!r} is {value}; only finite numbers")
    elif not isinstance(value, str | int):  # bool is an int
        raise ValidationError(
            f"record {record.id!r}: field {name!r} is a {type(value).__name__}; "
            "use a string, number, bool or a tuple of strings (tags)"
        )


def replace_verdict(stored: bytes | None, new: bytes, expected: bytes | None) -> Literal["done", "write", "refuse"]:
    """The contract's compare-and-set rule. ``stored``: the body held now (None: no record with that id).
    "done": the stored body is already the new one (a retry whose first attempt succeeded)."""
    if stored is not None and stored == new:
        return "done"
    if stored == expected:  # both None: create-if-absent on an absent id
        return "write"
    return "refuse"


class ScopeInterner:
    """Scope ids <-> small integers, reference counted; -1 stands for "no id"."""

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}
        self._values: list[str | None] = []
        self._refs: list[int] = []
        self._free: list[int] = []

    def __len__(self) -> int:
        return len(self._codes)

    def acquire(self, value: str | None) -> int:
        if value is None:
            return -1
        code = self._codes.get(value)
        if code is None:
            if self._free:
                code = self._free.pop()
                self._values[code] = value
            else:
                code = len(self._refs)
                self._values.append(value)
                self._refs.append(0)
            self._codes[value] = code
        self._refs[code] += 1
        return code

    def release(self, code: int) -> None:
        if code < 0:
            return
        self._refs[code] -= 1
        if self._refs[code] == 0:
            value = self._values[code]
            if value is not None:
                del self._codes[value]
            self._values[code] = None
            self._free.append(code)

    def lookup(self, value: str | None) -> int | None:
        """-1 for "any", None when no live row has the value (nothing can match)."""
        if value is None:
            return -1
        return self._codes.get(value)


_SORTED_CACHE_MIN = 256
"""Keys with fewer rows sort in a few microseconds: not worth keeping."""
MASK_MIN_ROWS = 4096
"""A key's rows as a set until it has this many, and they are at least a 32nd of the rows below the highest;
then a ``RowMask``."""


class RowMask:
    """A big key's rows (a ``kind`` every memory has) as one byte a row, not a set: a set of 100k rows held
    ~70 bytes a row (its table and an int object each), 7 MB of memory:// at 100k memories. Answers what the
    filters ask of a set: ``len``, ``in``, iteration (ascending)."""

    __slots__ = ("_count", "_mask")

    def __init__(self, rows: Iterable[int]) -> None:
        self._mask = bytearray()
        self._count = 0
        for row in rows:
            self.add(row)

    def __len__(self) -> int:
        return self._count

    def __contains__(self, row: object) -> bool:
        if not isinstance(row, int | np.integer):  # a numpy row too, as a set would find it
            return False
        return bool(0 <= row < len(self._mask) and self._mask[row] == 1)

    def __iter__(self) -> Iterator[int]:
        return iter(self.sorted().tolist())

    def sorted(self) -> npt.NDArray[np.int64]:
        return np.flatnonzero(np.frombuffer(self._mask, np.uint8)).astype(np.int64)

    def add(self, row: int) -> None:
        if row >= len(self._mask):
            self._mask += bytes(max(row + 1, 2 * len(self._mask)) - len(self._mask))
        if not self._mask[row]:
            self._mask[row] = 1
            self._count += 1

    def discard(self, row: int) -> None:
        if row in self:
            self._mask[row] = 0
            self._count -= 1


class FieldIndex:
    """Field keys -> the rows holding them. A key held by one row (every dedupe key, nearly) keeps the bare
    row number, not a set: sets are tracked by Python's cycle collector, and at 100k memories 100k one-row
    sets made each full collection walk them (collections took 12% of an ingest, up to 274 ms each). Keys
    are held as one dict of values per (field, value is a bool): a (name, value, flag) tuple per dedupe key
    was ~100 bytes a memory (10 MB at 100k)."""

    def __init__(self, mask_min_rows: int = MASK_MIN_ROWS) -> None:
        self._fields: dict[tuple[str, bool], dict[FieldValue, int | set[int] | RowMask]] = {}
        self._sorted: dict[FieldKey, npt.NDArray[np.int64]] = {}
        """``sorted_rows`` of big keys, until a row of theirs changes."""
        self._mask_min_rows = mask_min_rows

    def __iter__(self) -> Iterator[FieldKey]:
        """The keys some row holds."""
        for (name, is_bool), values in self._fields.items():
            for value in values:
                yield (name, value, is_bool)

    def add_fields(self, row: int, fields: Mapping[str, FieldValue | tuple[str, ...]]) -> None:
        """``add`` for every key of a record's fields, inlined: a graph edge has nine keys, and a call per
        key was a tenth of a batched graph upsert."""
        by_field, cached = self._fields, self._sorted
        for name, value in fields.items():
            values: tuple[FieldValue, ...]
            if isinstance(value, tuple):
                values, is_bool = value, False
            else:
                values, is_bool = (value,), isinstance(value, bool)
            if not values:  # no tags
                continue
            held_by = by_field.get((name, is_bool))
            if held_by is None:
                held_by = by_field[name, is_bool] = {}
            for one in values:
                held = held_by.get(one)
                if held is None:
                    held_by[one] = row
                elif isinstance(held, int):
                    if held != row:
                        held_by[one] = {held, row}
                else:
                    held.add(row)
                    if cached:
                        cached.pop((name, one, is_bool), None)
                    if len(held) >= self._mask_min_rows and isinstance(held, set):
                        self._maybe_mask(held_by, one, row)

    def add(self, key: FieldKey, row: int) -> None:
        name, value, is_bool = key
        held_by = self._fields.setdefault((name, is_bool), {})
        held = held_by.get(value)
        if held is None:
            held_by[value] = row
        elif isinstance(held, int):
            if held != row:
                held_by[value] = {held, row}
        else:
            held.add(row)
            if self._sorted:
                self._sorted.pop(key, None)
            if len(held) >= self._mask_min_rows and isinstance(held, set):
                self._maybe_mask(held_by, value, row)

    @staticmethod
    def _maybe_mask(held_by: dict[FieldValue, int | set[int] | RowMask], value: FieldValue, row: int) -> None:
        """The value's set as a mask, if the mask is smaller (rows are numbered from 0 up; ``row``, just
        added, is about the highest)."""
        held = held_by[value]
        assert isinstance(held, set)
        if len(held) * 32 >= row:
            held_by[value] = RowMask(held)

    def discard(self, key: FieldKey, row: int) -> None:
        name, value, is_bool = key
        held_by = self._fields.get((name, is_bool))
        held = None if held_by is None else held_by.get(value)
        if held_by is None or held is None:
            return
        if isinstance(held, int):
            if held == row:
                del held_by[value]
                if not held_by:
                    del self._fields[name, is_bool]
            return
        held.discard(row)
        if self._sorted:
            self._sorted.pop(key, None)
        if len(held) == 1:
            held_by[value] = next(iter(held))

    def sorted_rows(self, key: FieldKey) -> npt.NDArray[np.int64]:
        """The rows holding ``key``, ascending, read only. Kept for keys of many rows: a graph hub's edge key
        (a thousand rows) cost 0.3 ms to turn from a set into a sorted array at every scan of the hub."""
        cached = self._sorted.get(key)
        if cached is not None:
            return cached
        rows = self.rows(key)
        ordered = rows.sorted() if isinstance(rows, RowMask) else np.sort(np.fromiter(rows, np.int64, len(rows)))
        if len(rows) >= _SORTED_CACHE_MIN:
            ordered.flags.writeable = False
            self._sorted[key] = ordered
        return ordered

    def rows(self, key: FieldKey) -> set[int] | RowMask | tuple[int, ...]:
        """The rows holding ``key``: read only (a set of the index's own, or a tuple)."""
        name, value, is_bool = key
        held_by = self._fields.get((name, is_bool))
        held = None if held_by is None else held_by.get(value)
        if held is None:
            return ()
        return (held,) if isinstance(held, int) else held


class _SortedRows:
    """Ascending row numbers in a growable array: new rows are the collection's highest, so an add is an
    append; a remove (or a rewrite into another scope) shifts the tail."""

    __slots__ = ("_rows", "_size")

    def __init__(self) -> None:
        self._rows = np.empty(16, np.int64)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, row: int) -> None:
        size = self._size
        if size == self._rows.shape[0]:
            self._rows = np.concatenate([self._rows, np.empty(size, np.int64)])
        if size == 0 or row > self._rows[size - 1]:
            self._rows[size] = row
        else:
            at = int(np.searchsorted(self._rows[:size], row))
            if at < size and self._rows[at] == row:
                return
            self._rows[at + 1 : size + 1] = self._rows[at:size]
            self._rows[at] = row
        self._size = size + 1

    def add_many(self, rows: npt.NDArray[np.int64]) -> None:
        """Rows none of which is held, ascending: appended when all are past the last, else merged in one
        pass (an agent's rows across its users' pages arrive out of order: one insert each shifted the tail,
        and a batch of 1,000 took 15 ms at 200k rows)."""
        size = self._size
        if size == 0 or rows[0] > self._rows[size - 1]:
            merged = rows
            at = size
        else:
            held = self._rows[:size]
            merged = np.insert(held, np.searchsorted(held, rows), rows)  # one copy, no sort
            at = 0
        if at + merged.shape[0] > self._rows.shape[0]:
            grown = np.empty(max(at + merged.shape[0], 2 * self._rows.shape[0]), np.int64)
            grown[:at] = self._rows[:at]
            self._rows = grown
        self._rows[at : at + merged.shape[0]] = merged
        self._size = at + merged.shape[0]

    def remove(self, row: int) -> None:
        size = self._size
        at = int(np.searchsorted(self._rows[:size], row))
        if at < size and self._rows[at] == row:
            self._rows[at : size - 1] = self._rows[at + 1 : size]
            self._size = size - 1

    def view(self) -> npt.NDArray[np.int64]:
        rows = self._rows[: self._size]
        rows.flags.writeable = False
        return rows


_NONE = np.zeros(0, np.int64)
_NONE.flags.writeable = False
_FEW_ROWS = 8
"""A scope id's new rows in one batch below this many are added one by one."""


class ScopeRows:
    """Rows per interned scope id, one map per axis (user, agent, session): a scope's rows without a pass
    over the collection. At 100k rows of 100 users, finding the 1,000 rows of one user read every row's
    scope (0.27 ms, 100 times per stored batch); as a set it was 45 us to turn into an array."""

    def __init__(self) -> None:
        self._axes: tuple[dict[int, _SortedRows], ...] = ({}, {}, {})

    def add(self, row: int, codes: Sequence[int]) -> None:
        for axis, code in zip(self._axes, codes, strict=True):
            if code >= 0:
                found = axis.get(code)
                if found is None:
                    found = axis[code] = _SortedRows()
                found.add(row)

    def add_many(self, rows: Sequence[int], codes: Sequence[Sequence[int]]) -> None:
        """``add`` for each (row, its codes): each scope id's new rows merged in at once."""
        by_id: dict[tuple[int, int], list[int]] = {}
        for row, row_codes in zip(rows, codes, strict=True):
            for axis, code in enumerate(row_codes):
                if code >= 0:
                    by_id.setdefault((axis, code), []).append(row)
        for (axis, code), new_rows in by_id.items():
            found = self._axes[axis].get(code)
            if found is None:
                found = self._axes[axis][code] = _SortedRows()
            if len(new_rows) < _FEW_ROWS:  # a user's one or two rows of the batch: numpy's calls cost more
                for row in new_rows:
                    found.add(row)
            else:
                found.add_many(np.sort(np.asarray(new_rows, np.int64)))

    def remove(self, row: int, codes: Sequence[int]) -> None:
        for axis, code in zip(self._axes, codes, strict=True):
            rows = axis.get(code)
            if rows is not None:
                rows.remove(row)
                if not len(rows):
                    del axis[code]

    def smallest(self, want: Sequence[int]) -> npt.NDArray[np.int64] | None:
        """The fewest rows (ascending, read-only) that hold every wanted id: a superset, whose other axes
        still need their check; None when no axis is asked for (every row is a candidate)."""
        asked = [self._axes[axis].get(code) for axis, code in enumerate(want) if code >= 0]
        if not asked:
            return None
        if any(rows is None for rows in asked):
            return _NONE
        return min((rows for rows in asked if rows is not None), key=len).view()
