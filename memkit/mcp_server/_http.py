"""Streamable HTTP: the SDK's app behind an optional bearer token, served by uvicorn.

The token is compared in constant time; a request without it gets 401 before it reaches the MCP session
manager. Bound to 127.0.0.1 by default; the SDK then also checks Host and Origin headers against
loopback names (DNS rebinding protection).
"""

from __future__ import annotations

import hmac
import json
from typing import Any

__all__ = ["BearerAuth", "serve_http"]

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


async def serve_http(server: Any, *, host: str, port: int, token: str | None) -> None:
    import uvicorn

    app = server.streamable_http_app(host=host)
    if token:
        app = BearerAuth(app, token)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()
