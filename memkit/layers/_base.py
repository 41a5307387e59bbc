"""What a memory layer is, as far as the client is concerned."""

from __future__ import annotations

from typing import Final, Protocol, runtime_checkable

from memkit.backend import Backend, Capabilities

__all__ = ["Layer", "describe_missing", "missing_capabilities"]


@runtime_checkable
class Layer(Protocol):
    """A memory layer: written once over the backend contract, set up and closed by ``Memkit``."""

    name: str
    """The layer's name in configuration and in error messages (``"long_term"``)."""
    needs: frozenset[str]
    """``Capabilities`` flags the layer cannot work without; checked against the backend at open."""
    backend: Backend

    async def setup(self) -> None:
        """Create the layer's collections and check what is stored there fits (idempotent)."""
        ...

    async def aclose(self) -> None:
        """Drain the layer's background work."""
        ...


def missing_capabilities(needs: frozenset[str], capabilities: Capabilities) -> list[str]:
    return sorted(name for name in needs if not getattr(capabilities, name))


_MEANING: Final = {
    "records": "a record store",
    "kv": "a key-value face (memory://, sqlite://, redis://, postgresql:// have one; pinecone://, weaviate:// do not)",
    "vector_search": "vector search",
    "text_search": "text search",
    "filtered_scan": "scans by fields without a vector",
    "atomic_replace": "compare-and-set across clients",
    "ttl": "expiring keys",
    "persistent": "storage that outlives the process",
}


def describe_missing(missing: list[str]) -> str:
    """The capabilities a layer lacks, said as what they are (``kv`` alone tells a user little)."""
    return "; ".join(f"{name} ({_MEANING.get(name, name)})" for name in missing)
