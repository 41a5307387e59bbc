"""What counting accesses costs on sqlite://: the writer's time, the bytes it writes, a second client's catch-up.

    python -m benchmarks.sqlite_touch --json out/sqlite_touch.json [--plot out/sqlite_touch.png]
                                      [--size 100k] [--slices 200] [--rounds 3]

One file, ``--size`` memories of 100 users (dim 384, with text, written through the backend contract).
Two clients open it, as two processes of an agent would: a writer, and a reader that has the collection
loaded. Each round, the writer counts accesses to random records in ``--slices`` calls of 64 ids each
(64 is what ``touch`` writes per transaction), then the reader reads one record, which first catches up
with what the writer committed. Rows, per round:

- ``touch_p50_ms`` / ``touch_p99_ms``: one call of 64 counts (the time it holds the connection);
- ``bytes_per_count``: bytes this process wrote (``/proc/self/io`` wchar: the WAL and its checkpoints)
  over the round's touches, per count; 0 where the platform does not say;
- ``catch_up_ms``: the reader's first read after the round; ``read_ms``: a read with nothing to catch up.

Before schema 5 a count rewrote the record's whole row (vector and text, ~2 KB) with a new change number, and
every other client re-read and re-decoded that row; since, counts go to ``memkit_counters`` beside the records.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from tqdm import tqdm

from memkit import open_backend

from ._report import Panel, bar_panels, figures_parser, print_table, write_json
from .backends import DIM, ingest, synthetic_records
from .ingest import parse_sizes

SLICE = 64
_COLLECTION = "memories"


def written_bytes() -> int:
    """Bytes this process has passed to write() so far (0 where /proc is not there)."""
    try:
        lines = Path("/proc/self/io").read_text().splitlines()
    except OSError:
        return 0
    return next(int(line.split()[1]) for line in lines if line.startswith("wchar:"))


async def bench(path: Path, n: int, slices: int, rounds: int, progress: Any) -> list[dict[str, Any]]:
    url = f"sqlite:///{path}"
    records = synthetic_records(n)
    ids = [record.id for record in records]
    rng = np.random.default_rng(5)
    rows = []
    async with open_backend(url) as writer, open_backend(url) as reader:
        await ingest(writer, _COLLECTION, records)
        progress.update(n)
        del records
        await writer.get(_COLLECTION, ids[:1])  # both clients hold the collection in memory
        await reader.get(_COLLECTION, ids[:1])
        for at in range(rounds):
            times, counted = [], 0
            before = written_bytes()
            for _ in range(slices):
                counts = {ids[int(i)]: 1 for i in rng.integers(0, n, SLICE)}
                counted += len(counts)  # the distinct ids: one row written each
                started = time.perf_counter()
                await writer.touch(_COLLECTION, counts, time.time())
                times.append(time.perf_counter() - started)
                progress.update(1)
            wrote = written_bytes() - before
            started = time.perf_counter()
            await reader.get(_COLLECTION, ids[:1])
            catch_up = time.perf_counter() - started
            reads = []
            for i in range(20):
                started = time.perf_counter()
                await reader.get(_COLLECTION, [ids[i]])
                reads.append(time.perf_counter() - started)
            rows.append({"n": n, "round": at + 1, "touch_p50_ms": float(np.median(times)) * 1000,
                         "touch_p99_ms": float(np.percentile(times, 99)) * 1000,
                         "bytes_per_count": wrote / counted, "catch_up_ms": catch_up * 1000,
                         "read_ms": float(np.median(reads)) * 1000})  # fmt: skip
    return rows


def plot(path: str, rows: list[dict[str, Any]]) -> None:
    labels = [f"round {row['round']}" for row in rows]
    panels = [
        Panel("touch of 64 ids, p50", "ms", labels, {"writer": [row["touch_p50_ms"] for row in rows]}),
        Panel("bytes written per count", "bytes", labels, {"writer": [row["bytes_per_count"] for row in rows]}),
        Panel("second client's first read after", "ms", labels, {"reader": [row["catch_up_ms"] for row in rows]}),
    ]
    bar_panels(path, f"sqlite:// access counts ({DIM}-dim memories)", panels)


def main() -> None:
    parser = figures_parser(__doc__)
    parser.add_argument("--size", default="100k", help="memories stored first, e.g. 100k")
    parser.add_argument("--slices", type=int, default=200, help="touch calls of 64 ids per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    [n] = parse_sizes(args.size)
    with tempfile.TemporaryDirectory() as tmp, tqdm(total=n + args.slices * args.rounds, desc="touch",
                                                    unit="op") as progress:  # fmt: skip
        rows = anyio.run(bench, Path(tmp) / "touch.db", n, args.slices, args.rounds, progress)
    columns = ["n", "round", "touch_p50_ms", "touch_p99_ms", "bytes_per_count", "catch_up_ms", "read_ms"]
    print_table([{"backend": "sqlite", **row} for row in rows], ["backend", *columns])
    write_json(args.json_path, [{"backend": "sqlite", **row} for row in rows])
    if args.plot:
        plot(args.plot, rows)


if __name__ == "__main__":
    main()
