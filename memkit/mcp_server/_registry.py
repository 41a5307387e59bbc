"""The tool registry: each tool is one async function ``fn(app, **arguments)``, registered with ``@tool``.

A tool names the ``Memkit`` layer it uses; a store whose backend cannot serve that layer (or a memkit
without it) simply has no such tool. Adding a tool for a new layer is one decorated function in
``_tools.py``. The server binds each to its ``App`` and hands it to the SDK, which derives the JSON schema
from the parameters' annotations (``Annotated[..., Field(description=...)]``) and validates calls
against it; memkit's own errors become tool errors carrying memkit's message.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memkit.errors import ConfigurationError, MemkitError, NotFoundError

if TYPE_CHECKING:
    from memkit._client import Memkit
    from memkit.mcp_server._scoping import Scoping

__all__ = ["REGISTRY", "App", "ToolSpec", "bind", "error_text", "served", "tool"]


@dataclass(frozen=True)
class App:
    """What every tool works with: the open client and the scoping rule."""

    mem: Memkit
    scoping: Scoping


@dataclass(frozen=True)
class ToolSpec:
    fn: Callable[..., Awaitable[Any]]
    title: str
    layer: str
    read_only: bool
    destructive: bool
    idempotent: bool

    @property
    def name(self) -> str:
        return self.fn.__name__


REGISTRY: list[ToolSpec] = []


def tool(
    *, title: str, layer: str, read_only: bool = False, destructive: bool = False, idempotent: bool = False
) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:
    def register(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        REGISTRY.append(ToolSpec(fn, title, layer, read_only, destructive, idempotent))
        return fn

    return register


def served(mem: Memkit, layer: str) -> bool:
    """Whether the client has this layer and its backend can serve it."""
    try:
        getattr(mem, layer)
    except (AttributeError, ConfigurationError):
        return False
    return True


def error_text(exc: MemkitError) -> str:
    """The memkit message, named by its error class (``NotFoundError`` is a ``KeyError``: no quotes)."""
    message = exc.args[0] if isinstance(exc, NotFoundError) and exc.args else str(exc)
    return f"{type(exc).__name__}: {message}"


def bind(spec: ToolSpec, app: App) -> Callable[..., Awaitable[Any]]:
    """``spec.fn`` with ``app`` bound: the SDK sees the tool's own parameters only."""
    from mcp.server.mcpserver.exceptions import ToolError

    async def call(**arguments: Any) -> Any:
        try:
            return await spec.fn(app, **arguments)
        except MemkitError as exc:  # an expected failure: the model reads memkit's message and can correct it
            raise ToolError(error_text(exc)) from exc

    signature = inspect.signature(spec.fn, eval_str=True)
    parameters = list(signature.parameters.values())[1:]
    call.__name__ = spec.name
    call.__doc__ = inspect.getdoc(spec.fn)
    call.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    call.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": signature.return_annotation}
    return call
