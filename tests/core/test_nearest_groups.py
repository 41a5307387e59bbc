"""The near-duplicate kernel for a batch spanning scopes: each group's vectors against its own rows only, the
same answers whether the groups run one after another or split over threads, and the same as NumPy's."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memkit import scoring
from memkit.scoring import StorageDtype, nearest_in_groups
from tests.core.test_scoring import make_columns


def _groups(seed: int, n: int, n_groups: int) -> tuple[list[npt.NDArray[np.int64]], npt.NDArray[np.int64]]:
    """Disjoint ascending row sets (a user's rows each), some empty, and their bounds in one array."""
    rng = np.random.default_rng(seed)
    owner = rng.integers(0, n_groups + 1, n)  # owner n_groups: rows of nobody asked
    groups = [np.flatnonzero(owner == g).astype(np.int64) for g in range(n_groups)]
    bounds = np.zeros(n_groups + 1, np.int64)
    np.cumsum([g.shape[0] for g in groups], out=bounds[1:])
    return groups, bounds


def _reference(
    matrix: npt.NDArray[np.float32], rows: npt.NDArray[np.int64], queries: npt.NDArray[np.float32], floor: float, k: int
) -> list[list[int]]:
    """Best k rows per query by similarity at least ``floor``, ties to the earlier row."""
    answers = []
    for query in queries:
        sims = matrix[rows] @ query
        order = np.lexsort((rows, -sims))
        answers.append([int(rows[i]) for i in order if sims[i] >= floor][:k])
    return answers


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n_groups=st.integers(1, 12), k=st.integers(1, 4),
       floor=st.sampled_from([-1.0, 0.0, 0.2]))  # fmt: skip
def test_each_group_is_answered_from_its_own_rows(
    parallel: bool, dtype: StorageDtype, seed: int, n_groups: int, k: int, floor: float
) -> None:
    columns = make_columns(seed, 600, 24, dtype)
    groups, row_bounds = _groups(seed, 600, n_groups)
    rng = np.random.default_rng(seed + 1)
    per_group = rng.integers(0, 5, n_groups)
    queries = rng.standard_normal((int(per_group.sum()), 24)).astype(np.float32)
    query_bounds = np.zeros(n_groups + 1, np.int64)
    np.cumsum(per_group, out=query_bounds[1:])
    rows = np.concatenate(groups)
    threads = scoring.get_threads()
    minimum = scoring.NEAREST_PARALLEL_MIN_DOTS
    try:
        scoring.set_threads(2 if parallel else 1)
        scoring.NEAREST_PARALLEL_MIN_DOTS = 0 if parallel else 10**12  # type: ignore[misc]
        best_rows, _ = nearest_in_groups(rows, row_bounds, columns, queries, query_bounds, floor=floor, k=k)
    finally:
        scoring.set_threads(threads)
        scoring.NEAREST_PARALLEL_MIN_DOTS = minimum  # type: ignore[misc]
    stored = _decoded(columns)
    for g, group in enumerate(groups):
        asked = queries[query_bounds[g] : query_bounds[g + 1]]
        got = [[r for r in row if r >= 0] for row in best_rows[query_bounds[g] : query_bounds[g + 1]].tolist()]
        want = _reference(stored, group, asked, floor, k)
        assert [set(r) <= set(group.tolist()) for r in got] == [True] * len(got)  # never another group's row
        assert _same_up_to_rounding(got, want, stored, asked)


def _decoded(columns: scoring.Columns) -> npt.NDArray[np.float32]:
    vectors = columns.vectors
    if vectors.dtype == np.uint16:
        return vectors.view(np.float16).astype(np.float32)
    return vectors.astype(np.float32) * columns.scales[:, None]


def _same_up_to_rounding(
    got: list[list[int]], want: list[list[int]], stored: npt.NDArray[np.float32], queries: npt.NDArray[np.float32]
) -> bool:
    """The same rows, except where two rows' similarities differ by float32 rounding only."""
    for found, expected, query in zip(got, want, queries, strict=True):
        if found != expected:
            sims_found, sims_expected = stored[found] @ query, stored[expected] @ query
            if len(found) != len(expected) or not np.allclose(sims_found, sims_expected, atol=1e-4):
                return False
    return True
