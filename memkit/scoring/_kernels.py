"""The fused hybrid-scoring kernels (numba).

One pass over contiguous columns computes, for every row that passes the
masks (alive, scope, expiry, minimum importance, optional extra mask),

    final = w_sim * similarity + w_lex * lexical + w_rec * recency + w_imp * importance
    recency = 0.5 ** (age / half_life)

and keeps the top k in a small min-heap, so nothing of size N is allocated.
Given a list of candidate rows (a scope's, from the store's index), the pass
reads only those: at 100k rows a 1,000-row scope costs 1% of the full pass.
Rows the mask rejects never pay for their dot product, which is what makes
per-user scoping cheap. Vectors are float32, float16 (stored as raw uint16
bits, widened by an LLVM ``fpext`` that compiles to F16C) or int8 with a
per-row scale, multiplied by an int16 copy of the query in integers.

Everything is ``cache=True``; the thread count is an argument because calling
``numba.get_num_threads()`` inside a jitted function disables caching.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic, overload

_LN2 = math.log(2.0)


@intrinsic
def _half_bits_to_float(typingctx: Any, bits: Any) -> Any:  # pragma: no cover - compiled
    if not isinstance(bits, types.Integer) or bits.bitwidth != 16:
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        half = builder.bitcast(args[0], ir.HalfType())
        return builder.fpext(half, ir.FloatType())

    return types.float32(bits), codegen


def row_dot(vectors: Any, scales: Any, row: int, query: Any) -> float:  # pragma: no cover
    """Dot product of stored row ``row`` with ``query``; only callable from jitted code."""
    raise NotImplementedError("row_dot is only available inside numba-compiled code")


@overload(row_dot, inline="always", jit_options={"fastmath": True})
def _row_dot_overload(vectors: Any, scales: Any, row: Any, query: Any) -> Any:  # pragma: no cover
    dtype = vectors.dtype
    if dtype == types.float32:

        def dot_f32(vectors: Any, scales: Any, row: Any, query: Any) -> Any:
            acc = np.float32(0.0)
            for j in range(query.shape[0]):
                acc += vectors[row, j] * query[j]
            return acc

        return dot_f32
    if dtype == types.uint16:

        def dot_f16(vectors: Any, scales: Any, row: Any, query: Any) -> Any:
            acc = np.float32(0.0)
            for j in range(query.shape[0]):
                acc += _half_bits_to_float(vectors[row, j]) * query[j]
            return acc

        return dot_f16
    if dtype == types.int8 and query.dtype == types.int16:
        # Integer products summed in int32 (exact, no fastmath needed): LLVM turns this into
        # vpmaddwd / vpdpwssd, 16 products an instruction, where widening each int8 to float
        # took three instructions per 8 and made 1M int8 scans compute-bound (1.2x faster than
        # float32 instead of ~4x). The caller multiplies by the query's own scale.

        def dot_i8_i16(vectors: Any, scales: Any, row: Any, query: Any) -> Any:
            acc = np.int32(0)
            for j in range(query.shape[0]):
                # numba widens integer arithmetic to int64; the truncation lets LLVM keep it in int32.
                acc = np.int32(acc + np.int32(vectors[row, j]) * np.int32(query[j]))
            return np.float32(acc) * scales[row]

        return dot_i8_i16
    if dtype == types.int8:

        def dot_i8(vectors: Any, scales: Any, row: Any, query: Any) -> Any:
            acc = np.float32(0.0)
            for j in range(query.shape[0]):
                acc += np.float32(vectors[row, j]) * query[j]
            return acc * scales[row]

        return dot_i8
    return None


@njit(cache=True, fastmath=True, nogil=True)
def _heap_push(heap_scores: Any, heap_rows: Any, heap_sims: Any, count: int, score: float, row: int, sim: float) -> int:
    """Min-heap keyed by score, capacity len(heap_scores); returns the new count."""
    k = heap_scores.shape[0]
    if count < k:
        pos = count
        count += 1
        while pos > 0:
            parent = (pos - 1) >> 1
            if heap_scores[parent] <= score:
                break
            heap_scores[pos] = heap_scores[parent]
            heap_rows[pos] = heap_rows[parent]
            heap_sims[pos] = heap_sims[parent]
            pos = parent
    else:
        if score <= heap_scores[0]:
            return count
        pos = 0
        while True:
            child = 2 * pos + 1
            if child >= k:
                break
            if child + 1 < k and heap_scores[child + 1] < heap_scores[child]:
                child += 1
            if heap_scores[child] >= score:
                break
            heap_scores[pos] = heap_scores[child]
            heap_rows[pos] = heap_rows[child]
            heap_sims[pos] = heap_sims[child]
            pos = child
    heap_scores[pos] = score
    heap_rows[pos] = row
    heap_sims[pos] = sim
    return count


@njit(cache=True, fastmath=True, nogil=True)
def _scan_range(
    start: int, stop: int, rows: Any, vectors: Any, scales: Any, query: Any, lexical: Any, importance: Any,
    timestamps: Any, expires: Any, alive: Any, scope_cols: Any, scope_want: Any, extra_mask: Any,
    params: Any, heap_scores: Any, heap_rows: Any, heap_sims: Any,
) -> int:  # fmt: skip
    now, half_life, min_importance, w_sim, w_lex, w_rec, w_imp, min_score, query_scale = (
        params[0], params[1], params[2], params[3], params[4], params[5], params[6], params[7], params[8],
    )  # fmt: skip
    has_vector = query.shape[0] > 0
    has_lex = lexical.shape[0] > 0
    has_extra = extra_mask.shape[0] > 0
    decay = _LN2 / half_life
    want_u, want_a, want_s = scope_want[0], scope_want[1], scope_want[2]
    count = 0
    k = heap_scores.shape[0]
    # The heap's minimum, kept in a register: most rows lose to it and never touch the heap.
    threshold = -np.inf
    has_rows = rows.shape[0] > 0
    for j in range(start, stop):
        i = rows[j] if has_rows else j
        if not alive[i]:
            continue
        if want_u >= 0 and scope_cols[0, i] != want_u:
            continue
        if want_a >= 0 and scope_cols[1, i] != want_a:
            continue
        if want_s >= 0 and scope_cols[2, i] != want_s:
            continue
        if expires[i] <= now:
            continue
        imp = importance[i]
        if imp < min_importance:
            continue
        if has_extra and not extra_mask[i]:
            continue
        sim = row_dot(vectors, scales, i, query) * np.float32(query_scale) if has_vector else np.float32(0.0)
        lex = lexical[i] if has_lex else np.float32(0.0)
        partial = w_sim * sim + w_lex * lex + w_imp * imp
        # Recency is at most 1: when even that cannot beat the heap, skip the exp.
        if partial + w_rec <= threshold or partial + w_rec < min_score:
            continue
        age = now - timestamps[i]
        score = partial + w_rec * math.exp(-max(age, 0.0) * decay)
        if score < min_score or score <= threshold:
            continue
        count = _heap_push(heap_scores, heap_rows, heap_sims, count, score, i, sim)
        if count == k:
            threshold = heap_scores[0]
    return count


@njit(cache=True, fastmath=True, nogil=True)
def scan_serial(
    n_rows: int, rows: Any, vectors: Any, scales: Any, query: Any, lexical: Any, importance: Any, timestamps: Any,
    expires: Any, alive: Any, scope_cols: Any, scope_want: Any, extra_mask: Any, params: Any,
    heap_scores: Any, heap_rows: Any, heap_sims: Any, counts: Any,
) -> None:  # fmt: skip
    counts[0] = _scan_range(
        0, n_rows, rows, vectors, scales, query, lexical, importance, timestamps, expires, alive,
        scope_cols, scope_want, extra_mask, params, heap_scores[0], heap_rows[0], heap_sims[0],
    )  # fmt: skip


@njit(cache=True, fastmath=True, nogil=True, parallel=True)
def scan_parallel(
    n_rows: int, rows: Any, vectors: Any, scales: Any, query: Any, lexical: Any, importance: Any, timestamps: Any,
    expires: Any, alive: Any, scope_cols: Any, scope_want: Any, extra_mask: Any, params: Any,
    heap_scores: Any, heap_rows: Any, heap_sims: Any, counts: Any,
) -> None:  # fmt: skip
    n_chunks = heap_scores.shape[0]
    chunk = (n_rows + n_chunks - 1) // n_chunks
    for c in prange(n_chunks):
        start = c * chunk
        stop = min(n_rows, start + chunk)
        counts[c] = _scan_range(
            start, stop, rows, vectors, scales, query, lexical, importance, timestamps, expires, alive,
            scope_cols, scope_want, extra_mask, params, heap_scores[c], heap_rows[c], heap_sims[c],
        )  # fmt: skip


@njit(cache=True, fastmath=True, nogil=True)
def nearest_rows(
    rows: Any, vectors: Any, scales: Any, batch: Any, floor: float, out_rows: Any, out_sims: Any
) -> None:  # fmt: skip
    """For each vector of ``batch``, the best ``k`` (columns of ``out_*``) of ``rows`` by similarity, at least
    ``floor``, best first, ties to the earlier row: each stored row is read once for the whole batch."""
    _nearest_range(rows, 0, rows.shape[0], vectors, scales, batch, 0, batch.shape[0], floor, out_rows, out_sims)


@njit(cache=True, fastmath=True, nogil=True, parallel=True)
def nearest_groups(
    rows: Any, row_bounds: Any, vectors: Any, scales: Any, batch: Any, query_bounds: Any, floor: float,
    out_rows: Any, out_sims: Any,
) -> None:  # fmt: skip
    """``nearest_rows`` for many groups (scopes) at once, a group per task: group g's vectors
    ``batch[query_bounds[g]:query_bounds[g + 1]]`` against its rows ``rows[row_bounds[g]:row_bounds[g + 1]]``."""
    for g in prange(row_bounds.shape[0] - 1):
        _nearest_range(rows, row_bounds[g], row_bounds[g + 1], vectors, scales, batch, query_bounds[g],
                       query_bounds[g + 1], floor, out_rows, out_sims)  # fmt: skip


@njit(cache=True, fastmath=True, nogil=True)
def _nearest_range(
    rows: Any, start: int, stop: int, vectors: Any, scales: Any, batch: Any, first: int, last: int, floor: float,
    out_rows: Any, out_sims: Any,
) -> None:  # fmt: skip
    k = out_rows.shape[1]
    for j in range(start, stop):
        i = rows[j]
        for q in range(first, last):
            sim = row_dot(vectors, scales, i, batch[q])
            if not sim >= floor or sim <= out_sims[q, k - 1]:  # NaN never passes
                continue
            pos = k - 1
            while pos > 0 and out_sims[q, pos - 1] < sim:
                out_sims[q, pos] = out_sims[q, pos - 1]
                out_rows[q, pos] = out_rows[q, pos - 1]
                pos -= 1
            out_sims[q, pos] = sim
            out_rows[q, pos] = i


@njit(cache=True, nogil=True)
def _sum_words(words: Any, start: int, stop: int) -> int:
    # Indexing a slice from 0: with words[i] for i from an unknown start, numba's negative-index
    # wraparound made LLVM vectorise with gathers (12.7 GB/s from L2).
    part = words[start:stop]
    acc = np.uint64(0)
    for i in range(part.shape[0]):
        acc += part[i]
    return acc


@njit(cache=True, nogil=True, parallel=True)
def stream_floor(words: Any, n_chunks: int) -> int:
    """Adds up every 8-byte word of ``words`` once: the memory-bandwidth floor of a scan.

    The words are the scanned rows' bytes whatever their dtype, summed as integers (4 vector loads
    a cycle, far above any memory's rate), so the pass costs bytes / bandwidth on every dtype. The
    old probe widened each element to float32 in a loop written inside the prange, which numba's
    parfor lowering leaves unvectorised (4 GB/s on one core, a third of a plain loop's rate): the
    int8 "floor" cost as much as float32's and float16's took 0.76x float32's time for half the
    bytes. The chunk's loop is a function of its own, compiled (and vectorised) on its own."""
    n = words.shape[0]
    chunk = (n + n_chunks - 1) // n_chunks
    total = np.uint64(0)
    for c in prange(n_chunks):
        total += _sum_words(words, c * chunk, min(n, (c + 1) * chunk))
    return total
