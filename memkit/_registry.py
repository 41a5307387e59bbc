"""URL scheme -> backend class, imported lazily.

Like fsspec's ``known_implementations``: a sorted table of import targets,
each with the extra to install when its import fails, plus the entry-point
group ``memkit.backends`` for third-party backends (``scheme = "pkg.mod:Class"``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Final

from memkit._install import install_hint
from memkit._url import StorageURL
from memkit.backend import Backend
from memkit.errors import ConfigurationError, MissingDependencyError, UnknownSchemeError

__all__ = ["ENTRY_POINT_GROUP", "KNOWN_BACKENDS", "BackendSpec", "backend_class", "known_schemes", "open_backend"]

ENTRY_POINT_GROUP: Final = "memkit.backends"


@dataclass(frozen=True, slots=True)
class BackendSpec:
    target: str
    """``module:Class``"""
    extra: str | None = None
    """The memkit extra that installs the driver, or None for built-in backends."""


KNOWN_BACKENDS: Final[dict[str, BackendSpec]] = {
    "memory": BackendSpec("memkit_backends.memory:MemoryBackend"),
    "pinecone": BackendSpec("memkit_backends.pinecone:PineconeBackend", "pinecone"),
    "postgres": BackendSpec("memkit_backends.postgres:PostgresBackend", "postgres"),
    "postgresql": BackendSpec("memkit_backends.postgres:PostgresBackend", "postgres"),
    "redis": BackendSpec("memkit_backends.redis:RedisBackend", "redis"),
    "rediss": BackendSpec("memkit_backends.redis:RedisBackend", "redis"),
    "sqlite": BackendSpec("memkit_backends.sqlite:SQLiteBackend"),
    "weaviate": BackendSpec("memkit_backends.weaviate:WeaviateBackend", "weaviate"),
    "weaviates": BackendSpec("memkit_backends.weaviate:WeaviateBackend", "weaviate"),
}


def _entry_point_specs() -> dict[str, BackendSpec]:
    return {ep.name: BackendSpec(ep.value) for ep in entry_points(group=ENTRY_POINT_GROUP)}


def known_schemes() -> list[str]:
    return sorted({*KNOWN_BACKENDS, *_entry_point_specs()})


def backend_class(scheme: str) -> type[Backend]:
    spec = KNOWN_BACKENDS.get(scheme) or _entry_point_specs().get(scheme)
    if spec is None:
        raise UnknownSchemeError(f"no backend for scheme {scheme!r}; known schemes: {', '.join(known_schemes())}")
    module_name, _, class_name = spec.target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        missing = exc.name or module_name
        if missing == module_name:
            raise ConfigurationError(
                f"the {scheme}:// backend is registered but its adapter {module_name!r} is not in this install"
            ) from exc
        hint = install_hint(spec.extra) if spec.extra else f"pip install {missing}"
        raise MissingDependencyError(
            f"the {scheme}:// backend needs {missing!r}, which is not installed; run: {hint}"
        ) from exc
    cls = getattr(module, class_name)
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise UnknownSchemeError(f"{spec.target} is not a memkit Backend")
    return cls


def open_backend(url: str | StorageURL) -> Backend:
    """Build (not yet connect) the backend for ``url``; use it as ``async with``."""
    parsed = StorageURL(url)
    return backend_class(parsed.scheme)(parsed)
