"""Quantised storage: the int8 kernel's integer dot product, shortlist rescoring, and the bandwidth probe."""

from __future__ import annotations

import math
import time

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memkit.errors import DimensionMismatchError
from memkit.scoring import (
    Columns,
    StorageDtype,
    bandwidth_gb_s,
    encode_vectors,
    reference_top_k,
    stream_floor,
    top_k,
)
from tests.core.test_scoring import make_columns, params

Matrix = npt.NDArray[np.float32]


def dense_clusters(seed: int, n: int, dim: int, n_queries: int) -> tuple[Matrix, Matrix]:
    """A hard set: unit rows packed tight round 4 centres and queries among them, so the best scores are
    ~1e-4 apart, below int8's rounding noise (the case where int8 recall@10 fell to 0.97 at 1M)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((4, dim)).astype(np.float32)
    rows = centres[rng.integers(0, 4, n)] + 0.2 * rng.standard_normal((n, dim)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    noise = 3.0 * rng.standard_normal((n_queries, dim)).astype(np.float32) / math.sqrt(dim)
    queries = rows[rng.integers(0, n, n_queries)] + noise
    return rows, (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)


def with_vectors(columns: Columns, rows: npt.NDArray[np.float32], dtype: StorageDtype) -> Columns:
    stored, scales = encode_vectors(rows, dtype)
    return columns._replace(vectors=stored, scales=scales)


SIMILARITY_ONLY = params(w_similarity=1.0, w_lexical=0.0, w_recency=0.0, w_importance=0.0)


@pytest.mark.parametrize("dtype", ["float16", "int8"])
def test_rescoring_recovers_float32_top_k_on_a_hard_set(dtype: StorageDtype) -> None:
    rows, queries = dense_clusters(0, 20_000, 64, 20)
    base = make_columns(0, 20_000, 64)._replace(alive=np.ones(20_000, np.uint8), expires=np.full(20_000, np.inf))
    exact_cols, quant_cols = with_vectors(base, rows, "float32"), with_vectors(base, rows, dtype)
    scan_hits = rescored_hits = 0
    for query in queries:
        want = top_k(exact_cols, SIMILARITY_ONLY, 10, query=query)
        scan_hits += len(set(top_k(quant_cols, SIMILARITY_ONLY, 10, query=query).rows) & set(want.rows))
        got = top_k(quant_cols, SIMILARITY_ONLY, 10, query=query, exact=rows)
        rescored_hits += len(set(got.rows) & set(want.rows))
        np.testing.assert_allclose(got.final, want.final, rtol=1e-6, atol=1e-7)
    if dtype == "int8":
        assert scan_hits <= 195, "the set is not hard: int8 alone finds float32's top-10 (0.945 when written)"
    assert rescored_hits / 200 >= 0.99


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 500),
    k=st.integers(1, 20),
    user=st.integers(-1, 2),
    min_score=st.sampled_from([-math.inf, 0.2, 0.4]),
    use_lexical=st.booleans(),
    threads=st.sampled_from([1, 2]),
    dtype=st.sampled_from(["float16", "int8"]),
)
def test_rescored_scores_are_float32_scores(
    seed: int, n: int, k: int, user: int, min_score: float, use_lexical: bool, threads: int, dtype: StorageDtype
) -> None:  # fmt: skip
    """Every rescored hit carries the score the float32 kernel gives that row, min_score included, and a
    shortlist holding every candidate gives exactly float32's answer."""
    exact_cols = make_columns(seed, n, 16)
    rows = np.asarray(exact_cols.vectors, dtype=np.float32)
    quant_cols = with_vectors(exact_cols, rows, dtype)
    rng = np.random.default_rng(seed + 5)
    query = rng.standard_normal(16).astype(np.float32)
    lexical = rng.random(n).astype(np.float32) if use_lexical else None
    p = params(min_score=min_score)
    kwargs = dict(scope_want=(user, -1, -1), query=query, lexical=lexical, threads=threads)
    want = top_k(exact_cols, p, k, **kwargs)  # type: ignore[arg-type]
    got = top_k(quant_cols, p, k, exact=rows, **kwargs)  # type: ignore[arg-type]
    full = top_k(exact_cols, p, n, **kwargs)  # type: ignore[arg-type]
    by_row = dict(zip(full.rows.tolist(), full.final.tolist(), strict=True))
    assert all(r in by_row for r in got.rows.tolist()), "a rescored hit float32 rejects (min_score / masks)"
    np.testing.assert_allclose(got.final, [by_row[r] for r in got.rows.tolist()], rtol=1e-6, atol=1e-7)
    everything = top_k(quant_cols, p, k, exact=lambda r: rows[r], shortlist=n, **kwargs)  # type: ignore[arg-type]
    assert everything.rows.tolist() == want.rows.tolist()
    np.testing.assert_allclose(everything.final, want.final, rtol=1e-6, atol=1e-7)


def test_exact_rows_of_the_wrong_shape_are_refused() -> None:
    columns = make_columns(1, 100, 16, "int8")
    query = np.ones(16, np.float32)
    with pytest.raises(DimensionMismatchError, match="one full-precision row per candidate"):
        top_k(columns, params(), 5, query=query, exact=np.ones((100, 8), np.float32))
    with pytest.raises(DimensionMismatchError):
        top_k(columns, params(), 5, query=query, exact=lambda rows: np.ones((1, 16), np.float32))


def test_rescoring_is_skipped_where_it_cannot_change_anything() -> None:
    columns = make_columns(2, 300, 16, "int8")
    query = np.ones(16, np.float32)
    calls: list[int] = []

    def exact(rows: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        calls.append(rows.shape[0])
        return np.ones((rows.shape[0], 16), np.float32)

    top_k(columns, params(w_similarity=0.0), 5, query=query, exact=exact)
    top_k(columns, params(), 5, exact=exact)
    assert calls == []
    top_k(columns, params(), 5, query=query, exact=exact)
    assert calls and calls[0] <= 64  # the default shortlist: max(8 * k, 64) rows


@pytest.mark.parametrize("dim", [3, 384, 4096])
def test_int8_integer_dot_matches_float64(dim: int) -> None:
    """The int16 query keeps int32 partial sums from overflowing at any dimension, worst case included."""
    rng = np.random.default_rng(dim)
    rows = rng.standard_normal((50, dim)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)  # each scores at most |query| ~ sqrt(dim) < dim
    rows[0] = 1.0  # every product at its largest: 127 * the query's top level, dim times
    query = np.ones(dim, np.float32)
    query[1:] += 0.01 * rng.standard_normal(dim - 1).astype(np.float32)
    columns = with_vectors(make_columns(3, 50, dim), rows, "int8")._replace(
        alive=np.ones(50, np.uint8), expires=np.full(50, np.inf)
    )
    got = top_k(columns, SIMILARITY_ONLY, 50, query=query)
    decoded = columns.vectors.astype(np.float64) * columns.scales[:, None]
    want = decoded[got.rows] @ query.astype(np.float64)
    np.testing.assert_allclose(got.similarity, want, rtol=2e-5, atol=1e-5 * math.sqrt(dim))
    assert got.rows[0] == 0
    ref = reference_top_k(columns, SIMILARITY_ONLY, 50, query=query)
    np.testing.assert_allclose(got.final, ref.final, rtol=2e-5, atol=1e-5 * math.sqrt(dim))


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
def test_probe_reads_exactly_the_rows_bytes(dtype: StorageDtype) -> None:
    rows = np.random.default_rng(4).standard_normal((1001, 13)).astype(np.float32)
    stored, _ = encode_vectors(rows, dtype)
    flat = stored[:777].reshape(-1).view(np.uint8)
    words = flat[: flat.shape[0] // 8 * 8].view(np.uint64)
    want = int(words.sum(dtype=np.uint64))
    assert stream_floor(stored, 777, 1) == stream_floor(stored, 777, 2) == float(want)
    assert bandwidth_gb_s(stored, 777, 1e-6) == pytest.approx(stored[:777].nbytes / 1e-6 / 1e9)


def test_probe_time_follows_the_bytes() -> None:
    """A quarter of the bytes reads in well under the time: the old probe's int8 pass cost as much as
    float32's (its widening arithmetic, not the memory, set the pace)."""
    rows = np.random.default_rng(5).standard_normal((100_000, 384)).astype(np.float32)
    f32, i8 = encode_vectors(rows, "float32")[0], encode_vectors(rows, "int8")[0]

    def best_of(vectors: npt.NDArray[np.generic]) -> float:
        stream_floor(vectors, 100_000, 1)
        times = []
        for _ in range(7):
            started = time.perf_counter()
            stream_floor(vectors, 100_000, 1)
            times.append(time.perf_counter() - started)
        return min(times)

    assert best_of(i8) < 0.6 * best_of(f32)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
def test_zero_dimensional_rows_encode_with_a_scale_each(dtype: str) -> None:
    """A collection of 0-dimensional vectors: int8 returned no scale for its one row (an IndexError on write)."""
    values, scales = encode_vectors(np.zeros((3, 0), np.float32), dtype)  # type: ignore[arg-type]
    assert values.shape == (3, 0) and scales.shape == (3,)
