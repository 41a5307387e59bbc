"""NumPy reference of the fused kernel: the specification the parity tests hold the kernel to.

Also the "NumPy" column of the scoring benchmark. Not used on any query path.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from memkit.scoring import Columns, ScoreParams, TopK


def decode_vectors(columns: Columns) -> npt.NDArray[np.float32]:
    stored = columns.vectors[: columns.n_rows]
    if stored.dtype == np.uint16:
        return stored.view(np.float16).astype(np.float32)
    if stored.dtype == np.int8:
        return stored.astype(np.float32) * columns.scales[: columns.n_rows, None]
    return np.asarray(stored, dtype=np.float32)


def reference_scores(
    columns: Columns,
    params: ScoreParams,
    *,
    scope_want: tuple[int, int, int] = (-1, -1, -1),
    query: npt.NDArray[np.float32] | None = None,
    lexical: npt.NDArray[np.float32] | None = None,
    extra_mask: npt.NDArray[np.uint8] | None = None,
    vectors: npt.NDArray[np.float32] | None = None,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_], npt.NDArray[np.float32]]:
    """(final score, mask, similarity) for every row; ``vectors`` skips decoding when given."""
    n = columns.n_rows
    mask = columns.alive[:n].astype(bool)
    for axis, want in enumerate(scope_want):
        if want >= 0:
            mask &= columns.scope_cols[axis, :n] == want
    mask &= columns.expires[:n] > params.now
    importance = columns.importance[:n]
    mask &= importance >= params.min_importance
    if extra_mask is not None and extra_mask.shape[0] > 0:
        mask &= extra_mask[:n].astype(bool)
    if query is not None and query.shape[0] > 0:
        matrix = decode_vectors(columns) if vectors is None else vectors
        sim = (matrix @ query).astype(np.float32)
    else:
        sim = np.zeros(n, np.float32)
    lex = lexical[:n] if lexical is not None and lexical.shape[0] > 0 else np.zeros(n, np.float32)
    age = np.maximum(params.now - columns.timestamps[:n], 0.0)
    recency = np.exp(-age * (math.log(2.0) / params.half_life_s))
    final = (
        params.w_similarity * sim
        + params.w_lexical * lex
        + params.w_recency * recency
        + params.w_importance * importance
    ).astype(np.float32)
    mask &= final >= params.min_score
    return final, mask, sim


def reference_top_k(
    columns: Columns,
    params: ScoreParams,
    k: int,
    *,
    scope_want: tuple[int, int, int] = (-1, -1, -1),
    query: npt.NDArray[np.float32] | None = None,
    lexical: npt.NDArray[np.float32] | None = None,
    extra_mask: npt.NDArray[np.uint8] | None = None,
    vectors: npt.NDArray[np.float32] | None = None,
) -> TopK:
    from memkit.scoring import TopK

    final, mask, sim = reference_scores(
        columns, params, scope_want=scope_want, query=query, lexical=lexical, extra_mask=extra_mask, vectors=vectors
    )
    rows = np.flatnonzero(mask)
    if k < rows.shape[0]:
        part = np.argpartition(-final[rows], k - 1)[:k]
        rows = rows[part]
    order = np.lexsort((rows, -final[rows]))
    rows = rows[order].astype(np.int64)
    return TopK(rows, final[rows], sim[rows])
