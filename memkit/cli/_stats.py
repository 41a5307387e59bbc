"""``memkit stats``: what a store holds, per collection, kind and user, and its size on disk; ``--plot``
draws its long-term memories over time by kind (``_plot.py``)."""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from memkit.cli._output import ExitCode, print_json, print_table
from memkit.cli._store import open_store, recorded_identity

if TYPE_CHECKING:
    from memkit.cli._plot import Timeline

__all__ = ["stats"]

_GROUP_FIELD: dict[str, str | None] = {"long_term": "kind", "episodic": "outcome", "graph_nodes": None,
                                       "graph_edges": "rel"}  # fmt: skip
"""The field each collection's records are counted by: a memory's kind, an episode's outcome, an edge's
relation (nodes: by user only)."""
_USERS_SHOWN = 20


def _size_on_disk(mem: Any) -> int | None:
    """The SQLite file with its write-ahead log and shared-memory index; None for other backends."""
    url = mem.url
    if url.scheme != "sqlite" or url.file_path in ("", ":memory:"):
        return None
    base = Path(url.file_path)
    return sum(p.stat().st_size for p in (base, Path(f"{base}-wal"), Path(f"{base}-shm")) if p.exists())


def _collections(mem: Any) -> list[tuple[str, Any, str]]:
    """(name in the report, the layer's backend, its collection as configured) for each layer of records."""
    graph = mem.graph
    return [("long_term", mem.long_term.backend, mem.long_term.config.collection),
            ("episodic", mem.episodic.backend, mem.episodic.config.collection),
            ("graph_nodes", graph.backend, graph.config.nodes_collection),
            ("graph_edges", graph.backend, graph.config.edges_collection)]  # fmt: skip


async def _count(backend: Any, collection: str, group: str | None, timeline: Timeline | None = None) -> dict[str, Any]:
    """One pass over the collection's live records (a scan, so it works the same on every backend); each
    record is also dated on ``timeline`` when given (the plot's data, read in the same pass)."""
    from memkit.backend import Scope

    by_group: Counter[str] = Counter()
    by_user: Counter[str] = Counter()
    cursor: str | None = None
    now = time.time()
    while True:
        page = await backend.scan(collection, Scope(), limit=1000, cursor=cursor, now=now, all_scopes=True)
        for record in page.records:
            by_group[str(record.fields.get(group, "?")) if group else "-"] += 1
            scope = record.scope
            by_user[scope.user_id or (f"agent:{scope.agent_id}" if scope.agent_id else "-")] += 1
            if timeline is not None:
                timeline.add(record)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    counts: dict[str, Any] = {"total": sum(by_group.values())}
    if group:
        counts[f"by_{group}"] = dict(by_group.most_common())
    return {**counts, "by_user": dict(by_user.most_common())}


def _embedder(identity: tuple[str, int] | None) -> dict[str, Any]:
    return {"embedder": None if identity is None else {"model_id": identity[0], "dim": identity[1]}}


async def _plot(timeline: Timeline, path: Path, url: Any) -> None:
    from functools import partial

    from memkit.cli._plot import draw

    title = f"Long-term memories in {url}, by kind"
    await anyio.to_thread.run_sync(partial(draw, timeline, path, title=title, now=time.time()))


async def stats(args: argparse.Namespace) -> int:
    timeline = None
    if args.plot is not None:
        from memkit.cli._plot import Timeline, check_matplotlib

        check_matplotlib()  # before the store is opened: a missing extra fails at once
        timeline = Timeline()
    async with open_store(args.url, embedder=args.embedder) as mem:
        collections = {}
        for name, backend, collection in _collections(mem):
            counts = await _count(backend, collection, _GROUP_FIELD[name], timeline if name == "long_term" else None)
            identity = None if name.startswith("graph_") else await recorded_identity(backend, collection)
            collections[name] = {**_embedder(identity), **counts}
        size = await anyio.to_thread.run_sync(_size_on_disk, mem)
        report = {"url": str(mem.url), "size_bytes": size, "collections": collections}
    if timeline is not None:
        await _plot(timeline, Path(args.plot), mem.url)
        report["plot"] = str(args.plot)
    if args.json:
        print_json(report)
        return ExitCode.OK
    if timeline is not None:
        print(f"plot  {args.plot}")
    print(f"store  {mem.url}" + ("" if size is None else f"  ({size / 1e6:.1f} MB on disk)"))
    for name, info in collections.items():
        model = info["embedder"]
        embedder = "" if name.startswith("graph_") else "; embedder " + (
            "none yet" if model is None else f"{model['model_id']} (dim {model['dim']})")  # fmt: skip
        print(f"\n{name}: {info['total']} live records{embedder}")
        group = _GROUP_FIELD[name]
        if info["total"]:
            if group:
                rows = [{group: key, "count": n} for key, n in info[f"by_{group}"].items()]
                print_table(rows, [group, "count"])
            users = list(info["by_user"].items())
            rows = [{"user": user, "count": n} for user, n in users[:_USERS_SHOWN]]
            print_table(rows, ["user", "count"])
            if len(users) > _USERS_SHOWN:
                print(f"... and {len(users) - _USERS_SHOWN} more users (--json lists them all)")
    return ExitCode.OK
