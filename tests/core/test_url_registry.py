from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from memkit import (
    ConfigurationError,
    InvalidURLError,
    MissingDependencyError,
    StorageURL,
    UnknownSchemeError,
    open_backend,
)
from memkit._registry import KNOWN_BACKENDS, BackendSpec, known_schemes


def test_password_never_shown() -> None:
    url = StorageURL("postgresql://agent:s3cr3t@db.internal:5432/memories?pool=4")
    assert "s3cr3t" not in repr(url) and "s3cr3t" not in str(url)
    assert url.password == "s3cr3t" and url.host == "db.internal" and url.port == 5432
    assert url.database == "memories" and url.options == {"pool": "4"}
    assert "agent:***@db.internal:5432" in str(url)


def test_sqlite_paths() -> None:
    assert StorageURL("sqlite:///rel/path.db").file_path == "rel/path.db"
    assert StorageURL("sqlite:////abs/path.db").file_path == "/abs/path.db"


@pytest.mark.parametrize("bad", ["", "memories.db", "://nothing", "redis://host:notaport"])
def test_invalid_urls(bad: str) -> None:
    with pytest.raises(InvalidURLError):
        open_backend(bad)


def test_invalid_url_error_masks_password() -> None:
    with pytest.raises(InvalidURLError) as info:
        open_backend("redis://user:hunter2@host:notaport")
    assert "hunter2" not in str(info.value)


def test_unknown_scheme_lists_known() -> None:
    with pytest.raises(UnknownSchemeError) as info:
        open_backend("mongodb://localhost")
    for scheme in ("memory", "sqlite", "redis", "postgresql", "pinecone", "weaviate"):
        assert scheme in str(info.value)


def test_known_schemes_table_is_sorted_and_complete() -> None:
    assert list(KNOWN_BACKENDS) == sorted(KNOWN_BACKENDS)
    assert {"memory", "sqlite", "redis", "rediss", "postgres", "postgresql", "pinecone", "weaviate"} <= set(
        known_schemes()
    )


def test_missing_extra_names_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KNOWN_BACKENDS, "fake", BackendSpec("tests._missing_driver_backend:FakeBackend", "fake"))
    with pytest.raises(MissingDependencyError) as info:
        open_backend("fake://x")
    assert "pip install 'memkit-sdk[fake]'" in str(info.value)  # memkit on PyPI is another project
    assert "surely_not_installed_driver" in str(info.value)


def test_registered_adapter_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KNOWN_BACKENDS, "ghost", BackendSpec("memkit_backends.ghost:GhostBackend", "ghost"))
    with pytest.raises(ConfigurationError, match="not in this install"):
        open_backend("ghost://x")


def test_import_memkit_is_light() -> None:
    heavy = ["numba", "redis", "asyncpg", "pinecone", "weaviate", "torch", "sentence_transformers", "httpx", "tiktoken"]
    code = f"import sys, memkit; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_store_without_a_remote_model_never_imports_httpx(tmp_path: Path) -> None:
    """httpx is for the OpenAI-compatible embedder and chat clients: opening a local store (what every CLI
    command and ``memkit import``'s checking process do) leaves it unloaded."""
    code = (
        "import sys, anyio, memkit, memkit.cli._reader\n"
        "async def main():\n"
        f"    async with memkit.Memkit('sqlite:///{tmp_path / 'x.db'}', embedder='hashing') as mem:\n"
        "        await mem.long_term.store('tea at five', user_id='ada')\n"
        "anyio.run(main)\n"
        "print('httpx' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
