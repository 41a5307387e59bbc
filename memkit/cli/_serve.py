"""``memkit mcp``: the store as an MCP server (the server itself is ``memkit.mcp_server``)."""

from __future__ import annotations

import argparse
import errno
import ipaddress
import os
import socket
import sys

import anyio

from memkit.cli._output import CliError, ExitCode
from memkit.cli._store import open_store

__all__ = ["serve"]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _token(args: argparse.Namespace) -> str | None:
    token = os.environ.get(args.token_env) or None
    if args.transport == "http" and token is None and not _loopback(args.host):
        raise CliError(f"refusing to serve every memory on {args.host} without a token",
                       f"set ${args.token_env} to a secret clients send as a bearer token", ExitCode.USAGE)  # fmt: skip
    return token


async def _serve(args: argparse.Namespace, token: str | None) -> int:
    from memkit.mcp_server import Scoping, serve

    scoping = Scoping.from_options(args.user_id, args.allow_any_user)
    listener = _listen(args.host, args.port) if args.transport == "http" else None  # before a store is made
    try:
        async with open_store(args.url, embedder=args.embedder, create=True) as mem:

            def listening() -> None:
                needs = " (bearer token required)" if token else ""
                print(f"memkit mcp: serving {mem.url} at http://{args.host}:{args.port}/mcp for user "
                      f"{scoping.user_id!r}{needs}", file=sys.stderr)  # fmt: skip

            await serve(mem, scoping, transport=args.transport, host=args.host, port=args.port, token=token,
                        listener=listener, on_listening=listening)  # fmt: skip
    finally:
        if listener is not None:
            listener.close()
    return ExitCode.OK


def _listen(host: str, port: int) -> socket.socket:
    from memkit.mcp_server import ListenError, listen

    try:
        return listen(host, port)
    except ListenError as exc:
        hint = ("choose another --port, or stop what listens there" if exc.errno == errno.EADDRINUSE
                else "check --host (an address of this machine, e.g. 127.0.0.1) and --port")  # fmt: skip
        raise CliError(str(exc), hint, ExitCode.USAGE) from exc


def serve(args: argparse.Namespace) -> int:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise CliError("the MCP server needs the mcp package", "pip install 'memkit-sdk[mcp]'",
                       ExitCode.CONFIGURATION) from None  # fmt: skip
    return int(anyio.run(_serve, args, _token(args)))
