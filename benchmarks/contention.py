"""store() under a concurrent recall load, and how long leaving takes once the server is gone.

    python -m benchmarks.contention --json out/contention.json [--plot out/contention.png] [--size 10k]
                                    [--stores 500] [--readers 4]
                                    [--think-ms 0] [--backends memory,sqlite,redis,postgres] [--no-exit-check]

For each backend, in one run and one collection (``--size`` memories of 100 users preloaded with store_many):

- ``alone``: ``--stores`` new memories stored one at a time with ``long_term.store`` (dedupe on), nothing
  else running; p50 and p99 of each call's latency.
- ``loaded``: as many more, while ``--readers`` tasks recall in a loop (random user, k=10), as agents
  that answer while others write; p50/p99 again, the recalls' throughput and p50. Back to back by
  default, which saturates the event loop; ``--think-ms`` pauses each reader between two recalls.
- ``p99_ratio`` = p99 loaded / p99 alone. Issue 10's target: <= 3.

The two phases alternate in ``--rounds`` rounds (``--stores`` split between them), so a machine whose speed
drifts during the run (shared 2-core machines swing 2x within minutes) slows both alike.

Warm-up stores and recalls run first (numba compiles its kernels on first use). Vectors come from
``LookupEmbedder`` (benchmarks/ingest.py), so no model is measured.

Then, unless ``--no-exit-check``: a private Redis Stack server; a session stores, recalls (access
statistics are now pending: they are written 0.5 s later), the server is killed (SIGKILL) or hung
(SIGSTOP), and the time spent leaving ``async with Memkit(url, close_timeout=...)`` is measured. Target:
``close_timeout`` plus a little (``over_s`` is the little).
"""

from __future__ import annotations

import argparse
import signal
import tempfile
import time
import warnings
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import numpy as np
from tqdm import tqdm  # type: ignore[import-untyped]

from ._report import Panel, bar_panels, figures_parser, machine_info, print_table, write_json
from ._servers import backend_urls
from .ingest import BATCH, LookupEmbedder, corpus, parse_sizes

WARM_UP = 20
TARGET_RATIO = 3.0
ROW_COLUMNS = ["backend", "n", "readers", "think_ms", "stores", "rounds", "alone_p50_ms", "alone_p99_ms",
               "loaded_p50_ms", "loaded_p99_ms", "p99_ratio", "target", "recalls_per_s", "recall_p50_ms"]  # fmt: skip
EXIT_COLUMNS = ["backend", "server", "close_timeout_s", "pending", "exit_s", "over_s", "warned", "bounded"]
Progress = Any  # tqdm's type is not generic at runtime
Items = list[tuple[str, str]]
"""(user, text) pairs."""


def ms(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1000 if values else float("nan")


async def timed_stores(lt: Any, items: Items, progress: Progress) -> list[float]:
    latencies = []
    for user, text in items:
        started = time.perf_counter()
        await lt.store(text, user_id=user)
        latencies.append(time.perf_counter() - started)
        progress.update(1)
    return latencies


class Readers:
    """``count`` tasks recalling in a loop (random user, k=10) until ``stop`` is set."""

    def __init__(self, lt: Any, queries: Items, count: int, think_s: float) -> None:
        self.lt, self.queries, self.count, self.think_s = lt, queries, count, think_s
        self.latencies: list[float] = []
        self.running, self.stop = anyio.Event(), anyio.Event()

    async def loop(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        while not self.stop.is_set():
            if len(self.latencies) >= self.count:
                self.running.set()
            user, text = self.queries[int(rng.integers(0, len(self.queries)))]
            started = time.perf_counter()
            await self.lt.recall(text, user_id=user, k=10)
            self.latencies.append(time.perf_counter() - started)
            if self.think_s:
                await anyio.sleep(self.think_s)
            else:
                await anyio.lowlevel.checkpoint()  # lets the writer in between two recalls


async def loaded_stores(
    lt: Any, items: Items, queries: Items, args: argparse.Namespace, progress: Progress
) -> tuple[list[float], list[float], float]:
    """Store latencies while ``--readers`` tasks recall; also the recalls' latencies and their wall time."""
    count = args.readers
    readers = Readers(lt, queries, count, args.think_ms / 1000)
    async with anyio.create_task_group() as group:
        for seed in range(count):
            group.start_soon(readers.loop, seed)
        await readers.running.wait()  # the readers have recalled (about once each) before the first timed store
        skip = len(readers.latencies)
        started = time.perf_counter()
        latencies = await timed_stores(lt, items, progress)
        wall = time.perf_counter() - started
        readers.stop.set()
    return latencies, readers.latencies[skip:], wall


async def bench_backend(name: str, url: str, args: argparse.Namespace, progress: Progress) -> dict[str, Any]:
    from memkit import Memkit, NewMemory

    n, stores = args.size, args.stores
    items, vectors = corpus(n + WARM_UP + 2 * stores)
    preload, warm = items[:n], items[n : n + WARM_UP]
    alone, loaded = items[n + WARM_UP : n + WARM_UP + stores], items[n + WARM_UP + stores :]
    queries = preload or warm
    async with Memkit(url, embedder=LookupEmbedder(vectors)) as mem:
        lt = mem.long_term
        for start in range(0, n, BATCH):
            await lt.store_many(
                [NewMemory(content=text, user_id=user) for user, text in preload[start : start + BATCH]]
            )
            progress.update(min(BATCH, n - start))
        await timed_stores(lt, warm, progress)
        for user, text in queries[:WARM_UP]:
            await lt.recall(text, user_id=user, k=10)
        alone_s, loaded_s, recalls, wall = [], [], [], 0.0
        per_round = -(-stores // args.rounds)
        for start in range(0, stores, per_round):
            alone_s += await timed_stores(lt, alone[start : start + per_round], progress)
            stored, recalled, spent = await loaded_stores(lt, loaded[start : start + per_round], queries, args,
                                                          progress)  # fmt: skip
            loaded_s, recalls, wall = loaded_s + stored, recalls + recalled, wall + spent
    ratio = ms(loaded_s, 99) / ms(alone_s, 99)
    return {"backend": name, "n": n, "readers": args.readers, "think_ms": args.think_ms, "stores": stores,
            "rounds": args.rounds,
            "alone_p50_ms": ms(alone_s, 50), "alone_p99_ms": ms(alone_s, 99),
            "loaded_p50_ms": ms(loaded_s, 50), "loaded_p99_ms": ms(loaded_s, 99), "p99_ratio": ratio,
            "target": "met" if ratio <= TARGET_RATIO else "MISSED",
            "recalls_per_s": len(recalls) / wall, "recall_p50_ms": ms(recalls, 50)}  # fmt: skip


async def exit_after_server_goes(tmp: Path, go: signal.Signals, close_timeout: float) -> dict[str, Any]:
    """Seconds spent leaving ``async with Memkit(...)`` after a private Redis was killed or hung by ``go``."""
    from memkit import Memkit
    from memkit.testing.servers import free_port, start_redis

    port = free_port()
    server = start_redis(tmp / f"redis-exit-{go.name}", modules=True, port=port)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            async with Memkit(f"redis://127.0.0.1:{port}/0", embedder="hashing", close_timeout=close_timeout) as mem:
                await mem.long_term.store("the deploy key lives in the vault", user_id="ann")
                await mem.long_term.recall("deploy key", user_id="ann")
                pending = mem._access.pending  # no public view of it; written 0.5 s after the recall
                server.send_signal(go)
                started = time.perf_counter()
            exit_s = time.perf_counter() - started
    finally:
        server.kill()  # SIGKILL ends a stopped server too
        server.wait()
    warned = any("gave up writing access statistics" in str(w.message) for w in caught)
    return {"backend": "redis", "server": "killed" if go == signal.SIGKILL else "hung",
            "close_timeout_s": close_timeout, "pending": pending, "exit_s": exit_s,
            "over_s": exit_s - close_timeout, "warned": warned, "bounded": exit_s <= close_timeout + 0.5}  # fmt: skip


async def amain(args: argparse.Namespace) -> None:
    wanted = args.backends.split(",")
    rows: list[dict[str, Any]] = []
    exits: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        urls = backend_urls(wanted, stack, Path(tmp), name="contention", redis_modules=True)
        urls["sqlite"] = f"sqlite:///{Path(tmp) / 'contention.db'}"
        total = len(wanted) * (args.size + WARM_UP + 2 * args.stores)
        with tqdm(total=total, desc="contention benchmark", unit="memory") as progress:
            for name in wanted:
                rows.append(await bench_backend(name, urls[name], args, progress))
        if args.exit_check:
            for go in (signal.SIGKILL, signal.SIGSTOP):
                exits.append(await exit_after_server_goes(Path(tmp), go, args.close_timeout))
    print_table(rows, ROW_COLUMNS)
    if exits:
        print_table(exits, EXIT_COLUMNS)
    write_json(args.json_path, {"machine": machine_info(), "target_p99_ratio": TARGET_RATIO, "rows": rows,
                                "exit": exits})  # fmt: skip
    if args.plot:
        labels = [r["backend"] for r in rows]
        bar_panels(args.plot, f"store() alone and under {args.readers} readers recalling", [
            Panel("store() latency", "ms", labels, {
                "p50 alone": [r["alone_p50_ms"] for r in rows], "p50 loaded": [r["loaded_p50_ms"] for r in rows],
                "p99 alone": [r["alone_p99_ms"] for r in rows], "p99 loaded": [r["loaded_p99_ms"] for r in rows]}),
            Panel("p99 loaded / p99 alone", "ratio", labels, {"p99 ratio": [r["p99_ratio"] for r in rows]},
                  target=(f"target: <= {TARGET_RATIO}x", TARGET_RATIO)),
        ])  # fmt: skip


def main() -> None:
    parser = figures_parser(__doc__)
    parser.add_argument("--size", type=lambda s: parse_sizes(s)[0], default=10_000, help="memories preloaded, e.g. 10k")
    parser.add_argument("--stores", type=int, default=500, help="store() calls timed per phase")
    parser.add_argument("--readers", type=int, default=4, help="tasks recalling in a loop during the loaded phase")
    parser.add_argument("--rounds", type=int, default=5, help="alone and loaded phases alternate this many times")
    parser.add_argument("--think-ms", type=float, default=0.0,
                        help="each reader's pause between two recalls (0: back to back)")  # fmt: skip
    parser.add_argument("--backends", default="memory,sqlite", help="comma-separated: memory,sqlite,redis,postgres")
    parser.add_argument("--close-timeout", type=float, default=2.0, help="Memkit(close_timeout=) of the exit check")
    parser.add_argument("--exit-check", action=argparse.BooleanOptionalAction, default=True,
                        help="time leaving once Redis was killed or hung (starts a private Redis)")  # fmt: skip
    anyio.run(amain, parser.parse_args())


if __name__ == "__main__":
    main()
