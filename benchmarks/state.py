"""Agent state: checkpoint save and load of a 200-turn session, what the tool-call cache costs per call, and
whether single-flight holds.

    python -m benchmarks.state --json out/state.json [--plot out/state.png] [--backends memory,sqlite,redis,postgres]

The checkpointed state is real: the session benchmark's 200 turns (525 messages, tool exchanges with
parallel calls) run through short-term memory with a 32,000-token budget, so most of it is still verbatim
(the largest state a checkpoint carries), plus a 20-key working-memory task. For each backend and for
MessagePack and JSON, with and without zstd:

- ``ckpt_save_ms`` / ``ckpt_load_ms``: median of 30 saves (each a new checkpoint: blob, then index by
  compare-and-set) and of 30 loads of the latest; ``ckpt_bytes``: the stored blob.

And for each backend:

- ``cache_hit_us``: median time of a call whose result is cached (lookup and decode).
- ``cache_miss_overhead_us``: median time of a call that misses, over a tool that does nothing, minus
  that tool's own time: what the cache adds to a real call (lookup, lease, store, release).
- ``single_flight_calls``: how many times the tool ran for 100 concurrent identical calls (must be 1).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from tqdm import tqdm

from ._report import Panel, bar_panels, print_table, write_json
from ._servers import backend_urls

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


async def agent_state() -> Any:
    """The state after the session benchmark's 200 turns, captured as a checkpoint holds it."""
    from memkit import Memkit, ShortTermConfig

    from .session import session_turns

    config = ShortTermConfig(max_tokens=32_000, tokenizer="estimate")
    async with Memkit("memory://", embedder="hashing", short_term=config) as mem:
        session, task = mem.short_term.session("bench"), mem.working.task("bench")
        for turn in session_turns(200):
            await session.add_many(turn)
        await session.wait_idle()
        for i in range(20):
            await task.set(f"key-{i}", {"note": f"checked venue {i}", "price": 40 + i})
        return await mem.checkpoints.capture(session=session, task=task, state={"step": 200}, turn=199)


async def bench_checkpoints(url: str, state: Any, progress: tqdm) -> list[dict[str, Any]]:  # type: ignore[type-arg]
    from memkit import AgentState, CheckpointConfig, Memkit

    rows = []
    for serializer in ("msgpack", "json"):
        for compression in (None, "zstd"):
            config = CheckpointConfig(serializer=serializer, compression=compression, keep_last=10)
            async with Memkit(
                url, embedder="hashing", checkpoints=config, layer_urls={"long_term": "memory://"}
            ) as mem:
                checkpoints = mem.checkpoints
                await checkpoints.delete("bench")
                saves, loads = [], []
                for _ in range(30):
                    started = time.perf_counter()
                    await checkpoints.save("bench", state)
                    saves.append(time.perf_counter() - started)
                    started = time.perf_counter()
                    loaded = await checkpoints.load("bench", type=AgentState)
                    loads.append(time.perf_counter() - started)
                assert loaded == state, "a checkpoint must load as it was saved"
                size = (await checkpoints.list("bench"))[0].size_bytes
                await checkpoints.delete("bench")
            rows.append({"serializer": serializer, "compression": compression or "none",
                         "ckpt_save_ms": float(np.median(saves)) * 1000, "ckpt_load_ms": float(np.median(loads)) * 1000,
                         "ckpt_bytes": size})  # fmt: skip
            progress.update(1)
    return rows


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


async def amain(args: argparse.Namespace) -> None:
    wanted = args.backends.split(",")
    rows: list[dict[str, Any]] = []
    checkpoints: list[dict[str, Any]] = []
    state = await agent_state()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        urls = backend_urls(wanted, stack, Path(tmp), name="state", redis_modules=False)
        with tqdm(total=(CALLS + 4) * len(wanted), desc="state benchmark", unit="step") as progress:
            for name in wanted:
                checkpoints += [
                    {"backend": name, **row} for row in await bench_checkpoints(urls[name], state, progress)
                ]
                rows.append({"backend": name, **await bench_cache(urls[name], progress)})
    messages = len(state.session.messages) if state.session else 0
    print(f"checkpointed state: {messages} messages verbatim, {len(state.working or [])} working-memory keys")
    print_table(checkpoints, ["backend", "serializer", "compression", "ckpt_save_ms", "ckpt_load_ms", "ckpt_bytes"])
    print_table(rows, ["backend", "cache_hit_us", "cache_miss_overhead_us", "single_flight_calls"])
    write_json(args.json_path, {"checkpoints": checkpoints, "cache": rows, "state_messages": messages})
    if args.plot:
        labels = [f"{c['backend']} {c['serializer']} {c['compression']}" for c in checkpoints]
        bar_panels(args.plot, f"agent state: a checkpoint of {messages} messages, and the tool cache", [
            Panel("checkpoint", "ms", labels, {"save": [c["ckpt_save_ms"] for c in checkpoints],
                                                "load": [c["ckpt_load_ms"] for c in checkpoints]}),
            Panel("tool cache", "us", [r["backend"] for r in rows], {
                "hit": [r["cache_hit_us"] for r in rows],
                "miss overhead": [r["cache_miss_overhead_us"] for r in rows]}),  # can be < 0: no log axis
        ])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", dest="json_path", help="write the figures as JSON here")
    parser.add_argument("--backends", default="memory,sqlite,redis,postgres")
    parser.add_argument("--plot", help="draw the figures as a PNG here (needs matplotlib)")
    anyio.run(amain, parser.parse_args())


if __name__ == "__main__":
    main()
