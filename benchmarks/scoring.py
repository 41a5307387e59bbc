"""Fused scoring kernel vs NumPy vs the memory-bandwidth floor.

    python -m benchmarks.scoring --json out/scoring.json [--plot out/scoring.png]

For N in 10k, 100k, 1M vectors of dimension 384 and each storage dtype
(float32, float16, int8), all in one run:

- fused_ms: median ms per query of the numba kernel (masks, hybrid score, top-10);
  for float16 / int8 it includes rescoring its shortlist from the float32 rows.
- scan_ms: the same without rescoring (the stored form's own top-10).
- numpy_ms: the NumPy reference computing the same hybrid score and top-10
  (quantized rows are decoded first, as NumPy has no fast float16 / int8 matmul).
- floor_ms: one pass reading the same stored bytes with the same threads, nothing else;
  floor_gb_s is that pass in GB/s, the machine's bandwidth (printed, and in the
  .machine.json), so figures from different machines compare.
- speedup_vs_f32: float32's fused_ms over this dtype's, timed in the same rounds.
- recall_at_10: overlap of the dtype's (rescored) top-10 with exact float32 top-10;
  scan_recall_at_10 the same without rescoring.

Every kernel, scan and floor of one N is timed round-robin, one call each per round,
so machine noise hits all of them alike and every ratio comes from the same rounds.

The data is synthetic but shaped like embeddings: unit vectors around 2,000
cluster centres, queries near stored rows, random importance and timestamps
over a year. At 1M its best scores lie ~1e-4 apart, under int8's rounding noise.
For NumPy figures on machines that set OPENBLAS_CORETYPE or OPENBLAS_L2_SIZE,
unset both for this command only.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
from tqdm import tqdm

from memkit.backend import Weights
from memkit.scoring import (
    PARALLEL_MIN_ROWS,
    Columns,
    ScoreParams,
    StorageDtype,
    bandwidth_gb_s,
    encode_vectors,
    get_threads,
    reference_top_k,
    stream_floor,
    top_k,
)

from ._report import machine_info, print_table, write_json

DIM = 384
DTYPES: tuple[StorageDtype, ...] = ("float32", "float16", "int8")
COLUMNS = ("n", "dtype", "fused_ms", "scan_ms", "numpy_ms", "floor_ms", "floor_gb_s", "fused_vs_floor",
           "speedup_vs_f32", "recall_at_10", "scan_recall_at_10")  # fmt: skip


def make_data(n: int, seed: int = 0) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((2000, DIM), dtype=np.float32)
    matrix = np.empty((n, DIM), np.float32)
    step = 100_000
    for start in range(0, n, step):
        stop = min(n, start + step)
        matrix[start:stop] = centres[rng.integers(0, len(centres), stop - start)]
        matrix[start:stop] += 0.8 * rng.standard_normal((stop - start, DIM), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    picks = rng.integers(0, n, 32)
    queries = matrix[picks] + 0.6 * rng.standard_normal((32, DIM), dtype=np.float32) / np.sqrt(DIM) * 4
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return matrix, queries.astype(np.float32)


def median_ms(run: Callable[[], Any], repeats: int) -> float:
    return interleaved_median_ms([run], repeats)[0]


def interleaved_median_ms(runs: list[Callable[[], Any]], repeats: int) -> list[float]:
    """Median ms of each callable, timed in turns so machine noise hits all of them alike."""
    for run in runs:
        run()  # warm: compile or load from cache, fault pages in
    times: list[list[float]] = [[] for _ in runs]
    for _ in range(repeats):
        for run, bucket in zip(runs, times, strict=True):
            started = time.perf_counter()
            run()
            bucket.append(time.perf_counter() - started)
    return [float(np.median(bucket) * 1000) for bucket in times]


def columns_for(matrix: npt.NDArray[np.float32], dtype: StorageDtype, seed: int = 1) -> Columns:
    n = matrix.shape[0]
    rng = np.random.default_rng(seed)
    stored, scales = encode_vectors(matrix, dtype)
    return Columns(
        n,
        stored,
        scales,
        rng.random(n, dtype=np.float32),
        time.time() - rng.random(n) * 365 * 86400,
        np.full(n, np.inf),
        np.ones(n, np.uint8),
        np.full((3, n), -1, np.int32),
    )


def bench_size(n: int, repeats: int, progress: tqdm) -> list[dict[str, Any]]:  # type: ignore[type-arg]
    matrix, queries = make_data(n)
    weights = Weights()
    params = ScoreParams(time.time(), 30 * 86400.0, 0.0, weights.similarity, 0.0, weights.recency,
                         weights.importance, -np.inf)  # fmt: skip
    exact_cols = columns_for(matrix, "float32")
    exact_top = [set(reference_top_k(exact_cols, params, 10, query=q, vectors=matrix).rows.tolist()) for q in queries]
    all_cols = {dtype: exact_cols if dtype == "float32" else columns_for(matrix, dtype) for dtype in DTYPES}
    rows = time_kernels(all_cols, params, queries, matrix, repeats)
    for row, cols in zip(rows, all_cols.values(), strict=True):
        exact = None if row["dtype"] == "float32" else matrix
        row["recall_at_10"] = recall(cols, params, queries, exact_top, exact)
        row["scan_recall_at_10"] = recall(cols, params, queries, exact_top, None)
        progress.update(1)
    numpy_repeats = max(3, repeats // 4) if n >= 1_000_000 else repeats
    query_iter = iter(np.resize(np.arange(len(queries)), 100_000))
    for row, cols in zip(rows, all_cols.values(), strict=True):
        row["numpy_ms"] = median_ms(
            lambda cols=cols: reference_top_k(cols, params, 10, query=queries[next(query_iter)]), numpy_repeats
        )
    base = rows[0]["fused_ms"]
    for row in rows:
        row["fused_vs_floor"] = row["fused_ms"] / row["floor_ms"]
        row["speedup_vs_f32"] = base / row["fused_ms"]
    return rows


def time_kernels(
    all_cols: dict[StorageDtype, Columns],
    params: ScoreParams,
    queries: npt.NDArray[np.float32],
    matrix: npt.NDArray[np.float32],
    repeats: int,
) -> list[dict[str, Any]]:
    """Every timed call of one N in one round-robin: float32's kernel and floor, then each quantized
    dtype's rescored kernel, plain scan and floor, so each ratio comes from the same rounds."""
    n = matrix.shape[0]
    threads = None if n >= PARALLEL_MIN_ROWS else 1
    query_iter = iter(np.resize(np.arange(len(queries)), 1_000_000))

    def fused(cols: Columns, exact: npt.NDArray[np.float32] | None) -> Callable[[], Any]:
        return lambda: top_k(cols, params, 10, query=queries[next(query_iter)], threads=threads, exact=exact)

    def floor(cols: Columns) -> Callable[[], Any]:
        return lambda: stream_floor(cols.vectors, n, threads)

    runs: list[Callable[[], Any]] = []
    for dtype, cols in all_cols.items():
        quantized = [fused(cols, matrix), fused(cols, None)] if dtype != "float32" else [fused(cols, None)]
        runs += [*quantized, floor(cols)]
    # NumPy's BLAS threads keep spinning for a while after each call and would steal the cores
    # from the kernel being timed, so the numba kernels are measured first, NumPy last.
    time.sleep(0.5)
    times = iter(interleaved_median_ms(runs, repeats))
    rows = []
    for dtype, cols in all_cols.items():
        row: dict[str, Any] = {"n": n, "dtype": dtype, "fused_ms": next(times)}
        row["scan_ms"] = row["fused_ms"] if dtype == "float32" else next(times)
        row["floor_ms"] = next(times)
        row["floor_gb_s"] = bandwidth_gb_s(cols.vectors, n, row["floor_ms"] / 1000)
        rows.append(row)
    return rows


def recall(
    cols: Columns,
    params: ScoreParams,
    queries: npt.NDArray[np.float32],
    truth: list[set[int]],
    exact: npt.NDArray[np.float32] | None,
) -> float:
    overlap = [len(set(top_k(cols, params, 10, query=q, exact=exact).rows.tolist()) & want) / 10
               for q, want in zip(queries, truth, strict=True)]  # fmt: skip
    return float(np.mean(overlap))


def bandwidth_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The float32 floor at each N: the machine's read bandwidth (caches at small N, memory at 1M)."""
    by_n = {str(r["n"]): round(r["floor_gb_s"], 2) for r in rows if r["dtype"] == "float32"}
    return {"bandwidth_gb_s": by_n, "threads": get_threads()}


def plot(rows: list[dict[str, Any]], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install 'memkit[plot]'); skipping the plot")
        return
    fig, axes = plt.subplots(1, len(DTYPES), figsize=(13, 4), sharey=True)
    for ax, dtype in zip(axes, DTYPES, strict=True):
        mine = [r for r in rows if r["dtype"] == dtype]
        sizes = [r["n"] for r in mine]
        for key, label in (("fused_ms", "fused kernel"), ("numpy_ms", "NumPy"), ("floor_ms", "bandwidth floor")):
            ax.plot(sizes, [r[key] for r in mine], marker="o", label=label)
        ax.set(xscale="log", yscale="log", title=f"{dtype}", xlabel="vectors (dim 384)")
    axes[0].set_ylabel("ms per query (median)")
    axes[0].legend()
    fig.suptitle("memkit hybrid scoring: fused numba kernel vs NumPy vs memory-bandwidth floor")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000,1000000", help="comma-separated N (default 10k,100k,1M)")
    parser.add_argument("--repeats", type=int, default=21, help="timed queries per measurement")
    parser.add_argument("--json", dest="json_path", help="write the rows as JSON here")
    parser.add_argument("--plot", help="write a PNG plot here (needs matplotlib)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows: list[dict[str, Any]] = []
    with tqdm(total=len(sizes) * len(DTYPES), desc="scoring benchmark", unit="config") as progress:
        for n in sizes:
            rows.extend(bench_size(n, args.repeats, progress))
    print_table(rows, COLUMNS)
    bandwidth = bandwidth_summary(rows)
    print("measured read bandwidth (float32 floor, GB/s, by N):",
          ", ".join(f"{n}: {gb:.1f}" for n, gb in bandwidth["bandwidth_gb_s"].items()),
          f"with {bandwidth['threads']} threads at N >= {PARALLEL_MIN_ROWS}")  # fmt: skip
    write_json(args.json_path, rows)
    if args.json_path:
        write_json(args.json_path.replace(".json", ".machine.json"), {**machine_info(), **bandwidth})
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
