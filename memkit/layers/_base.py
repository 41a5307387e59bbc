"""What a memory layer is, as far as the client is concerned."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from memkit.backend import Backend, Capabilities

__all__ = ["Layer", "missing_capabilities"]


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
