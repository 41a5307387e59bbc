"""The storage URLs a benchmark runs on: memory://, a SQLite file, and Redis and Postgres servers started
for the run (from the PyPI wheels the tests use, on loopback), each Postgres run in a schema of its own."""

from __future__ import annotations

import uuid
from contextlib import ExitStack
from pathlib import Path

__all__ = ["backend_urls"]


def backend_urls(wanted: list[str], stack: ExitStack, tmp: Path, *, name: str, redis_modules: bool) -> dict[str, str]:
    """``redis_modules``: Redis Stack (search, for records) or plain Redis (the key-value face only)."""
    urls = {"memory": "memory://", "sqlite": f"sqlite:///{tmp / f'{name}.db'}"}
    if {"redis", "postgres"} & set(wanted):
        from memkit.testing.servers import postgres_server, redis_server

        if "redis" in wanted:
            urls["redis"] = stack.enter_context(redis_server(tmp / "redis", modules=redis_modules))
        if "postgres" in wanted:
            postgres = stack.enter_context(postgres_server(tmp / "pg"))
            schema = f"{name[0]}_{uuid.uuid4().hex[:8]}"
            urls["postgres"] = postgres + ("&" if "?" in postgres else "?") + f"schema={schema}"
    return urls
