"""Agent state: what the tool-call cache costs per call, and whether single-flight holds.

    python -m benchmarks.state --json out/state.json [--backends memory,sqlite,redis,postgres]

For each backend:

- ``cache_hit_us``: median time of a call whose result is cached (lookup and decode).
- ``cache_miss_overhead_us``: median time of a call that misses, over a tool that does nothing, minus
  that tool's own time: what the cache adds to a real call (lookup, lease, store, release).
- ``single_flight_calls``: how many times the tool ran for 100 concurrent identical calls (must be 1).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from tqdm import tqdm

from ._report import print_table, write_json

CALLS = 2_000


async def bench_cache(url: str, progress: tqdm) -> dict[str, Any]:  # type: ignore[type-arg]
    from memkit import Memkit

    async def noop() -> dict[str, int]:
        return {"ok": 1}

    async with Memkit(url, embedder="hashing", layer_urls={"long_term": "memory://"}) as mem:
        cache = mem.tool_cache
        await cache.clear()
        await cache.call("weather", {"city": "Oslo", "days": 3}, noop)
        hits, misses, bare = [], [], []
        for i in range(CALLS):
            started = time.perf_counter()
            await cache.call("weather", {"city": "Oslo", "days": 3}, noop)
            hits.append(time.perf_counter() - started)
            started = time.perf_counter()
            await cache.call("weather", {"city": "Oslo", "days": 4 + i}, noop)
            misses.append(time.perf_counter() - started)
            started = time.perf_counter()
            await noop()
            bare.append(time.perf_counter() - started)
            if i % 100 == 0:
                progress.update(100)
        runs = await single_flight(mem)
        await cache.clear()
    return {
        "cache_hit_us": float(np.median(hits)) * 1e6,
        "cache_miss_overhead_us": (float(np.median(misses)) - float(np.median(bare))) * 1e6,
        "single_flight_calls": runs,
    }


async def single_flight(mem: Any) -> int:
    runs = 0

    async def slow_tool() -> str:
        nonlocal runs
        runs += 1
        await anyio.sleep(0.05)
        return "done"

    async with anyio.create_task_group() as group:
        for _ in range(100):
            group.start_soon(mem.tool_cache.call, "slow", {"q": "same"}, slow_tool)
    return runs


def backend_urls(wanted: list[str], stack: ExitStack, tmp: Path) -> dict[str, str]:
    urls = {"memory": "memory://", "sqlite": f"sqlite:///{tmp / 'state.db'}"}
    if {"redis", "postgres"} & set(wanted):
        from memkit.testing.servers import postgres_server, redis_server

        if "redis" in wanted:
            urls["redis"] = stack.enter_context(redis_server(tmp / "redis", modules=False))
        if "postgres" in wanted:
            postgres = stack.enter_context(postgres_server(tmp / "pg"))
            urls["postgres"] = postgres + ("&" if "?" in postgres else "?") + "schema=s_" + uuid.uuid4().hex[:8]
    return urls


async def amain(args: argparse.Namespace) -> None:
    wanted = args.backends.split(",")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        urls = backend_urls(wanted, stack, Path(tmp))
        with tqdm(total=CALLS * len(wanted), desc="state benchmark", unit="call") as progress:
            for name in wanted:
                rows.append({"backend": name, **await bench_cache(urls[name], progress)})
    print_table(rows, ["backend", "cache_hit_us", "cache_miss_overhead_us", "single_flight_calls"])
    write_json(args.json_path, {"cache": rows})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", dest="json_path", help="write the figures as JSON here")
    parser.add_argument("--backends", default="memory,sqlite,redis,postgres")
    anyio.run(amain, parser.parse_args())


if __name__ == "__main__":
    main()
