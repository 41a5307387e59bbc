"""Opening a store for one command, with the embedder its collections were written with.

A collection records the embedder of its vectors (model id and dimension). A command opens the store with a
stand-in carrying that identity, so ``list``, ``stats`` or ``export`` never load a model, and the model is
loaded the first time a text must really be embedded (``recall``, ``store``). ``--embedder`` chooses another
one on purpose; the client then refuses a collection of other vectors, as it always does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio.to_thread
import msgspec

from memkit.cli._output import CliError, ExitCode
from memkit.errors import EmbeddingError

if TYPE_CHECKING:
    from memkit._client import Memkit
    from memkit._url import StorageURL
    from memkit.embedders import Embedder

__all__ = [
    "Identity",
    "StoredEmbedder",
    "claimed_identities",
    "loader_for",
    "open_store",
    "recorded_identity",
    "resolve_url",
]

COLLECTIONS = ("long_term", "episodic")
Identity = tuple[str, int]
"""An embedder's (model id, dimension), as a collection records it."""


def resolve_url(url: str | None) -> StorageURL:
    """``--url``, else what ``Memkit()`` would open: ``$MEMKIT_URL``, else the config file's ``url``
    (``$MEMKIT_CONFIG``, ``./memkit.toml`` or ``[tool.memkit]``), else ``sqlite:///memkit.db``. A command and
    the library started in the same folder open the same store."""
    from memkit._config import load_config
    from memkit._url import StorageURL

    return StorageURL(url) if url else load_config().url


def loader_for(model_id: str, dim: int) -> Callable[[], Embedder] | None:
    """How to load the embedder a collection names, when memkit ships it (else None)."""
    from memkit.embedders import CachedEmbedder, HashingEmbedder, LocalEmbedder

    if model_id == f"hashing-v1-{dim}":
        return lambda: HashingEmbedder(dim)
    if model_id == LocalEmbedder().model_id:  # the id is known without loading the model
        return lambda: CachedEmbedder(LocalEmbedder())
    return None


class StoredEmbedder:
    """Stands for a collection's embedder: its identity at once, the model only when a text is embedded."""

    def __init__(self, identity: Identity, load: Callable[[], Embedder] | None) -> None:
        self._model_id, self._dim = identity
        self._load = load
        self._inner: Embedder | None = None

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dim(self) -> int:
        return self._dim

    async def embed(self, texts: Sequence[str]) -> Any:
        if self._inner is None:
            if self._load is None:
                raise EmbeddingError(
                    f"this store's vectors come from embedder {self._model_id!r}, which the memkit command cannot "
                    "load (it ships 'local' and 'hashing'); embed with that model through the Python API"
                )
            self._inner = self._load()
        matrix = await self._inner.embed(texts)
        if (self._inner.model_id, self._inner.dim) != (self._model_id, self._dim):
            raise EmbeddingError(f"loaded embedder {self._inner.model_id!r} does not match {self._model_id!r}")
        return matrix


async def claimed_identities(url: StorageURL) -> dict[str, Identity]:
    """Each collection's recorded embedder, read without opening the layers."""
    from memkit._registry import open_backend

    found: dict[str, Identity] = {}
    async with open_backend(url) as backend:
        for collection in COLLECTIONS:
            identity = await recorded_identity(backend, collection)
            if identity is not None:
                found[collection] = identity
    return found


async def recorded_identity(backend: Any, collection: str) -> Identity | None:
    """The embedder ``collection`` records on ``backend`` (model id, dimension), if any."""
    from memkit.layers._embedding import META_NAMESPACE

    raw = await backend.kv_get(META_NAMESPACE, collection)
    meta = None if raw is None else msgspec.json.decode(raw)
    if isinstance(meta, dict) and isinstance(meta.get("model_id"), str) and isinstance(meta.get("dim"), int):
        return meta["model_id"], meta["dim"]
    return None


def _choose(choice: str, claimed: Identity | None, hint: Identity | None) -> Embedder | None:
    """The embedder to open the store with; None: the configuration's (``Memkit()`` reads ``$MEMKIT_EMBEDDER``
    and the config file's ``embedder``, else picks ``auto``), for ``auto`` on a store that records none."""
    from memkit.embedders import HashingEmbedder, LocalEmbedder, resolve_embedder

    wanted = claimed or hint
    if wanted is not None:
        named = {"local": LocalEmbedder().model_id, "hashing": HashingEmbedder(wanted[1]).model_id}.get(choice)
        if choice == "auto" or named == wanted[0]:
            return StoredEmbedder(wanted, loader_for(*wanted))
    if choice == "auto":
        return None
    return resolve_embedder("local" if choice == "local" else "hashing")


def _missing_file(url: StorageURL) -> Path | None:
    if url.scheme != "sqlite" or url.file_path in ("", ":memory:"):
        return None
    path = Path(url.file_path)
    return None if path.exists() else path


@asynccontextmanager
async def open_store(
    url_text: str | None, *, embedder: str = "auto", create: bool = False, hint: Identity | None = None
) -> AsyncIterator[Memkit]:
    """The store at ``url_text``, open. ``create``: a missing SQLite file is made (``store``, ``import``,
    ``mcp``); other commands refuse it, so a mistyped path is an error instead of a new empty file.
    ``hint``: the identity of vectors the command brings (an import), used when the store has none yet."""
    from memkit._client import Memkit

    url = resolve_url(url_text)
    missing = await anyio.to_thread.run_sync(_missing_file, url)
    if missing is not None and not create:
        raise CliError(f"no store at {url}: {missing} does not exist", "check --url ($MEMKIT_URL, or the "
                       "config file's url); 'memkit store' or 'memkit import' creates a store",
                       ExitCode.UNREACHABLE)  # fmt: skip
    claims = {} if missing is not None else await claimed_identities(url)
    chosen = _choose(embedder, claims.get("long_term") or claims.get("episodic"), hint)
    async with Memkit(url, embedder=chosen) as mem:
        yield mem
