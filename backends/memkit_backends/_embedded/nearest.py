"""The batched near-duplicate check of the embedded backends: one pass over each scope's rows per batch.

``store_many`` asks, for every new memory, which stored memories of its scope are nearly the same. One kernel
query per memory reads the scope's rows once per memory; gathering the rows and multiplying them by the batch
(an earlier version) copied them first. Here a numba kernel reads each row of a scope (from the scope index)
once, in place, and scores it against every vector of that scope's part of the batch, the scopes of a batch
split over the cores: the answers are the default's (a similarity-only query per vector: live, unexpired at
``now`` or the current time, importance >= 0, ties to the earlier row).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from memkit.backend import Scope, Vector
from memkit.errors import DimensionMismatchError
from memkit.scoring import nearest_in_groups
from memkit.scoring._kernels import nearest_rows
from memkit_backends._embedded.columnar import ColumnarCollection

__all__ = ["nearest", "nearest_many"]

Found = list[list[tuple[str, float]]]


def nearest(
    collection: ColumnarCollection,
    scope: Scope,
    vectors: Sequence[Vector],
    *,
    k: int,
    min_similarity: float,
    now: float | None,
) -> Found:
    return nearest_many(collection, [(scope, vectors)], k=k, min_similarity=min_similarity, now=now)[0]


def nearest_many(
    collection: ColumnarCollection,
    requests: Sequence[tuple[Scope, Sequence[Vector]]],
    *,
    k: int,
    min_similarity: float,
    now: float | None,
) -> list[Found]:
    """``nearest`` for each (scope, vectors), in one kernel call."""
    at = time.time() if now is None else now
    asked = [(at_request, scope, _stacked(collection, vectors))
             for at_request, (scope, vectors) in enumerate(requests) if len(vectors) and k >= 1]  # fmt: skip
    found: list[Found] = [[[] for _ in vectors] for _, vectors in requests]
    columns = collection.columns()
    groups = []
    for at_request, scope, batch in asked:
        rows = collection.matching_rows(scope, None, at)
        rows = rows[columns.importance[rows] >= 0.0]  # the default query's minimum importance
        if rows.shape[0]:
            groups.append((at_request, rows, batch))
    if not groups:
        return found
    take = min(k, max(rows.shape[0] for _, rows, _ in groups))
    floor = float(min_similarity)
    if len(groups) == 1:  # a store(): the kernel directly (the groups' bookkeeping was a fifth of its check)
        [(at_request, rows, batch)] = groups
        best_rows = np.full((batch.shape[0], take), -1, np.int64)
        best_sims = np.full((batch.shape[0], take), -np.inf, np.float32)
        nearest_rows(np.ascontiguousarray(rows), columns.vectors, columns.scales, batch, floor, best_rows, best_sims)
        found[at_request] = _answers(collection, best_rows, best_sims)
        return found
    rows = np.concatenate([rows for _, rows, _ in groups])
    batch = np.ascontiguousarray(np.concatenate([batch for _, _, batch in groups]))
    row_bounds = _bounds([g[1].shape[0] for g in groups])
    query_bounds = _bounds([g[2].shape[0] for g in groups])
    best_rows, best_sims = nearest_in_groups(rows, row_bounds, columns, batch, query_bounds, floor=floor, k=take)
    for g, (at_request, _, _) in enumerate(groups):
        part = slice(int(query_bounds[g]), int(query_bounds[g + 1]))
        found[at_request] = _answers(collection, best_rows[part], best_sims[part])
    return found


def _stacked(collection: ColumnarCollection, vectors: Sequence[Vector]) -> npt.NDArray[np.float32]:
    batch = np.stack([np.asarray(v, np.float32) for v in vectors])
    if collection.dim is None:  # no vectors stored: every row scores 0, as the kernel scores it
        return np.zeros((batch.shape[0], 0), np.float32)
    if batch.shape[1] != collection.dim:
        raise DimensionMismatchError(f"vectors have {batch.shape[1]} dimensions; collection has {collection.dim}")
    return batch


def _bounds(sizes: list[int]) -> npt.NDArray[np.int64]:
    bounds = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=bounds[1:])
    return bounds


def _answers(collection: ColumnarCollection, rows: npt.NDArray[np.int64], sims: npt.NDArray[np.float32]) -> Found:
    answers = []
    for row_list, sim_list in zip(rows.tolist(), sims.tolist(), strict=True):
        kept = [(row, sim) for row, sim in zip(row_list, sim_list, strict=True) if row >= 0]
        answers.append(list(zip(collection.ids_of(np.asarray([r for r, _ in kept], np.int64)),
                                [s for _, s in kept], strict=True)))  # fmt: skip
    return answers
