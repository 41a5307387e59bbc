"""Streamable HTTP: the SDK's app behind an optional bearer token, served by uvicorn.

The token is compared in constant time; a request without it gets 401 before it reaches the MCP session
manager. Bound to 127.0.0.1 by default; the SDK then also checks Host and Origin headers against
loopback names (DNS rebinding protection).
"""

from __future__ import annotations

import hmac
import json
import socket
from typing import Any

from memkit.mcp_server._errors import ListenError

__all__ = ["BearerAuth", "listen", "serve_http"]

Scope = dict[str, Any]


class BearerAuth:
    """ASGI middleware: HTTP requests must carry ``Authorization: Bearer <token>``."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = next((value for name, value in scope["headers"] if name == b"authorization"), b"")
            if not hmac.compare_digest(given, self._expected):
                body = json.dumps({"error": "unauthorized: send Authorization: Bearer <token>"}).encode()
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer"),
                                        (b"content-length", str(len(body)).encode())]})  # fmt: skip
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port``, or ``ListenError`` saying why not. Bound here rather than by
    uvicorn, which logs a port in use and exits the process (a ``SystemExit`` inside the server's tasks)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        listener = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ListenError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart reuses a port in TIME_WAIT
        listener.bind(address)
        listener.listen(128)
    except OSError as exc:
        listener.close()
        raise ListenError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    listener.setblocking(False)
    return listener


async def serve_http(server: Any, listener: socket.socket, *, host: str, token: str | None) -> None:
    import uvicorn

    app = server.streamable_http_app(host=host)
    if token:
        app = BearerAuth(app, token)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve(sockets=[listener])
