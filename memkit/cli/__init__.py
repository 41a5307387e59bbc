"""The ``memkit`` command (also ``python -m memkit``): look inside a store, move memories in and out of it,
serve it to MCP clients, run the demo and the benchmarks.

Every store command takes ``--url`` (default: what ``Memkit()`` opens: ``$MEMKIT_URL``, the config file's
``url``, else ``sqlite:///memkit.db``), ``--json`` (output for scripts) and ``--debug`` (the full traceback
of an error). Errors are one or two lines; the
exit codes are listed in ``memkit/cli/_output.py``. Only what a command needs is imported when it runs, so
``memkit --help`` is quick and the MCP SDK loads for ``memkit mcp`` alone.
"""

from __future__ import annotations

import argparse
import logging
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["main"]

_URL_HELP = ("storage URL (default: $MEMKIT_URL, else the config file's url: $MEMKIT_CONFIG, ./memkit.toml or "
             "[tool.memkit] in ./pyproject.toml; else sqlite:///memkit.db)")  # fmt: skip
_EMBEDDER_HELP = ("embedder: auto (the one the store was written with; a new store gets the local model when "
                  "installed), local or hashing")  # fmt: skip


def _common(top: bool) -> argparse.ArgumentParser:
    """The options every store command takes, before or after the command's name. The copy on each command
    leaves the namespace alone when not given (``SUPPRESS`` as the *default*, never as help), so
    ``memkit --json list`` and ``memkit list --json`` both work."""
    parser = argparse.ArgumentParser(add_help=False)
    default: Any = (lambda value: value) if top else (lambda value: argparse.SUPPRESS)
    parser.add_argument("--url", default=default(None), help=_URL_HELP)
    parser.add_argument("--json", action="store_true", default=default(False), help="print JSON for scripts")
    parser.add_argument("--debug", action="store_true", default=default(False), help="show full tracebacks")
    parser.add_argument("--embedder", choices=["auto", "local", "hashing"], default=default("auto"),
                        help=_EMBEDDER_HELP)  # fmt: skip
    return parser


def _async(name: str) -> Callable[[argparse.Namespace], int]:
    """A handler that runs ``memkit.cli.<module>.<function>`` on anyio, imported only when called."""
    module, function = name.rsplit(".", 1)

    def run(args: argparse.Namespace) -> int:
        import importlib

        import anyio

        handler = getattr(importlib.import_module(f"memkit.cli.{module}"), function)
        return int(anyio.run(handler, args))

    return run


def _sync(name: str) -> Callable[[argparse.Namespace], int]:
    module, function = name.rsplit(".", 1)

    def run(args: argparse.Namespace) -> int:
        import importlib

        return int(getattr(importlib.import_module(f"memkit.cli.{module}"), function)(args))

    return run


def _add_memory_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    store = commands.add_parser("store", parents=[common], help="store a memory for a user")
    store.add_argument("content", help="the memory's text")
    store.add_argument("--user-id", required=True, help="whose memory it is")
    store.add_argument("--kind", default="fact", help="fact, preference, decision, knowledge, task or your own")
    store.add_argument("--importance", type=float, default=0.5, help="0..1 (default 0.5)")
    store.add_argument("--source", help="where it came from")
    store.add_argument("--metadata", help='a JSON object, e.g. \'{"topic": "home"}\'')
    store.add_argument("--ttl", type=float, help="seconds until it expires")
    store.set_defaults(handler=_async("_commands.store"))

    recall = commands.add_parser("recall", parents=[common], help="a user's memories that best match a query")
    recall.add_argument("query")
    recall.add_argument("--user-id", required=True)
    recall.add_argument("-k", type=int, default=5, help="how many (default 5)")
    recall.add_argument("--kind", action="append", help="only this kind (repeat for several)")
    recall.add_argument("--min-score", type=float, help="drop hits scoring below this")
    recall.set_defaults(handler=_async("_commands.recall"))

    listing = commands.add_parser("list", parents=[common], help="memories by last change, oldest first "
                                  "(every user's unless --user-id)")  # fmt: skip
    listing.add_argument("--user-id", help="only this user's")
    listing.add_argument("--kind", action="append", help="only this kind (repeat for several)")
    listing.add_argument("--limit", type=int, default=50, help="at most this many, 1..1000 (default 50)")
    listing.add_argument("--cursor", help="continue after the previous page (printed at its end)")
    listing.add_argument("--newest-first", action="store_true")
    listing.set_defaults(handler=_async("_commands.list_memories"))

    for name, text in (("get", "show one memory"), ("forget", "delete one memory")):
        command = commands.add_parser(name, parents=[common], help=text)
        command.add_argument("id", help="the memory's id (from list, recall or store)")
        command.add_argument("--user-id", help="the memory must be this user's (default: whoever's it is)")
        command.set_defaults(handler=_async(f"_commands.{name}"))

    forget_all = commands.add_parser("forget-all", parents=[common], help="erase a user from every layer: memories, "
                                     "episodes, graph, working memory, checkpoints, sessions (asks first)")  # fmt: skip
    forget_all.add_argument("--user-id", required=True)
    forget_all.add_argument("--yes", action="store_true", help="do not ask (needed when not on a terminal)")
    forget_all.set_defaults(handler=_async("_commands.forget_all"))

    sweep = commands.add_parser("sweep", parents=[common], help="delete expired memories and episodes now")
    sweep.set_defaults(handler=_async("_commands.sweep"))
    stats = commands.add_parser("stats", parents=[common], help="counts per collection, kind and user; "
                                "embedder; size on disk")  # fmt: skip
    stats.add_argument("--plot", metavar="FILE.png", help="also draw the memories over time by kind to this PNG "
                       "(needs the plot extra: matplotlib)")  # fmt: skip
    stats.set_defaults(handler=_async("_stats.stats"))


def _add_transfer_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    export = commands.add_parser("export", parents=[common], help="memories to a JSON Lines file (resumable)")
    export.add_argument("file", help="the file to write, or - for standard output")
    export.add_argument("--user-id", help="only this user's memories (default: everyone's)")
    export.add_argument("--vectors", action="store_true", help="include each memory's vector (exact float32)")
    export.add_argument("--force", action="store_true", help="overwrite an existing file")
    export.add_argument("--restart", action="store_true", help="ignore a stopped export's position")
    export.add_argument("--state", help="where to keep the position (default: FILE.memkit-export)")
    export.add_argument("--no-progress", action="store_true", help="no progress bar")
    export.set_defaults(handler=_async("_export.export"))

    load = commands.add_parser("import", parents=[common], help="memories from a JSON Lines file (resumable; "
                               "bad lines reported and skipped)")  # fmt: skip
    load.add_argument("file")
    load.add_argument("--check", action="store_true", help="only check every line; write nothing")
    load.add_argument("--reembed", action="store_true", help="embed every memory again, even with vectors")
    load.add_argument("--restart", action="store_true", help="ignore a stopped import's position")
    load.add_argument("--state", help="where to keep the position (default: FILE.memkit-import)")
    load.add_argument("--no-progress", action="store_true", help="no progress bar")
    load.set_defaults(handler=_async("_import.import_file"))


def _add_mcp_command(commands: Any, common: argparse.ArgumentParser) -> None:
    mcp = commands.add_parser("mcp", parents=[common], help="serve the store to MCP clients (stdio or HTTP)")
    mcp.add_argument("--transport", choices=["stdio", "http"], default="stdio", help="default stdio")
    mcp.add_argument("--host", default="127.0.0.1", help="HTTP: address to bind (default 127.0.0.1)")
    mcp.add_argument("--port", type=int, default=8765, help="HTTP: port (default 8765)")
    mcp.add_argument("--token-env", default="MEMKIT_MCP_TOKEN", help="HTTP: environment variable holding the "
                     "bearer token clients must send (default MEMKIT_MCP_TOKEN; unset: no token)")  # fmt: skip
    mcp.add_argument("--user-id", help="the user every call acts for (default: $MEMKIT_USER_ID, else 'default')")
    mcp.add_argument("--allow-any-user", action="store_true", help="let clients name any user with a tool's "
                     "user_id argument (only for clients you trust with every user's memories)")  # fmt: skip
    mcp.set_defaults(handler=_sync("_serve.serve"))


def build_parser() -> argparse.ArgumentParser:
    from memkit import __version__

    parser = argparse.ArgumentParser(prog="memkit", parents=[_common(top=True)],
                                     description="Layered, async memory for AI agents.")  # fmt: skip
    parser.add_argument("--version", action="version", version=f"memkit {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = _common(top=False)
    _add_memory_commands(commands, common)
    _add_transfer_commands(commands, common)
    _add_mcp_command(commands, common)
    demo = commands.add_parser("demo", help="long-term memory across two processes on embedded SQLite")
    demo.add_argument("--db", default="memkit-demo.db", help="SQLite file to use (default: memkit-demo.db)")
    demo.set_defaults(handler=_sync("_demo.demo"))
    bench = commands.add_parser("bench", help="run a benchmark: memkit bench NAME [its options]")
    bench.add_argument("name", help="scoring, ingest, mcp, ... (an unknown name lists them)")
    bench.add_argument("args", nargs=argparse.REMAINDER, help="the benchmark's own options")
    bench.set_defaults(handler=_sync("_bench.bench"))
    return parser


def _quiet_warnings() -> None:
    """memkit logs what it warns about; show each once, on one line, without Python's source excerpt."""
    logging.basicConfig(level=logging.WARNING, format="memkit: warning: %(message)s", stream=sys.stderr)
    warnings.filterwarnings("ignore", category=UserWarning, module=r"memkit\..*")

    def show(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
        print(f"memkit: warning: {message}", file=sys.stderr)

    warnings.showwarning = show


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _quiet_warnings()
    try:
        return int(args.handler(args))
    except KeyboardInterrupt:
        print(f"memkit {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        from memkit.cli._output import classify

        if args.debug:
            traceback.print_exc()
        code, message, hint = classify(exc)
        print(f"memkit {args.command}: error: {message}", file=sys.stderr)
        if hint:
            print(f"  {hint}", file=sys.stderr)
        return int(code)


if __name__ == "__main__":
    sys.exit(main())
