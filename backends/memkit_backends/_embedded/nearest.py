"""The batched near-duplicate check of the embedded backends: one pass over a scope's rows per batch.

``store_many`` asks, for every new memory of a scope, which stored memories of that scope are nearly the
same. One kernel query per memory reads the scope's rows once per memory; gathering the rows and
multiplying them by the batch (the previous version) copied them first. Here a numba kernel reads each row
of the scope (from the scope index) once, in place, and scores it against every vector of the batch:
the answers are the default's (a similarity-only query per vector: live, unexpired at ``now`` or the
current time, importance >= 0, ties to the earlier row).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from memkit.backend import Scope, Vector
from memkit.errors import DimensionMismatchError
from memkit.scoring._kernels import nearest_rows
from memkit_backends._embedded.columnar import ColumnarCollection

__all__ = ["nearest"]


def nearest(
    collection: ColumnarCollection,
    scope: Scope,
    vectors: Sequence[Vector],
    *,
    k: int,
    min_similarity: float,
    now: float | None,
) -> list[list[tuple[str, float]]]:
    if not len(vectors):
        return []
    if k < 1:
        return [[] for _ in vectors]
    rows = collection.matching_rows(scope, None, time.time() if now is None else now)
    columns = collection.columns()
    rows = rows[columns.importance[rows] >= 0.0]  # the default query's minimum importance
    if rows.shape[0] == 0:
        return [[] for _ in vectors]
    batch = np.ascontiguousarray(np.stack([np.asarray(v, np.float32) for v in vectors]))
    if collection.dim is None:  # no vectors stored: every row scores 0, as the kernel scores it
        batch = np.zeros((batch.shape[0], 0), np.float32)
    elif batch.shape[1] != collection.dim:
        raise DimensionMismatchError(f"vectors have {batch.shape[1]} dimensions; collection has {collection.dim}")
    take = min(k, rows.shape[0])
    best_rows = np.full((batch.shape[0], take), -1, np.int64)
    best_sims = np.full((batch.shape[0], take), -np.inf, np.float32)
    nearest_rows(np.ascontiguousarray(rows), columns.vectors, columns.scales, batch, float(min_similarity),
                 best_rows, best_sims)  # fmt: skip
    found = []
    for row_list, sim_list in zip(best_rows.tolist(), best_sims.tolist(), strict=True):
        kept = [(row, sim) for row, sim in zip(row_list, sim_list, strict=True) if row >= 0]
        found.append(list(zip(collection.ids_of(np.asarray([r for r, _ in kept], np.int64)),
                              [s for _, s in kept], strict=True)))  # fmt: skip
    return found
