"""The commands that read and change a store: store, recall, list, get, forget, forget-all, sweep.

The CLI is an operator's tool: ``list`` and ``get`` without ``--user-id`` read every user's memories (the
library itself never does that without ``all_scopes=True``); commands that change memories name their
user, or find it from the memory's id.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import anyio.to_thread
import msgspec

from memkit.cli._output import CliError, ExitCode, print_json, print_table
from memkit.cli._store import open_store

__all__ = ["forget", "forget_all", "get", "list_memories", "recall", "store", "sweep"]


def _metadata(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"--metadata is not JSON: {exc}", "e.g. --metadata '{\"topic\": \"home\"}'",
                       ExitCode.BAD_INPUT) from None  # fmt: skip
    if not isinstance(value, dict):
        raise CliError("--metadata must be a JSON object", "e.g. --metadata '{\"topic\": \"home\"}'",
                       ExitCode.BAD_INPUT)  # fmt: skip
    return value


def _memory_row(memory: Any) -> dict[str, Any]:
    return {"id": memory.id, "user": memory.scope.user_id or memory.scope.agent_id, "kind": memory.kind,
            "importance": memory.importance, "updated": memory.updated_at.strftime("%Y-%m-%d %H:%M"),
            "content": memory.content}  # fmt: skip


async def store(args: argparse.Namespace) -> int:
    async with open_store(args.url, embedder=args.embedder, create=True) as mem:
        result = await mem.long_term.store(
            args.content, user_id=args.user_id, kind=args.kind, importance=args.importance, source=args.source,
            metadata=_metadata(args.metadata), ttl=args.ttl,
        )  # fmt: skip
    if args.json:
        print_json(result)
    elif result.memory is None:
        print(f"{result.status}: {result.reason}")
    else:
        print(f"{result.status} {result.memory.id}")
    return ExitCode.OK


async def recall(args: argparse.Namespace) -> int:
    async with open_store(args.url, embedder=args.embedder) as mem:
        hits = await mem.long_term.recall(args.query, user_id=args.user_id, k=args.k, kinds=args.kind or None,
                                          min_score=args.min_score)  # fmt: skip
    if args.json:
        print_json({"hits": hits})
    elif not hits:
        print(f"no memories of user {args.user_id!r} match")
    else:
        rows = [{"score": h.score, "sim": h.similarity, "lex": h.lexical, "rec": h.recency, "imp": h.importance,
                 "kind": h.memory.kind, "id": h.memory.id, "content": h.memory.content} for h in hits]  # fmt: skip
        print_table(rows, ["score", "sim", "lex", "rec", "imp", "kind", "id", "content"], wide="content")
    return ExitCode.OK


async def list_memories(args: argparse.Namespace) -> int:
    async with open_store(args.url, embedder=args.embedder) as mem:
        page = await mem.long_term.list(
            user_id=args.user_id, all_scopes=args.user_id is None, kinds=args.kind or None, limit=args.limit,
            cursor=args.cursor, newest_first=args.newest_first,
        )  # fmt: skip
    if args.json:
        print_json(page)
        return ExitCode.OK
    if not page.memories:
        print("no memories" + (f" of user {args.user_id!r}" if args.user_id else ""))
    else:
        print_table([_memory_row(m) for m in page.memories], ["id", "user", "kind", "importance", "updated",
                                                               "content"], wide="content")  # fmt: skip
    if page.next_cursor:
        print(f"(more: --cursor {page.next_cursor})", file=sys.stderr)
    return ExitCode.OK


async def _find(mem: Any, memory_id: str, user_id: str | None) -> Any:
    """The memory with this id: in the user's scope when given, else whoever's it is."""
    from memkit.errors import NotFoundError
    from memkit.layers.longterm._codec import decode

    if user_id is not None:
        return await mem.long_term.get(memory_id, user_id=user_id)
    records = await mem.backend.get(mem.long_term.config.collection, [memory_id])
    if not records:
        raise NotFoundError(f"no memory {memory_id!r} in {mem.url}")
    return decode(records[0])


async def get(args: argparse.Namespace) -> int:
    async with open_store(args.url, embedder=args.embedder) as mem:
        memory = await _find(mem, args.id, args.user_id)
    if args.json:
        print_json(memory)
        return ExitCode.OK
    for name, value in msgspec.structs.asdict(memory).items():
        shown = value
        if name == "scope":
            shown = ", ".join(f"{k}={v}" for k, v in msgspec.structs.asdict(value).items() if v is not None)
        if shown not in (None, {}, ""):
            print(f"{name:>16}  {shown}")
    return ExitCode.OK


async def forget(args: argparse.Namespace) -> int:
    async with open_store(args.url, embedder=args.embedder) as mem:
        memory = await _find(mem, args.id, args.user_id)
        scope = memory.scope
        done = await mem.long_term.forget(memory.id, user_id=scope.user_id, agent_id=scope.agent_id,
                                          session_id=scope.session_id, all_scopes=scope.user_id is None)  # fmt: skip
    if args.json:
        print_json({"id": memory.id, "forgotten": done})
    else:
        print(f"forgot {memory.id}" if done else f"{memory.id} was already gone")
    return ExitCode.OK


async def _confirm(args: argparse.Namespace, what: str) -> None:
    if args.yes:
        return
    if not sys.stdin.isatty():
        raise CliError(f"refusing to {what} without confirmation", "pass --yes to confirm", ExitCode.USAGE)
    answer = (await anyio.to_thread.run_sync(input, f"{what}? This cannot be undone. [y/N] ")).strip().lower()
    if answer not in ("y", "yes"):
        raise CliError("nothing was deleted", None, ExitCode.USAGE)


async def forget_all(args: argparse.Namespace) -> int:
    async with open_store(args.url, embedder=args.embedder) as mem:
        memories = await mem.backend.count(mem.long_term.config.collection, _scope(args.user_id))
        episodes = await mem.backend.count(mem.episodic.config.collection, _scope(args.user_id))
        what = (f"forget all {memories} memories, {episodes} episodes, the knowledge graph, working memory, "
                f"checkpoints and sessions of user {args.user_id!r} in {mem.url}")  # fmt: skip
        await _confirm(args, what)
        gone = await mem.forget_user(args.user_id)
    if args.json:
        print_json(gone)
    else:
        print(f"forgot {gone.memories} memories, {gone.episodes} episodes, {gone.graph_items} graph nodes and edges, "
              f"{gone.working_items} working-memory items, {gone.checkpoint_keys} checkpoint entries and "
              f"{gone.sessions} sessions of user {args.user_id!r}")  # fmt: skip
    return ExitCode.OK


def _scope(user_id: str) -> Any:
    from memkit.backend import Scope

    return Scope(user_id=user_id)


async def sweep(args: argparse.Namespace) -> int:
    async with open_store(args.url, embedder=args.embedder) as mem:
        memories = await mem.long_term.sweep_expired()
        episodes = await mem.episodic.sweep_expired()
    if args.json:
        print_json({"memories": memories, "episodes": episodes})
    else:
        print(f"deleted {memories} expired memories and {episodes} expired episodes")
    return ExitCode.OK
