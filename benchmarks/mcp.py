"""A recall tool call over MCP: the SDK's own client, stdio, ``memkit mcp`` in a subprocess.

    python -m benchmarks.mcp --json out/mcp.json [--plot out/mcp.png] [--n 10000] [--calls 200]

One user's store of n memories (8 Zipf-distributed words each, embedded with the packaged local model,
all-MiniLM-L6-v2) in a SQLite file. In one run:

- ``mcp_recall_p50_ms`` / ``_p95_ms``: a ``recall`` tool call through ``ClientSession.call_tool`` over
  stdio to ``memkit mcp`` (its model loaded first), measured at the client: JSON-RPC both ways, argument
  and result validation, the query's embedding and the recall.
- ``inprocess_recall_p50_ms``: ``long_term.recall`` in this process on the same file (query embedding
  included): what the library itself costs. The two are timed in turns of 10 queries; every query is a
  new text, so no embedding cache helps. ``mcp_over_inprocess`` is the ratio.

Target: ``mcp_recall_p50_ms`` <= 30 ms at n = 10,000 (issue 16).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from tqdm import tqdm

from ._report import machine_info, print_table, write_json

USER = "ada"
BATCH = 500
WARMUP = 10
TARGET_MS = 30.0


def texts(n: int, seed: int) -> list[str]:
    """n distinct notes of 8 words from a Zipf-distributed vocabulary (as the ingest benchmark's)."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = np.array(["".join(rng.choice(letters, int(rng.integers(4, 9)))) for _ in range(5_000)])
    odds = 1.0 / np.arange(1, len(vocab) + 1)
    words = vocab[rng.choice(len(vocab), size=(n, 8), p=odds / odds.sum())]
    return [f"note {seed}-{i}: " + " ".join(row) for i, row in enumerate(words)]


async def build(url: str, n: int) -> None:
    from memkit import Memkit, NewMemory

    notes = texts(n, seed=0)
    async with Memkit(url, embedder="local") as mem:
        with tqdm(total=n, desc="embedding and storing", unit="memory") as progress:
            for at in range(0, n, BATCH):
                await mem.long_term.store_many([NewMemory(content=t) for t in notes[at : at + BATCH]], user_id=USER)
                progress.update(min(BATCH, n - at))


def _p(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1000


async def timed(call: Any, query: str) -> float:
    started = time.perf_counter()
    await call(query)
    return time.perf_counter() - started


async def measure(url: str, queries: list[str]) -> tuple[list[float], list[float]]:
    """Both ways in turns of 10 queries, so the machine's noise hits both alike."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from memkit import Memkit

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    params = StdioServerParameters(command=sys.executable, env=env,
                                   args=["-m", "memkit", "mcp", "--url", url, "--user-id", USER])  # fmt: skip
    async with (
        Memkit(url, embedder="local") as mem,
        stdio_client(params) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()

        async def local(query: str) -> None:
            assert len(await mem.long_term.recall(query, user_id=USER, k=5)) == 5

        async def remote(query: str) -> None:
            result = await session.call_tool("recall", {"query": query, "k": 5})
            assert not result.is_error and len(result.structured_content["hits"]) == 5, result.content

        for query in texts(WARMUP, seed=2):  # the first calls load the model on each side
            await local(query)
            await remote(query)
        inprocess: list[float] = []
        mcp: list[float] = []
        for at in tqdm(range(0, len(queries), 10), desc="recall, in process and over MCP", unit="10 calls"):
            inprocess += [await timed(local, q) for q in queries[at : at + 10]]
            mcp += [await timed(remote, q) for q in queries[at : at + 10]]
    return inprocess, mcp


async def amain(args: argparse.Namespace) -> None:
    queries = texts(args.calls, seed=1)
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'mcp.db'}"
        await build(url, args.n)
        local, remote = await measure(url, queries)
    row = {"n": args.n, "calls": args.calls, "inprocess_recall_p50_ms": _p(local, 50),
           "mcp_recall_p50_ms": _p(remote, 50), "mcp_recall_p95_ms": _p(remote, 95)}  # fmt: skip
    row["mcp_over_inprocess"] = row["mcp_recall_p50_ms"] / row["inprocess_recall_p50_ms"]
    print_table([row], list(row))
    write_json(args.json_path, {**row, "target_mcp_recall_p50_ms": TARGET_MS, "machine": machine_info()})
    if args.plot:
        plot(args.plot, local, remote, args.n)


def plot(path: str, local: list[float], remote: list[float], n: int) -> None:
    """Each way's latencies as a cumulative distribution, with the target's line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(figsize=(8, 4.5))
    for label, seconds in (("in process (long_term.recall)", local), ("over MCP stdio (call_tool)", remote)):
        ms = np.sort(np.asarray(seconds) * 1000)
        axes.step(ms, np.arange(1, len(ms) + 1) / len(ms), where="post",
                  label=f"{label}: p50 {np.percentile(ms, 50):.1f} ms")  # fmt: skip
    axes.axvline(TARGET_MS, color="black", linestyle="--", linewidth=1, label=f"target: p50 <= {TARGET_MS:.0f} ms")
    axes.set_xlabel("recall latency, query embedding included (ms)")
    axes.set_ylabel("fraction of calls")
    axes.set_ylim(0, 1.02)
    axes.set_title(f"recall of one user's {n:,} memories (SQLite, local model)")
    axes.grid(True, alpha=0.3)
    axes.legend(loc="lower right")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", dest="json_path", help="write the figures as JSON here")
    parser.add_argument("--n", type=int, default=10_000, help="memories in the store (default 10,000)")
    parser.add_argument("--calls", type=int, default=200, help="timed recall calls (default 200)")
    parser.add_argument("--plot", help="draw the latencies as a PNG here (needs matplotlib)")
    anyio.run(amain, parser.parse_args())


if __name__ == "__main__":
    main()
