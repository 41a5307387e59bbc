"""Input checks shared by the layers: each raises a specific error before anything is written."""

from __future__ import annotations

import math
from typing import Any

import msgspec

from memkit.backend import Scope
from memkit.errors import ContentError, ImportanceError, ScopeError, ValidationError

__all__ = ["check_content", "check_importance", "check_metadata", "require_scope"]

_json_encode = msgspec.json.encode


def check_content(content: object, max_chars: int, what: str = "content") -> str:
    if not isinstance(content, str):
        raise ContentError(f"{what} must be a string, got {type(content).__name__}")
    if not content.strip():
        raise ContentError(f"{what} is empty")
    if len(content) > max_chars:
        raise ContentError(f"{what} has {len(content)} characters; the limit is {max_chars} (max_content_chars)")
    return content


def check_importance(importance: object) -> float:
    if isinstance(importance, bool) or not isinstance(importance, int | float):
        raise ImportanceError(f"importance must be a number in 0..1, got {importance!r}")
    value = float(importance)
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ImportanceError(f"importance must be in 0..1, got {importance!r}")
    return value


def check_metadata(metadata: object) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict) or not all(isinstance(key, str) for key in metadata):
        raise ValidationError("metadata must be a dict with string keys")
    try:
        _json_encode(metadata)
    except (TypeError, msgspec.EncodeError) as exc:
        raise ValidationError(f"metadata must be JSON-serialisable: {exc}") from exc
    return dict(metadata)


def require_scope(
    user_id: str | None, agent_id: str | None, session_id: str | None, *, all_scopes: bool = False
) -> Scope:
    """A user or agent id is required unless the caller opted into ``all_scopes``."""
    for name, value in (("user_id", user_id), ("agent_id", agent_id), ("session_id", session_id)):
        if value is not None and (not isinstance(value, str) or not value):
            raise ScopeError(f"{name} must be a non-empty string, got {value!r}")
    if user_id is None and agent_id is None and not all_scopes:
        raise ScopeError("pass user_id= or agent_id= (or all_scopes=True to search every scope on purpose)")
    return Scope(user_id=user_id, agent_id=agent_id, session_id=session_id)
