"""Cache keys from tool calls: the same call gives the same key in every process, and nothing else does.

The arguments are put in a canonical form first, then written as MessagePack with sorted keys: msgspec's
builtins (Structs and dataclasses as their fields), bytes and datetimes as themselves (never equal to a
string), a float with an integer value written as that integer (``1.0`` and ``1`` are one call, as JSON
says), ``-0.0`` as ``0``. A UUID, a Decimal or an Enum is its string or value, as msgspec encodes it.
What has no canonical form (NaN or infinities, a dict with non-string keys, an object msgspec cannot
encode) is a ``ValidationError``, never a key that misses forever.
"""

from __future__ import annotations

import datetime
import hashlib
import math
from typing import Any

import msgspec

from memkit.errors import ValidationError
from memkit.layers._keys import key_of

__all__ = ["canonical_arguments", "entry_key", "namespace_prefix", "tool_prefix"]

_encode_sorted = msgspec.msgpack.Encoder(order="sorted").encode
# Kept as themselves, not turned into strings: so bytes never equal their base64 text, nor a datetime its
# ISO text (MessagePack has a type for each).
_KEEP = (bytes, bytearray, memoryview, datetime.datetime)
_EXACT = 2**53
"""Integral floats at most this large are written as integers; beyond it a float is not exact anyway."""


def _normal(value: Any, path: str) -> Any:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationError(f"{path} is {value!r}: a tool argument must be finite to be a cache key")
        return int(value) if value.is_integer() and abs(value) <= _EXACT else value
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise ValidationError(f"{path} has a key {key!r} that is not a string: it has no canonical form")
        return {key: _normal(item, f"{path}[{key!r}]") for key, item in value.items()}
    if isinstance(value, list):
        return [_normal(item, f"{path}[{at}]") for at, item in enumerate(value)]
    return value


def canonical_arguments(tool: str, arguments: object) -> bytes:
    """The arguments in canonical form (raises ``ValidationError`` when they have none)."""
    try:
        plain = msgspec.to_builtins(arguments, builtin_types=_KEEP, order="sorted")
        return _encode_sorted(_normal(plain, "the arguments"))
    except ValidationError as exc:
        raise ValidationError(f"tool {tool!r}: {exc}") from exc
    except (TypeError, ValueError, OverflowError, RecursionError, msgspec.EncodeError) as exc:
        raise ValidationError(
            f"the arguments of tool {tool!r} cannot be a cache key ({type(exc).__name__}: {exc}); pass values "
            "msgspec encodes (str, numbers, bools, None, lists, dicts with string keys, Structs, dataclasses)"
        ) from exc


def namespace_prefix(namespace: str) -> str:
    return key_of(namespace) + "|"


def tool_prefix(namespace: str, tool: str) -> str:
    """Every entry of ``tool`` in ``namespace``, all versions: what invalidating a tool deletes."""
    return key_of(namespace, tool) + "|"


def entry_key(namespace: str, tool: str, version: str, canonical: bytes) -> str:
    digest = hashlib.blake2b(canonical, digest_size=20).hexdigest()
    return tool_prefix(namespace, tool) + key_of(version, digest)
