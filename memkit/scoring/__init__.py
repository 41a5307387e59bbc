"""Hybrid scoring over columns: the numba kernels and their NumPy reference.

Importing this module imports numba; ``import memkit`` does not.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, NamedTuple

import numba
import numpy as np
import numpy.typing as npt

from memkit.errors import DimensionMismatchError
from memkit.scoring import _kernels
from memkit.scoring._reference import reference_top_k

if TYPE_CHECKING:
    from memkit.backend import Query

__all__ = [
    "NEAREST_PARALLEL_MIN_DOTS",
    "PARALLEL_MIN_ROWS",
    "SHORTLIST_FACTOR",
    "SHORTLIST_MIN",
    "Columns",
    "ExactRows",
    "ScoreParams",
    "StorageDtype",
    "TopK",
    "bandwidth_gb_s",
    "encode_vectors",
    "get_threads",
    "reference_top_k",
    "set_threads",
    "stream_floor",
    "nearest_in_groups",
    "top_k",
]

StorageDtype = Literal["float32", "float16", "int8"]

PARALLEL_MIN_ROWS = 50_000
"""Below this many rows one thread wins: on shared 2-core machines a busy core makes 2-thread calls 50x slower."""

_settings = {"threads": max(1, int(os.environ.get("MEMKIT_SCORING_THREADS", "0") or 0) or (os.cpu_count() or 1))}
# numba's default threading layers are not safe for concurrent parallel launches from several
# threads, so parallel scans are serialised; serial scans (the common, per-user case) are not.
_parallel_lock = threading.Lock()
_CHUNKS_PER_THREAD = 2
_EMPTY_F32 = np.zeros(0, dtype=np.float32)
_EMPTY_U8 = np.zeros(0, dtype=np.uint8)
_EMPTY_I64 = np.zeros(0, dtype=np.int64)


def get_threads() -> int:
    """Threads used by scans over at least ``PARALLEL_MIN_ROWS`` rows."""
    return _settings["threads"]


def set_threads(n: int) -> None:
    """Threads used by scans over at least ``PARALLEL_MIN_ROWS`` rows (env: MEMKIT_SCORING_THREADS)."""
    if n < 1:
        raise ValueError("threads must be >= 1")
    _settings["threads"] = min(n, numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]


class Columns(NamedTuple):
    """Column views the kernel reads; arrays may be longer than ``n_rows`` (growth slack)."""

    n_rows: int
    vectors: npt.NDArray[np.float32] | npt.NDArray[np.uint16] | npt.NDArray[np.int8]
    scales: npt.NDArray[np.float32]
    importance: npt.NDArray[np.float32]
    timestamps: npt.NDArray[np.float64]
    expires: npt.NDArray[np.float64]
    alive: npt.NDArray[np.uint8]
    scope_cols: npt.NDArray[np.int32]
    """shape (3, capacity): interned user, agent and session ids; -1 for none."""


class ScoreParams(NamedTuple):
    now: float
    half_life_s: float
    min_importance: float
    w_similarity: float
    w_lexical: float
    w_recency: float
    w_importance: float
    min_score: float

    @classmethod
    def from_query(cls, query: Query) -> ScoreParams:
        """The kernel's parameters for a backend query: built in one place for every backend."""
        w = query.weights
        return cls(query.now, query.half_life_s, query.min_importance, w.similarity, w.lexical, w.recency,
                   w.importance, query.min_score)  # fmt: skip


class TopK(NamedTuple):
    rows: npt.NDArray[np.int64]
    final: npt.NDArray[np.float32]
    similarity: npt.NDArray[np.float32]


_NO_HITS = TopK(_EMPTY_I64, _EMPTY_F32, _EMPTY_F32)


def encode_vectors(
    matrix: npt.NDArray[np.float32], dtype: StorageDtype
) -> tuple[npt.NDArray[np.float32] | npt.NDArray[np.uint16] | npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """Stored form of float32 rows: (values, per-row scales; scales are used by int8 only)."""
    ones = np.ones(matrix.shape[0], dtype=np.float32)
    if dtype == "float32":
        return np.ascontiguousarray(matrix, dtype=np.float32), ones
    if dtype == "float16":
        return np.ascontiguousarray(matrix.astype(np.float16).view(np.uint16)), ones
    if dtype == "int8":
        peak = np.abs(matrix).max(axis=1) if matrix.size else np.zeros(matrix.shape[0], np.float32)
        scales = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
        quantized = np.clip(np.rint(matrix / scales[:, None]), -127, 127).astype(np.int8)
        return np.ascontiguousarray(quantized), scales
    raise ValueError(f"unknown storage dtype {dtype!r}; use float32, float16 or int8")


ExactRows = npt.NDArray[np.float32] | Callable[[npt.NDArray[np.int64]], npt.NDArray[np.float32]]
"""Full-precision vectors for rescoring: a (rows, dim) float32 array indexed like the columns, or a
function from ascending row numbers to their vectors, one per row, in that order."""

SHORTLIST_FACTOR = 8
"""Rescoring shortlist: this many candidates per wanted result (at least ``SHORTLIST_MIN``)."""
SHORTLIST_MIN = 64


def top_k(
    columns: Columns,
    params: ScoreParams,
    k: int,
    *,
    scope_want: tuple[int, int, int] = (-1, -1, -1),
    query: npt.NDArray[np.float32] | None = None,
    lexical: npt.NDArray[np.float32] | None = None,
    extra_mask: npt.NDArray[np.uint8] | None = None,
    rows: npt.NDArray[np.int64] | None = None,
    threads: int | None = None,
    exact: ExactRows | None = None,
    shortlist: int | None = None,
) -> TopK:
    """Best ``k`` rows by the fused hybrid score, best first. ``rows``: score only these (ascending, each
    below ``columns.n_rows``), for a store that indexes its scopes; every other mask still applies.

    ``exact``: with float16 / int8 storage, the stored rows only shortlist the best ``shortlist`` rows
    (default ``max(SHORTLIST_FACTOR * k, SHORTLIST_MIN)``), which are then scored again from these
    full-precision vectors: the answer is float32's whenever float32's top k is in the shortlist.
    Quantisation noise (int8: ~4e-4 in cosine) exceeds the gap between the 10th and 11th best of a
    dense million-row set, so without it int8 recall@10 there was 0.97."""
    if k <= 0 or (columns.n_rows if rows is None else rows.shape[0]) == 0:
        return _NO_HITS
    if exact is None or query is None or columns.vectors.dtype == np.float32 or params.w_similarity == 0:
        return _scan(columns, params, k, scope_want=scope_want, query=query, lexical=lexical,
                     extra_mask=extra_mask, rows=rows, threads=threads)  # fmt: skip
    size = max(k, shortlist or max(SHORTLIST_FACTOR * k, SHORTLIST_MIN))
    # min_score is applied to exact scores only: a row just below it by its stored form may pass.
    approx = _scan(columns, params._replace(min_score=-math.inf), size, scope_want=scope_want, query=query,
                   lexical=lexical, extra_mask=extra_mask, rows=rows, threads=threads)  # fmt: skip
    if approx.rows.shape[0] == 0:
        return _NO_HITS
    return _rescore(columns, params, k, np.sort(approx.rows), exact=exact, query=query, lexical=lexical,
                    scope_want=scope_want)  # fmt: skip


def _rescore(
    columns: Columns,
    params: ScoreParams,
    k: int,
    candidates: npt.NDArray[np.int64],
    *,
    exact: ExactRows,
    query: npt.NDArray[np.float32],
    lexical: npt.NDArray[np.float32] | None,
    scope_want: tuple[int, int, int],
) -> TopK:
    """The candidates' exact top k: their columns gathered into a small float32 table and scanned by
    the same kernel, so a rescored score is computed exactly as a float32 scan computes it."""
    vectors = exact[candidates] if isinstance(exact, np.ndarray) else exact(candidates)
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape != (candidates.shape[0], query.shape[0]):
        raise DimensionMismatchError(
            f"exact vectors for rescoring have shape {vectors.shape}; expected ({candidates.shape[0]}, "
            f"{query.shape[0]}): one full-precision row per candidate, as long as the query"
        )
    sub = Columns(
        candidates.shape[0],
        vectors,
        np.ones(candidates.shape[0], np.float32),
        columns.importance[candidates],
        columns.timestamps[candidates],
        columns.expires[candidates],
        columns.alive[candidates],
        np.ascontiguousarray(columns.scope_cols[:, candidates]),
    )
    sub_lexical = None if lexical is None or lexical.shape[0] == 0 else lexical[candidates]
    best = _scan(sub, params, k, scope_want=scope_want, query=query, lexical=sub_lexical, extra_mask=None, rows=None,
                 threads=1)  # fmt: skip
    # candidates ascend, so the kernel's tie order (by row) carries over to the original rows.
    return TopK(candidates[best.rows], best.final, best.similarity)


def _kernel_query(
    query: npt.NDArray[np.float32] | None, stored: np.dtype[np.generic]
) -> tuple[npt.NDArray[np.float32] | npt.NDArray[np.int16], float]:
    """The query as the kernel reads it, and the factor its dot products take.

    Against int8 rows the query is int16 (rounding error ~1e-5 of its largest component, 1/250 of the
    rows' own), so the kernel multiplies integers; the scale keeps every int32 partial sum of
    ``dim`` products of at most 127 * 32767 from overflowing."""
    if query is None:
        return _EMPTY_F32, 1.0
    q = np.ascontiguousarray(query, dtype=np.float32)
    if stored != np.int8 or q.shape[0] == 0:
        return q, 1.0
    peak = float(np.abs(q).max())
    if not math.isfinite(peak) or peak == 0.0:
        return q, 1.0  # the float path: NaN and zero queries score as they do on float32
    levels = min(32767, (2**31 - 1) // (127 * q.shape[0]))
    scale = peak / levels
    return np.rint(q / scale).astype(np.int16), scale


def _scan(
    columns: Columns,
    params: ScoreParams,
    k: int,
    *,
    scope_want: tuple[int, int, int],
    query: npt.NDArray[np.float32] | None,
    lexical: npt.NDArray[np.float32] | None,
    extra_mask: npt.NDArray[np.uint8] | None,
    rows: npt.NDArray[np.int64] | None,
    threads: int | None,
) -> TopK:
    n_scanned = columns.n_rows if rows is None else int(rows.shape[0])
    n_threads = threads or (_settings["threads"] if n_scanned >= PARALLEL_MIN_ROWS else 1)
    n_threads = max(1, min(n_threads, numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]
    # Several chunks per thread, handed out dynamically: a thread slowed by a busy core
    # takes fewer chunks instead of making the whole call wait for it.
    n_chunks = 1 if n_threads == 1 else min(n_threads * _CHUNKS_PER_THREAD, n_scanned)
    heap_scores = np.full((n_chunks, k), -np.inf, dtype=np.float32)
    heap_rows = np.full((n_chunks, k), -1, dtype=np.int64)
    heap_sims = np.zeros((n_chunks, k), dtype=np.float32)
    counts = np.zeros(n_chunks, dtype=np.int64)
    kernel_query, query_scale = _kernel_query(query, columns.vectors.dtype)
    args = (
        n_scanned,
        _EMPTY_I64 if rows is None else np.ascontiguousarray(rows, dtype=np.int64),
        columns.vectors,
        columns.scales,
        kernel_query,
        _EMPTY_F32 if lexical is None else lexical,
        columns.importance,
        columns.timestamps,
        columns.expires,
        columns.alive,
        columns.scope_cols,
        np.asarray(scope_want, dtype=np.int32),
        _EMPTY_U8 if extra_mask is None else extra_mask,
        np.asarray((*params, query_scale), dtype=np.float64),
        heap_scores,
        heap_rows,
        heap_sims,
        counts,
    )
    if n_chunks == 1:
        _kernels.scan_serial(*args)
    else:
        with _parallel_lock:
            numba.set_num_threads(n_threads)
            with numba.parallel_chunksize(1):
                _kernels.scan_parallel(*args)
    return _merge_heaps(heap_scores, heap_rows, heap_sims, counts, k)


def _merge_heaps(
    scores: npt.NDArray[np.float32],
    rows: npt.NDArray[np.int64],
    sims: npt.NDArray[np.float32],
    counts: npt.NDArray[np.int64],
    k: int,
) -> TopK:
    keep = np.arange(scores.shape[1])[None, :] < counts[:, None]
    flat_scores, flat_rows, flat_sims = scores[keep], rows[keep], sims[keep]
    # Ties are broken by row so results are deterministic across thread counts.
    order = np.lexsort((flat_rows, -flat_scores))[:k]
    return TopK(flat_rows[order], flat_scores[order], flat_sims[order])


NEAREST_PARALLEL_MIN_DOTS = 20_000
"""Near-duplicate checks of several scopes with at least this many (vector, row) pairs split the scopes over the
threads (~1 ms of work: far above a parallel launch's cost). At 100k rows, a batch of 1,000 memories of 100 users
took 51 ms one scope after another and 28 ms on 2 threads."""


def nearest_in_groups(
    rows: npt.NDArray[np.int64],
    row_bounds: npt.NDArray[np.int64],
    columns: Columns,
    batch: npt.NDArray[np.float32],
    query_bounds: npt.NDArray[np.int64],
    *,
    floor: float,
    k: int,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """For each vector of ``batch``, its best ``k`` rows by similarity (at least ``floor``; row -1: none), among
    its group's rows: group g is ``batch[query_bounds[g]:query_bounds[g + 1]]`` against the ascending rows
    ``rows[row_bounds[g]:row_bounds[g + 1]]``. Best first, ties to the earlier row."""
    out_rows = np.full((batch.shape[0], k), -1, np.int64)
    out_sims = np.full((batch.shape[0], k), -np.inf, np.float32)
    n_groups = row_bounds.shape[0] - 1
    dots = int(np.sum(np.diff(row_bounds) * np.diff(query_bounds)))
    n_threads = min(_settings["threads"], n_groups, numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
    if n_threads < 2 or dots < NEAREST_PARALLEL_MIN_DOTS:
        for g in range(n_groups):
            _kernels.nearest_rows(rows[row_bounds[g] : row_bounds[g + 1]], columns.vectors, columns.scales,
                                  batch[query_bounds[g] : query_bounds[g + 1]], floor,
                                  out_rows[query_bounds[g] : query_bounds[g + 1]],
                                  out_sims[query_bounds[g] : query_bounds[g + 1]])  # fmt: skip
        return out_rows, out_sims
    with _parallel_lock:
        numba.set_num_threads(n_threads)
        with numba.parallel_chunksize(1):  # groups differ in size: each thread takes the next one
            _kernels.nearest_groups(rows, row_bounds, columns.vectors, columns.scales, batch, query_bounds, floor,
                                    out_rows, out_sims)  # fmt: skip
    return out_rows, out_sims


def stream_floor(vectors: npt.NDArray[np.generic], n_rows: int, threads: int | None = None) -> float:
    """Reads the bytes of ``vectors[:n_rows]`` once, as 8-byte words; time it for the bandwidth floor
    of a scan (``bandwidth_gb_s`` turns the time into GB/s). Chunked and scheduled as ``top_k``
    schedules a scan: with one static half per thread, a thread that lost its core for a moment
    made the floor slower than the kernel (0.75x) on a busy machine."""
    n_threads = max(1, min(threads or _settings["threads"], numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]
    flat = np.ascontiguousarray(vectors[:n_rows]).reshape(-1).view(np.uint8)
    words = flat[: flat.shape[0] // 8 * 8].view(np.uint64)
    n_chunks = 1 if n_threads == 1 else max(1, min(n_threads * _CHUNKS_PER_THREAD, words.shape[0]))
    with _parallel_lock:
        numba.set_num_threads(n_threads)
        with numba.parallel_chunksize(1):
            return float(_kernels.stream_floor(words, n_chunks))


def bandwidth_gb_s(vectors: npt.NDArray[np.generic], n_rows: int, seconds: float) -> float:
    """GB/s of a pass over ``vectors[:n_rows]`` that took ``seconds``: how figures of machines compare."""
    return float(vectors[:n_rows].nbytes / seconds / 1e9)
