"""``@mem.tool_cache.cached(...)``: an async tool function whose calls go through the cache."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from memkit._repr import short_repr
from memkit._validation import check_decode_type
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
    cached result is decoded as the function's return annotation (a Struct comes back a Struct). The tool's
    name defaults to the function's module and qualified name; a method's ``self``/``cls`` is not in the key
    (instances whose results differ need their own ``namespace`` or ``version``)."""
    if not inspect.iscoroutinefunction(fn):
        raise ValidationError(f"@cached takes an async function; {short_repr(getattr(fn, '__name__', fn))} is not one")
    unknown = set(options) - _OPTIONS
    if unknown:
        raise ValidationError(f"@cached takes {sorted(_OPTIONS)}, not {sorted(unknown)}")
    if tool is None and "<locals>" in fn.__qualname__:
        # Two closures of one factory share a qualified name but not their results.
        raise ValidationError(f"@cached on {fn.__qualname__!r}, a function defined inside another: name it, "
                              "@cached(tool='...'), so that two such functions never share results")  # fmt: skip
    name = tool or f"{fn.__module__}.{fn.__qualname__}"
    signature = inspect.signature(fn)
    first = next(iter(signature.parameters), None)
    skip_self = first in ("self", "cls")  # a method's object is not an argument of the call
    try:
        returns = check_decode_type(typing.get_type_hints(fn).get("return", Any))
    except Exception:  # an annotation unresolvable here, or not one msgspec decodes: results come back as builtins
        returns = Any

    @functools.wraps(fn)
    async def cached_call(*args: Any, **kwargs: Any) -> T:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        if skip_self:
            arguments.pop(first, None)  # type: ignore[arg-type]
        return await cache.call(name, arguments, lambda: fn(*args, **kwargs), type=returns, **options)

    return cached_call
