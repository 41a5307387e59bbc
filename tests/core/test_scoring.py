"""The numba kernels against the NumPy reference (the specification)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memkit.scoring import Columns, ScoreParams, StorageDtype, encode_vectors, reference_top_k, top_k


def make_columns(seed: int, n: int, dim: int, dtype: StorageDtype = "float32", n_users: int = 3) -> Columns:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    stored, scales = encode_vectors(vectors, dtype)
    scope = np.full((3, n), -1, np.int32)
    scope[0] = rng.integers(0, n_users, n)
    scope[2] = rng.integers(-1, 2, n)
    expires = np.where(rng.random(n) < 0.1, 50.0, np.inf)
    alive = (rng.random(n) > 0.05).astype(np.uint8)
    return Columns(n, stored, scales, rng.random(n).astype(np.float32), rng.random(n) * 1e6, expires, alive, scope)


def params(**overrides: float) -> ScoreParams:
    base = dict(now=1e6, half_life_s=2e5, min_importance=0.0, w_similarity=0.5, w_lexical=0.2,
                w_recency=0.2, w_importance=0.1, min_score=-math.inf)  # fmt: skip
    base.update(overrides)
    return ScoreParams(**base)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 400),
    k=st.integers(1, 30),
    user=st.integers(-1, 3),
    session=st.integers(-1, 1),
    min_importance=st.floats(0, 0.9),
    use_lexical=st.booleans(),
    use_mask=st.booleans(),
    threads=st.sampled_from([1, 2]),
)
def test_kernel_matches_reference(
    seed: int, n: int, k: int, user: int, session: int, min_importance: float, use_lexical: bool,
    use_mask: bool, threads: int,
) -> None:  # fmt: skip
    columns = make_columns(seed, n, 16)
    rng = np.random.default_rng(seed + 1)
    query = rng.standard_normal(16).astype(np.float32)
    lexical = rng.random(n).astype(np.float32) if use_lexical else None
    mask = (rng.random(n) > 0.3).astype(np.uint8) if use_mask else None
    p = params(min_importance=min_importance)
    kwargs = dict(scope_want=(user, -1, session), query=query, lexical=lexical, extra_mask=mask)
    got = top_k(columns, p, k, threads=threads, **kwargs)  # type: ignore[arg-type]
    want = reference_top_k(columns, p, k, **kwargs)  # type: ignore[arg-type]
    assert got.rows.shape == want.rows.shape
    np.testing.assert_allclose(got.final, want.final, rtol=1e-4, atol=1e-5)
    # Same set of rows up to ties at the cut-off score.
    if len(want.rows) and len(set(got.rows) ^ set(want.rows)):
        cutoff = want.final[-1]
        differing = set(got.rows) ^ set(want.rows)
        full = reference_top_k(columns, p, n, **kwargs)  # type: ignore[arg-type]
        by_row = dict(zip(full.rows.tolist(), full.final.tolist(), strict=True))
        assert all(abs(by_row[r] - cutoff) < 1e-5 for r in differing)


@pytest.mark.parametrize("dtype", ["float16", "int8"])
def test_quantized_storage_close_to_float32(dtype: StorageDtype) -> None:
    exact = make_columns(7, 2000, 64, "float32")
    quant = make_columns(7, 2000, 64, dtype)
    query = np.random.default_rng(3).standard_normal(64).astype(np.float32)
    query /= np.linalg.norm(query)
    p = params(w_similarity=1.0, w_lexical=0.0, w_recency=0.0, w_importance=0.0)
    a = top_k(exact, p, 50, query=query)
    b = top_k(quant, p, 50, query=query)
    tolerance = 2e-3 if dtype == "float16" else 2e-2
    np.testing.assert_allclose(b.final[:10], a.final[:10], atol=tolerance)
    assert len(set(a.rows[:10]) & set(b.rows[:20])) >= 9
    ref = reference_top_k(quant, p, 50, query=query)
    np.testing.assert_allclose(b.final, ref.final, atol=1e-4)


def test_recency_is_half_at_half_life() -> None:
    columns = make_columns(1, 3, 4)
    columns.timestamps[:] = [1e6, 1e6 - 2e5, 1e6 - 4e5]
    columns.alive[:] = 1
    columns.expires[:] = np.inf
    p = params(w_similarity=0.0, w_lexical=0.0, w_recency=1.0, w_importance=0.0)
    got = top_k(columns, p, 3)
    np.testing.assert_allclose(got.final, [1.0, 0.5, 0.25], rtol=1e-5)


def test_empty_and_no_match() -> None:
    columns = make_columns(1, 10, 4)
    assert top_k(columns, params(), 5, scope_want=(99, -1, -1)).rows.size == 0
    assert top_k(columns._replace(n_rows=0), params(), 5).rows.size == 0
    assert top_k(columns, params(min_score=100.0), 5).rows.size == 0


def test_expired_rows_excluded() -> None:
    columns = make_columns(2, 100, 4)
    columns.expires[:50] = 10.0  # before now
    got = top_k(columns, params(), 100)
    assert got.rows.size > 0 and (got.rows >= 50).all()


def test_kernels_load_from_cache_in_a_fresh_process() -> None:
    """cache=True: after one process compiled them, the next loads the kernels instead of compiling."""
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from memkit.scoring import _kernels\n"
        "from tests.core.test_scoring import make_columns, params\n"
        "from memkit.scoring import top_k\n"
        "top_k(make_columns(0, 50, 8), params(), 5, query=np.ones(8, np.float32))\n"
        "s = _kernels.scan_serial.stats\n"
        "print(sum(s.cache_hits.values()), sum(s.cache_misses.values()))\n"
    )
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True) for _ in (0, 1)]
    hits, misses = map(int, runs[1].stdout.split())
    assert hits >= 1 and misses == 0


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 300), k=st.integers(1, 20), threads=st.sampled_from([1, 2]))
def test_candidate_rows_score_as_a_mask_of_those_rows(seed: int, n: int, k: int, threads: int) -> None:
    """A store that indexes its scopes hands the kernel their rows: the same answer as masking the rest."""
    columns = make_columns(seed, n, 16)
    rng = np.random.default_rng(seed + 2)
    rows = np.flatnonzero(rng.random(n) > 0.6).astype(np.int64)
    mask = np.zeros(n, np.uint8)
    mask[rows] = 1
    query = rng.standard_normal(16).astype(np.float32)
    got = top_k(columns, params(), k, scope_want=(1, -1, -1), query=query, rows=rows, threads=threads)
    want = top_k(columns, params(), k, scope_want=(1, -1, -1), query=query, extra_mask=mask, threads=threads)
    assert got.rows.tolist() == want.rows.tolist()
    np.testing.assert_array_equal(got.final, want.final)
    assert top_k(columns, params(), k, query=query, rows=np.zeros(0, np.int64)).rows.shape == (0,)
