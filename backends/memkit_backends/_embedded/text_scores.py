"""Text scores as the kernel's lexical column: 0..1, scaled by the best match the caller may see."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

__all__ = ["scaled_to_best"]


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
