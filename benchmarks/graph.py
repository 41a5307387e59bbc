"""Knowledge graph and episodic memory: write rate, 2-hop walks, lost updates, similar-episode search.

    python -m benchmarks.graph --json out/graph.json [--plot out/graph.png] [--backends memory,sqlite,redis,postgres]

A generated social/work graph of 10,000 nodes (8,000 people, 1,000 companies, 500 cities, 500 topics) and
50,000 edges (each person works at a company and lives in a city; 26,000 "knows" between people, power-law
so some people are hubs; 8,000 "likes" of topics), the same on every backend. For each backend:

- ``graph_upsert_per_s``: nodes + edges per second written by ``upsert`` in batches of 1,000 (every write a
  compare-and-set merge, endpoints resolved); ``graph_upsert_one_per_s``: edges per second by 2,000
  ``upsert_edge`` calls one at a time (each resolves and creates its endpoints).
- ``graph_2hop_p50_ms`` / ``graph_2hop_p95_ms``: ``related(depth=2, fan_out=20, direction="both")`` from 300
  random people (after 20 warm-up walks), nodes read included.
- ``graph_lost_updates``: 16 concurrent writers each merge 25 attributes into one node and one edge
  (one upsert per attribute); attributes missing afterwards (must be 0).
- ``episodes_find_p50_ms``: episodic ``find_similar`` (k=5) over 10,000 episodes of 100 users.
- ``machine``: ``python_probe_ms`` before and after the run (a fixed piece of pure Python, best of 5): this
  machine's speed moves between runs, so compare figures of two runs through it.
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

from ._episodes import episodes_find_p50_ms
from ._report import figures_parser, print_table, python_probe_ms, write_json
from ._servers import backend_urls

PEOPLE, COMPANIES, CITIES, TOPICS = 8_000, 1_000, 500, 500
KNOWS, LIKES = 26_000, 8_000
BATCH = 1_000
ONE_AT_A_TIME = 2_000
WALKS, WARMUP = 300, 20
WRITERS, ATTRIBUTES = 16, 25


def generated_graph(seed: int = 7, scale: float = 1.0) -> tuple[list[Any], list[Any]]:
    """The nodes and edges, deterministic for a seed; ``scale`` shrinks every count (for a quick run)."""
    from memkit.layers.graph import Edge, Node

    people, companies, cities, topics, knows_n, likes_n = (
        max(2, int(n * scale)) for n in (PEOPLE, COMPANIES, CITIES, TOPICS, KNOWS, LIKES)
    )
    rng = np.random.default_rng(seed)
    nodes = [Node(name=f"person {i}", type="person", attributes={"age": int(20 + i % 50)}) for i in range(people)]
    nodes += [Node(name=f"company {i}", type="company", attributes={"size": int(10 + i)}) for i in range(companies)]
    nodes += [Node(name=f"city {i}", type="city") for i in range(cities)]
    nodes += [Node(name=f"topic {i}", type="topic") for i in range(topics)]
    edges = [Edge(source=f"person {i}", relation="works_at", target=f"company {rng.integers(companies)}")
             for i in range(people)]  # fmt: skip
    edges += [Edge(source=f"person {i}", relation="lives_in", target=f"city {rng.integers(cities)}")
              for i in range(people)]  # fmt: skip
    knows: set[tuple[int, int]] = set()
    while len(knows) < min(knows_n, people * (people - 1) // 2):  # targets from a power law: a few hubs
        a, b = int(rng.integers(people)), int(min(rng.zipf(1.6), people) - 1)
        if a != b:
            knows.add((a, b))
    edges += [Edge(source=f"person {a}", relation="knows", target=f"person {b}") for a, b in sorted(knows)]
    likes: set[tuple[int, int]] = set()
    while len(likes) < min(likes_n, people * topics):
        likes.add((int(rng.integers(people)), int(rng.integers(topics))))
    edges += [Edge(source=f"person {a}", relation="likes", target=f"topic {b}") for a, b in sorted(likes)]
    return nodes, edges


async def bench_writes(graph: Any, nodes: list[Any], edges: list[Any], progress: tqdm) -> dict[str, float]:  # type: ignore[type-arg]
    started = time.perf_counter()
    for at in range(0, len(nodes), BATCH):
        await graph.upsert(nodes=nodes[at : at + BATCH], user_id="bench")
        progress.update(1)
    for at in range(0, len(edges), BATCH):
        await graph.upsert(edges=edges[at : at + BATCH], user_id="bench")
        progress.update(1)
    batched = (len(nodes) + len(edges)) / (time.perf_counter() - started)
    started = time.perf_counter()
    for edge in edges[:ONE_AT_A_TIME]:
        await graph.upsert_edge(edge.source, edge.relation, edge.target, user_id="one-by-one")
    progress.update(1)
    return {"graph_upsert_per_s": batched, "graph_upsert_one_per_s": ONE_AT_A_TIME / (time.perf_counter() - started)}


async def bench_walks(graph: Any, people: int, progress: tqdm) -> dict[str, float]:  # type: ignore[type-arg]
    rng = np.random.default_rng(3)
    timings, reached = [], []
    for at in range(WARMUP + WALKS):
        start = f"person {rng.integers(people)}"
        began = time.perf_counter()
        found = await graph.related(start, depth=2, fan_out=20, direction="both", user_id="bench")
        if at >= WARMUP:
            timings.append(time.perf_counter() - began)
            reached.append(len(found.nodes))
    progress.update(1)
    return {"graph_2hop_p50_ms": float(np.percentile(timings, 50)) * 1000,
            "graph_2hop_p95_ms": float(np.percentile(timings, 95)) * 1000,
            "graph_2hop_nodes_mean": float(np.mean(reached))}  # fmt: skip


async def bench_lost_updates(graph: Any, progress: tqdm) -> int:  # type: ignore[type-arg]
    from memkit.layers.graph import Edge, Node

    async def writer(w: int) -> None:
        for a in range(ATTRIBUTES):
            await graph.upsert(nodes=[Node(name="contended", attributes={f"w{w}a{a}": a})],
                               edges=[Edge(source="contended", relation="touched_by", target="everyone",
                                           attributes={f"w{w}a{a}": a})], user_id="contention")  # fmt: skip

    async with anyio.create_task_group() as group:
        for w in range(WRITERS):
            group.start_soon(writer, w)
    node = await graph.get_node("contended", user_id="contention")
    [edge] = await graph.edges("contended", user_id="contention")
    progress.update(1)
    return 2 * WRITERS * ATTRIBUTES - len(node.attributes) - len(edge.attributes)


async def bench_backend(url: str, nodes: list[Any], edges: list[Any], episodes: int, progress: tqdm) -> dict[str, Any]:  # type: ignore[type-arg]
    from memkit import open_backend
    from memkit.layers.graph import KnowledgeGraph

    async with open_backend(url) as backend:
        graph = KnowledgeGraph(backend)
        await graph.setup()
        row: dict[str, Any] = await bench_writes(graph, nodes, edges, progress)
        row |= await bench_walks(graph, sum(1 for n in nodes if n.type == "person"), progress)
        row["graph_lost_updates"] = await bench_lost_updates(graph, progress)
    row["episodes_find_p50_ms"] = await episodes_find_p50_ms(url, episodes)
    progress.update(1)
    return row


def plot(path: str, rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["backend"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    x = np.arange(len(rows))
    left.bar(x - 0.2, [r["graph_2hop_p50_ms"] for r in rows], 0.4, label="p50")
    left.bar(x + 0.2, [r["graph_2hop_p95_ms"] for r in rows], 0.4, label="p95")
    left.set(xticks=x, xticklabels=names, ylabel="milliseconds", title="2-hop walk, fan-out 20")
    left.legend()
    right.bar(x - 0.2, [r["graph_upsert_per_s"] for r in rows], 0.4, label="batched (1,000)")
    right.bar(x + 0.2, [r["graph_upsert_one_per_s"] for r in rows], 0.4, label="one at a time")
    right.set(xticks=x, xticklabels=names, ylabel="nodes + edges per second", title="upsert rate")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


async def amain(args: argparse.Namespace) -> None:
    wanted = args.backends.split(",")
    nodes, edges = generated_graph(scale=args.scale)
    rows = []
    steps = len(range(0, len(nodes), BATCH)) + len(range(0, len(edges), BATCH)) + 4
    probe = {"python_probe_ms_start": python_probe_ms()}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        urls = backend_urls(wanted, stack, Path(tmp), name="graph", redis_modules=True)
        with tqdm(total=steps * len(wanted), desc="graph benchmark", unit="step") as progress:
            for name in wanted:
                rows.append({"backend": name, **await bench_backend(urls[name], nodes, edges, args.episodes, progress)})
    probe["python_probe_ms_end"] = python_probe_ms()
    print(
        f"graph: {len(nodes):,} nodes, {len(edges):,} edges; machine: a fixed piece of Python took "
        f"{probe['python_probe_ms_start']:.1f} ms before the run and {probe['python_probe_ms_end']:.1f} ms after"
    )
    print_table(rows, ["backend", "graph_upsert_per_s", "graph_upsert_one_per_s", "graph_2hop_p50_ms",
                       "graph_2hop_p95_ms", "graph_2hop_nodes_mean", "graph_lost_updates",
                       "episodes_find_p50_ms"])  # fmt: skip
    write_json(args.json_path, {"nodes": len(nodes), "edges": len(edges), "machine": probe, "backends": rows})
    if args.plot:
        plot(args.plot, rows)


def main() -> None:
    parser = figures_parser(__doc__, plot_help="draw the figures as a PNG here")
    parser.add_argument("--backends", default="memory,sqlite,redis,postgres")
    parser.add_argument("--scale", type=float, default=1.0, help="shrink the graph (0.05: 500 nodes, 2,500 edges)")
    parser.add_argument("--episodes", type=int, default=10_000)
    anyio.run(amain, parser.parse_args())


if __name__ == "__main__":
    main()
