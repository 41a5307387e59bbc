"""Input checks shared by the layers: each raises a specific error before anything is written."""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Mapping
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, TypeGuard

import msgspec

from memkit._encodable import encodable
from memkit._repr import short_repr
from memkit.backend import FilterValue, Scope, check_filters
from memkit.errors import ContentError, ImportanceError, ScopeError, ValidationError

__all__ = [
    "MAX_ID_CHARS",
    "check_content",
    "check_flag",
    "check_importance",
    "check_int",
    "check_kind",
    "check_kinds",
    "check_metadata",
    "check_metadata_filter",
    "check_moment",
    "check_number",
    "check_text",
    "encodable",
    "check_ttl",
    "require_scope",
]

MAX_ID_CHARS = 512
"""Longest user, agent, session or thread id (Postgres indexes scope ids, whose rows are limited to ~2.7 KB)."""

_json_encode = msgspec.json.encode


def check_content(content: object, max_chars: int, what: str = "content") -> str:
    if not _plain_text(content):
        raise ContentError(f"{what} must be a string, got {type(content).__name__}{_as_str_hint(content)}")
    if not content.strip():
        raise ContentError(f"{what} is empty")
    if len(content) > max_chars:
        raise ContentError(f"{what} has {len(content)} characters; the limit is {max_chars} (max_content_chars)")
    if "\x00" in content:
        raise ContentError(f"{what} contains a NUL character")
    if not encodable(content):
        raise ContentError(f"{what} contains a lone surrogate (text that is not valid Unicode)")
    return content


def _plain_text(value: object) -> TypeGuard[str]:
    """A ``str``, or a member of a ``str`` Enum: what every backend's encoder writes as text. Other ``str``
    subclasses were accepted, then refused by the encoder with a TypeError (or lost in a background write)."""
    return type(value) is str or (isinstance(value, str) and isinstance(value, Enum))


def _as_str_hint(value: object) -> str:
    """For a ``str`` subclass (``numpy.str_`` from an array, say): what to do about it."""
    return "; pass str(value) (a str subclass other than a str Enum member is not stored)" if isinstance(
        value, str) else ""  # fmt: skip


def check_importance(importance: object) -> float:
    value = _real(importance)
    if value is None or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ImportanceError(f"importance must be a number in 0..1, got {_short(importance)}")
    return value or 0.0  # -0.0 -> 0.0: one value on every backend (and the caller's float kept, not a copy a record)


def _real(value: object) -> float | None:
    """``value`` as a float when it is an int or float (not a bool); None otherwise, or when an int is too
    large for a float (``float(10**400)`` raises OverflowError)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


_short = short_repr


def check_number(value: object, what: str, *, minimum: float | None = None, allow_inf: bool = False) -> float:
    """A finite int or float (``allow_inf``: infinities too), not a bool, at least ``minimum`` when given."""
    number = _real(value)
    if number is None or math.isnan(number) or (math.isinf(number) and not allow_inf):
        raise ValidationError(f"{what} must be a {'' if allow_inf else 'finite '}number, got {_short(value)}")
    if minimum is not None and number < minimum:
        raise ValidationError(f"{what} must be >= {minimum}, got {_short(value)}")
    return number


def check_int(value: object, what: str, low: int, high: int) -> int:
    """An integer (or an int-like such as numpy's, via ``__index__``; never a bool or a float) in low..high."""
    if isinstance(value, bool):
        raise ValidationError(f"{what} must be an integer in {low}..{high}, got {value}")
    try:
        number = operator.index(value)  # type: ignore[arg-type]  # a TypeError is the answer
    except TypeError:
        raise ValidationError(f"{what} must be an integer in {low}..{high}, got {_short(value)}") from None
    if not low <= number <= high:
        raise ValidationError(f"{what} must be an integer in {low}..{high}, got {_short(value)}")
    return number


def check_flag(value: object, what: str) -> bool:
    """Exactly True or False: ``all_scopes="False"`` must not read every user's memories."""
    if not isinstance(value, bool):
        raise ValidationError(f"{what} must be True or False, got {_short(value)}")
    return value


def check_moment(value: object, what: str) -> datetime:
    """An aware datetime (its ``utcoffset()`` known) that converts to Unix seconds."""
    if not isinstance(value, datetime):
        raise ValidationError(f"{what} must be an aware datetime, got {type(value).__name__} {_short(value)}")
    if value.utcoffset() is None:
        raise ValidationError(f"{what} {_short(value)} has no timezone; use an aware datetime (e.g. UTC)")
    try:
        value.timestamp()
    except (OverflowError, ValueError) as exc:
        raise ValidationError(f"{what} {_short(value)} cannot be stored: {exc}") from None
    return value


_EXPIRY_MARGIN = timedelta(days=1)
"""Room for the clock to move between this check and the write that computes the expiry again."""


def check_ttl(ttl: object, start: datetime) -> timedelta | None:
    """A positive ``timedelta`` or number of seconds whose expiry (``start + ttl``) a datetime can hold."""
    if ttl is None:
        return None
    if isinstance(ttl, timedelta):
        delta = ttl
    else:
        seconds = _real(ttl)
        if seconds is None or not math.isfinite(seconds):
            raise ValidationError(f"ttl must be a timedelta or a finite number of seconds, got {_short(ttl)}")
        try:
            delta = timedelta(seconds=seconds)
        except OverflowError:
            delta = timedelta.max
    if delta <= timedelta(0):
        raise ValidationError(f"ttl must be positive, got {_short(ttl)}")
    try:
        start + delta + _EXPIRY_MARGIN
    except OverflowError:
        raise ValidationError(f"ttl {_short(ttl)} ends after the year 9999; pass ttl=None for no expiry") from None
    return delta


MAX_METADATA_BYTES = 64 * 1024
"""Largest metadata, as JSON: it is stored with every memory and returned with every hit."""
_MAX_DEPTH = 16


def check_metadata(metadata: object, what: str = "metadata") -> dict[str, Any]:
    """JSON-like metadata: string keys, finite numbers, valid text without NUL, at most 16 levels deep and
    64 KiB as JSON. One rule on every backend (NaN stored on SQLite once made the file unreadable). ``what``:
    the argument's name in errors (a graph's ``attributes``)."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise ValidationError(f"{what} must be a dict, got {type(metadata).__name__}")
    _check_value(metadata, what, 0)
    try:
        size = len(_json_encode(metadata))
    except (TypeError, msgspec.EncodeError) as exc:
        raise ValidationError(f"{what} must be JSON-serialisable: {exc}") from exc
    if size > MAX_METADATA_BYTES:
        raise ValidationError(f"{what} is {size} bytes as JSON; the limit is {MAX_METADATA_BYTES}")
    return dict(metadata)


def _check_value(value: object, path: str, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise ValidationError(f"{path} is nested more than {_MAX_DEPTH} levels deep")
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ValidationError(f"{path} is {value}; numbers must be finite")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
        raise ValidationError(f"{path} is an integer too large to store (limit 2**63)")
    if isinstance(value, str):
        if "\x00" in value or not encodable(value):
            raise ValidationError(f"{path} holds text with a NUL character or a lone surrogate")
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or "\x00" in key or not encodable(key):
                raise ValidationError(f"{path} has a key that is not valid text: {_short(key)}")
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
    user_id, agent_id, session_id = (None if value is None else check_text(value, name, MAX_ID_CHARS, error=ScopeError)
                                     for name, value in (("user_id", user_id), ("agent_id", agent_id),
                                                         ("session_id", session_id)))  # fmt: skip
    if user_id is None and agent_id is None and not all_scopes:
        raise ScopeError("pass user_id= or agent_id= (or all_scopes=True to search every scope on purpose)")
    return _shared_scope(user_id, agent_id, session_id)


@functools.lru_cache(maxsize=8192)
def _shared_scope(user_id: str | None, agent_id: str | None, session_id: str | None) -> Scope:
    """One ``Scope`` (frozen) per user, agent and session: the records of memory:// hold their memory's
    scope, and one each (with its own copy of the user id) was ~95 bytes per record, 9 MB at 100k."""
    return Scope(user_id=user_id, agent_id=agent_id, session_id=session_id)


def check_owner(user_id: object, agent_id: object) -> tuple[str | None, str | None]:
    """The user and agent ids of a layer's keyed state, checked like scope ids and returned as plain text:
    keys are built from what this returns (a str Enum member as its value, as the encoders write it, so
    ``forget_user`` finds every layer's state)."""
    return (None if user_id is None else check_text(user_id, "user_id", MAX_ID_CHARS, error=ScopeError),
            None if agent_id is None else check_text(agent_id, "agent_id", MAX_ID_CHARS, error=ScopeError))  # fmt: skip


def read_scope(
    user_id: str | None,
    agent_id: str | None,
    session_id: str | None,
    *,
    all_scopes: bool = False,
    empty_ok: bool = True,
) -> Scope:
    """The scope of a call that reads or deletes stored memories. Without a user id, an agent id matches
    what every user stored with that agent: reading across users takes ``all_scopes=True``, never an
    omission. ``empty_ok=False``: ``all_scopes`` widens an agent's scope but never allows no id at all
    (calls that name or delete memories)."""
    scope = require_scope(user_id, agent_id, session_id, all_scopes=all_scopes and empty_ok)
    if user_id is None and agent_id is not None and not all_scopes:
        raise ScopeError(
            f"agent_id={_short(agent_id)} without user_id matches the memories of every user this agent served; "
            "pass user_id= for one user's, or all_scopes=True to read across users on purpose"
        )
    return scope


def check_text(
    value: object,
    what: str,
    max_chars: int = MAX_ID_CHARS,
    *,
    error: type[ValidationError | ScopeError] = ValidationError,
) -> str:
    """A short non-empty string without NUL (ids, kinds, sources, thread names): one rule on every backend."""
    if not _plain_text(value) or not value:
        raise error(f"{what} must be a non-empty string, got {type(value).__name__} {_short(value)}"
                    f"{_as_str_hint(value)}")  # fmt: skip
    if len(value) > max_chars:
        raise error(f"{what} has {len(value)} characters; the limit is {max_chars}")
    if "\x00" in value:
        raise error(f"{what} {_short(value)} contains a NUL character")
    if not encodable(value):
        raise error(f"{what} {_short(value)} contains a lone surrogate (text that is not valid Unicode)")
    # A str Enum member as its plain text: f-strings and str() spell it "User.BOB", so keys built from it
    # differed from what the encoders wrote ("bob"), and forget_user("bob") missed them.
    return value if type(value) is str else str.__str__(value)


RESERVED_KINDS = frozenset({"turn"})
"""Kinds only the layer writes: a "turn" is numbered in a thread, and forgetting one edits its neighbours."""


def check_kind(kind: object) -> str:
    text = check_text(kind, "kind")
    if text in RESERVED_KINDS:
        raise ValidationError(f"kind {text!r} is reserved for conversation turns; use add_turns()")
    return text


def check_kinds(kinds: object) -> list[str] | None:
    """A kinds filter: one kind, or a list, tuple or set of kinds (any of them); None means every kind."""
    if kinds is None:
        return None
    if isinstance(kinds, str):
        return [check_text(kinds, "kinds")]
    if not isinstance(kinds, list | tuple | set | frozenset):
        raise ValidationError(f"kinds must be a kind or a list of kinds, got {type(kinds).__name__}")
    wanted = [check_text(kind, "kinds") for kind in kinds]
    return sorted(wanted) if isinstance(kinds, set | frozenset) else wanted


def check_metadata_filter(metadata: object) -> dict[str, FilterValue] | None:
    """A metadata filter: field name -> wanted value (a string, number or boolean) or a list of them (any of
    them). A dict, None or a nested list is refused on every backend: no store has a way to match it."""
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise ValidationError(f"metadata filter must be a dict of field -> value, got {type(metadata).__name__}")
    check_filters(metadata, "metadata filter")
    return dict(metadata)


def check_decode_type(as_type: object) -> Any:
    """``type=`` as msgspec takes it (a Struct, dataclass, builtin, generic...), checked before the store is
    touched: msgspec's TypeError for ``type=5`` came after a tool had run and its result had been cached."""
    if as_type is Any:
        return as_type
    try:
        msgspec.msgpack.Decoder(as_type)
    except (TypeError, ValueError, NameError, RecursionError):  # its message quotes the value whole: not shown
        raise ValidationError(
            f"type must be a type msgspec can decode to (a Struct, dataclass, int, list[str]...), got "
            f"{type(as_type).__name__} {short_repr(as_type)}"
        ) from None
    return as_type
