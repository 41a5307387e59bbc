"""``@mem.tool_cache.cached(...)``: an async tool function whose calls go through the cache."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from memkit.errors import ValidationError

if TYPE_CHECKING:
    from memkit.layers.toolcache._cache import ToolCache

__all__ = ["cache_function"]

T = TypeVar("T")
_OPTIONS = frozenset({"version", "ttl_s", "namespace"})


def cache_function(
    cache: ToolCache, fn: Callable[..., Awaitable[T]], tool: str | None, options: dict[str, Any]
) -> Callable[..., Awaitable[T]]:
    """The wrapper: the call's arguments (bound to the signature, defaults filled in) are the key, and a
    cached result is decoded as the function's return annotation (a Struct comes back a Struct)."""
    if not inspect.iscoroutinefunction(fn):
        raise ValidationError(f"@cached takes an async function; {getattr(fn, '__name__', fn)!r} is not one")
    unknown = set(options) - _OPTIONS
    if unknown:
        raise ValidationError(f"@cached takes {sorted(_OPTIONS)}, not {sorted(unknown)}")
    name = tool or fn.__qualname__
    signature = inspect.signature(fn)
    try:
        returns = typing.get_type_hints(fn).get("return", Any)
    except Exception:  # an annotation that cannot be resolved here: results come back as builtins
        returns = Any

    @functools.wraps(fn)
    async def cached_call(*args: Any, **kwargs: Any) -> T:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return await cache.call(name, dict(bound.arguments), lambda: fn(*args, **kwargs), type=returns, **options)

    return cached_call
