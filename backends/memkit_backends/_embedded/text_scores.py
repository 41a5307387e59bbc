"""Text scores as the kernel's lexical column: 0..1, scaled by the best match the caller may see."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import numpy.typing as npt

__all__ = ["scaled_external", "scaled_to_best"]


def scaled_to_best(
    raw: npt.NDArray[np.float32],
    candidates: npt.NDArray[np.int64] | None,
    in_scope: Callable[[npt.NDArray[np.int64]], npt.NDArray[np.bool_]],
) -> npt.NDArray[np.float32] | None:
    """``raw`` (BM25 per row) divided by its best in-scope score, in place; None when nothing in scope matched.
    Only ``candidates`` can score (when given), so only they are looked at."""
    rows = np.flatnonzero(raw) if candidates is None else candidates[raw[candidates] > 0]
    keep = in_scope(rows)
    top = float(raw[rows[keep]].max()) if keep.any() else 0.0
    if top <= 0:
        return None
    raw /= top
    return raw


def scaled_external(raw: Mapping[str, float], row_of: Mapping[str, int], n: int) -> npt.NDArray[np.float32] | None:
    """Another index's raw text scores (SQLite's FTS5) as a column scaled to 0..1 by the best one."""
    top = max(raw.values(), default=0.0)
    if top <= 0:
        return None
    lexical = np.zeros(n, np.float32)
    for record_id, score in raw.items():
        row = row_of.get(record_id)
        if row is not None:
            lexical[row] = score / top
    return lexical
