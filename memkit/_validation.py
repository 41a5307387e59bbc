"""Input checks shared by the layers: each raises a specific error before anything is written."""

from __future__ import annotations

import math
from typing import Any

import msgspec

from memkit.backend import Scope
from memkit.errors import ContentError, ImportanceError, ScopeError, ValidationError

__all__ = ["MAX_ID_CHARS", "check_content", "check_importance", "check_metadata", "check_text", "require_scope"]

MAX_ID_CHARS = 512
"""Longest user, agent, session or thread id (Postgres indexes scope ids, whose rows are limited to ~2.7 KB)."""

_json_encode = msgspec.json.encode


def check_content(content: object, max_chars: int, what: str = "content") -> str:
    if not isinstance(content, str):
        raise ContentError(f"{what} must be a string, got {type(content).__name__}")
    if not content.strip():
        raise ContentError(f"{what} is empty")
    if len(content) > max_chars:
        raise ContentError(f"{what} has {len(content)} characters; the limit is {max_chars} (max_content_chars)")
    if "\x00" in content:
        raise ContentError(f"{what} contains a NUL character")
    if not _encodable(content):
        raise ContentError(f"{what} contains a lone surrogate (text that is not valid Unicode)")
    return content


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def check_importance(importance: object) -> float:
    if isinstance(importance, bool) or not isinstance(importance, int | float):
        raise ImportanceError(f"importance must be a number in 0..1, got {importance!r}")
    value = float(importance)
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ImportanceError(f"importance must be in 0..1, got {importance!r}")
    return value


MAX_METADATA_BYTES = 64 * 1024
"""Largest metadata, as JSON: it is stored with every memory and returned with every hit."""
_MAX_DEPTH = 16


def check_metadata(metadata: object) -> dict[str, Any]:
    """JSON-like metadata: string keys, finite numbers, valid text without NUL, at most 16 levels deep and
    64 KiB as JSON. One rule on every backend (NaN stored on SQLite once made the file unreadable)."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise ValidationError(f"metadata must be a dict, got {type(metadata).__name__}")
    _check_value(metadata, "metadata", 0)
    try:
        size = len(_json_encode(metadata))
    except (TypeError, msgspec.EncodeError) as exc:
        raise ValidationError(f"metadata must be JSON-serialisable: {exc}") from exc
    if size > MAX_METADATA_BYTES:
        raise ValidationError(f"metadata is {size} bytes as JSON; the limit is {MAX_METADATA_BYTES}")
    return dict(metadata)


def _check_value(value: object, path: str, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise ValidationError(f"{path} is nested more than {_MAX_DEPTH} levels deep")
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ValidationError(f"{path} is {value}; metadata numbers must be finite")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
        raise ValidationError(f"{path} is an integer too large to store (limit 2**63)")
    if isinstance(value, str):
        if "\x00" in value or not _encodable(value):
            raise ValidationError(f"{path} holds text with a NUL character or a lone surrogate")
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or "\x00" in key or not _encodable(key):
                raise ValidationError(f"{path} has a key that is not valid text: {key!r}")
            _check_value(item, f"{path}[{key!r}]", depth + 1)
    elif isinstance(value, list | tuple):
        for at, item in enumerate(value):
            _check_value(item, f"{path}[{at}]", depth + 1)
    elif not isinstance(value, int | float):
        raise ValidationError(f"{path} is a {type(value).__name__}; metadata holds JSON values only")


def require_scope(
    user_id: str | None, agent_id: str | None, session_id: str | None, *, all_scopes: bool = False
) -> Scope:
    """A user or agent id is required unless the caller opted into ``all_scopes``."""
    for name, value in (("user_id", user_id), ("agent_id", agent_id), ("session_id", session_id)):
        if value is not None:
            check_text(value, name, MAX_ID_CHARS, error=ScopeError)
    if user_id is None and agent_id is None and not all_scopes:
        raise ScopeError("pass user_id= or agent_id= (or all_scopes=True to search every scope on purpose)")
    return Scope(user_id=user_id, agent_id=agent_id, session_id=session_id)


def check_text(
    value: object,
    what: str,
    max_chars: int = MAX_ID_CHARS,
    *,
    error: type[ValidationError | ScopeError] = ValidationError,
) -> str:
    """A short non-empty string without NUL (ids, kinds, sources, thread names): one rule on every backend."""
    if not isinstance(value, str) or not value:
        raise error(f"{what} must be a non-empty string, got {value!r}")
    if len(value) > max_chars:
        raise error(f"{what} has {len(value)} characters; the limit is {max_chars}")
    if "\x00" in value:
        raise error(f"{what} {value!r} contains a NUL character")
    return value
