"""A persistent embedding cache for benchmark re-runs: text hash -> the vector the model returned, on disk.

``--embed-cache DIR`` wraps the benchmark's embedder so a second run (another ablation, another lever) skips
the model for every text it has seen: on 2 shared cores the local model is most of a run. The vectors are the
model's own (the same model id is part of the key), so figures do not change; only the time does. One SQLite
file per directory, read and written in a worker thread (never on the event loop).
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import anyio.to_thread
import numpy as np
import numpy.typing as npt

from memkit.embedders import Embedder, HashingEmbedder

__all__ = ["DiskCachedEmbedder", "RecordingEmbedder", "warm_cache"]

Matrix = npt.NDArray[np.float32]


class DiskCachedEmbedder:
    """Wraps ``inner``; vectors are kept in ``DIR/embeddings.sqlite`` keyed by (model id, text)."""

    def __init__(self, inner: Embedder, directory: str | Path) -> None:
        self.inner = inner
        Path(directory).mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(Path(directory) / "embeddings.sqlite", check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vector BLOB NOT NULL)")
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    def __getattr__(self, name: str) -> object:  # e.g. the model's window, asked of the wrapped embedder
        if name == "inner":  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _key(self, text: str) -> bytes:
        return hashlib.blake2b(f"{self.inner.model_id}\0{text}".encode(), digest_size=16).digest()

    def _read(self, keys: list[bytes]) -> dict[bytes, Matrix]:
        found: dict[bytes, Matrix] = {}
        with self._lock:
            for start in range(0, len(keys), 500):
                chunk = keys[start : start + 500]
                marks = ",".join("?" * len(chunk))
                for key, blob in self._db.execute(f"SELECT key, vector FROM vectors WHERE key IN ({marks})", chunk):
                    found[bytes(key)] = np.frombuffer(blob, dtype=np.float32)
        return found

    def _write(self, rows: list[tuple[bytes, bytes]]) -> None:
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)", rows)
            self._db.commit()

    async def embed(self, texts: Sequence[str]) -> Matrix:
        keys = [self._key(text) for text in texts]
        found = await anyio.to_thread.run_sync(self._read, list(dict.fromkeys(keys)))
        missing = [key for key in dict.fromkeys(keys) if key not in found]
        if missing:
            first_text = {key: text for key, text in zip(keys, texts, strict=True)}
            fresh = np.asarray(await self.inner.embed([first_text[key] for key in missing]), dtype=np.float32)
            rows = [(key, np.ascontiguousarray(row).tobytes()) for key, row in zip(missing, fresh, strict=True)]
            await anyio.to_thread.run_sync(self._write, rows)
            found.update(zip(missing, fresh, strict=True))
        self.misses += len(missing)
        self.hits += len(keys) - len(missing)
        if not keys:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([found[key] for key in keys])

    async def prefill(self, texts: Sequence[str], *, chunk: int = 1024) -> int:
        """Embed every text not cached yet, longest first in large chunks: the model pads a batch to its longest
        text, so one sorted pass over a whole benchmark is several times faster than its calls one by one
        (a session's dozen turns at a time). Written chunk by chunk, so an interrupted fill keeps its work."""
        wanted = list(dict.fromkeys(texts))
        known = await anyio.to_thread.run_sync(self._read, [self._key(t) for t in wanted])
        missing = sorted((t for t in wanted if self._key(t) not in known), key=len, reverse=True)
        from tqdm import tqdm

        with tqdm(total=len(missing), desc="embedding (cache fill)", unit="text") as progress:
            for start in range(0, len(missing), chunk):
                texts_now = missing[start : start + chunk]
                fresh = np.asarray(await self.inner.embed(texts_now), dtype=np.float32)
                pairs = zip(texts_now, fresh, strict=True)
                rows = [(self._key(t), np.ascontiguousarray(r).tobytes()) for t, r in pairs]
                await anyio.to_thread.run_sync(self._write, rows)
                progress.update(len(texts_now))
        return len(missing)

    def close(self) -> None:
        with self._lock:
            self._db.close()


class RecordingEmbedder:
    """Stands in for the model during a dry run: records every text asked for and answers with hashing vectors
    (which texts a run embeds does not depend on the vectors' values), under the real model's id and dim."""

    def __init__(self, like: Embedder) -> None:
        self.dim = like.dim
        self.model_id = like.model_id
        self._vectors = HashingEmbedder(self.dim)
        self.texts: list[str] = []

    async def embed(self, texts: Sequence[str]) -> Matrix:
        self.texts.extend(texts)
        return await self._vectors.embed(texts)


async def warm_cache(cache: DiskCachedEmbedder, dry_run: Callable[[Embedder], Awaitable[object]]) -> int:
    """Run ``dry_run`` with a recording embedder, then embed what it asked for in one sorted pass."""
    recorder = RecordingEmbedder(cache)
    await dry_run(recorder)
    return await cache.prefill(recorder.texts)
