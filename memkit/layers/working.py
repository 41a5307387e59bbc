"""Working memory: the current task's state, key -> value, shared by every worker on the task.

Each key is an entry of its own in the backend's key-value face (not one blob per task), so two workers
setting different keys never conflict, a key's TTL is the store's own expiry, and ``update`` changes one
key by compare-and-set (two workers appending to one list both land). Values are anything msgspec
encodes (str, numbers, lists, dicts, Structs, datetimes...), stored as MessagePack.

``to_context(max_tokens=...)`` renders the state for a prompt: most important first, newest first among
equals, as many entries as fit, and a line saying how many did not.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import msgspec

from memkit._repr import short_repr
from memkit._time import new_id
from memkit._validation import MAX_ID_CHARS, check_decode_type, check_importance, check_number, check_owner, check_text
from memkit.backend import Backend
from memkit.errors import CorruptDataError, ScopeError, ValidationError
from memkit.layers._cas import update_kv
from memkit.layers._keys import key_of
from memkit.tokens import MESSAGE_OVERHEAD, EstimateTokenizer, Tokenizer

__all__ = ["TaskState", "WorkingItem", "WorkingMemory"]

T = TypeVar("T")
NAMESPACE = "memkit.working"
MAX_VALUE_BYTES = 1 << 20
_MISSING: Any = object()
_HEADER = "Current task state:"


class WorkingItem(msgspec.Struct, frozen=True, kw_only=True):
    key: str
    value: Any
    set_at: float
    """Unix seconds of the last write."""
    importance: float = 0.5


class _Entry(msgspec.Struct, kw_only=True):
    value: msgspec.Raw
    set_at: float
    importance: float
    writer: str = ""
    """Unique per write, so two writers' equal values never both win one compare-and-set."""
    expires_at: float | None = None
    """When a ``ttl_s`` set it to expire (epoch seconds): ``update()`` keeps it (entries older than this field
    have none, and an update of one makes it permanent, as before)."""


_encode = msgspec.msgpack.Encoder().encode
_decode_entry = msgspec.msgpack.Decoder(_Entry).decode


def _pack(value: object, importance: float, set_at: float | None = None, ttl_s: float | None = None) -> bytes:
    try:
        raw = _encode(value)
    except (TypeError, msgspec.EncodeError, UnicodeEncodeError, OverflowError, RecursionError, ValueError) as exc:
        raise ValidationError(
            f"working memory stores values msgspec can encode; {type(value).__name__}: {exc}"
        ) from exc
    if len(raw) > MAX_VALUE_BYTES:
        raise ValidationError(f"the value is {len(raw)} bytes encoded; the limit is {MAX_VALUE_BYTES}")
    now = time.time()
    stamp = now if set_at is None else set_at
    expires_at = None if ttl_s is None else now + ttl_s
    return _encode(_Entry(value=msgspec.Raw(raw), set_at=stamp, importance=importance, writer=new_id(),
                          expires_at=expires_at))  # fmt: skip


class TaskState:
    """One task's state: ``task = mem.working.task("trip-42", user_id="ada")``."""

    def __init__(self, layer: WorkingMemory, prefix: str, label: str) -> None:
        self._layer = layer
        self._prefix = prefix
        self._label = label

    def _key(self, key: str) -> str:
        return self._prefix + key_of(check_text(key, "key", MAX_ID_CHARS))

    def _entry(self, raw: bytes, key: str) -> _Entry:
        try:
            return _decode_entry(raw)
        except msgspec.DecodeError as exc:
            raise CorruptDataError(f"working-memory key {key!r} of task {self._label} cannot be read: {exc}") from exc

    async def set(self, key: str, value: object, *, importance: float = 0.5, ttl_s: float | None = None) -> None:
        """Set ``key`` (replacing its value); ``ttl_s`` makes it expire; ``importance`` orders ``to_context``."""
        ttl = _check_ttl(ttl_s)
        packed = _pack(value, check_importance(importance), ttl_s=ttl)
        await self._layer.backend.kv_set(NAMESPACE, self._key(key), packed, ttl)

    async def get(self, key: str, default: Any = None, *, type: type[T] | Any = Any) -> T | Any:
        """The value of ``key`` (decoded as ``type`` when given: a Struct, a dataclass...), else ``default``."""
        check_decode_type(type)
        raw = await self._layer.backend.kv_get(NAMESPACE, self._key(key))
        if raw is None:
            return default
        return self._value(self._entry(raw, key), key, type)

    def _value(self, entry: _Entry, key: str, as_type: Any = Any) -> Any:
        try:
            return msgspec.msgpack.decode(entry.value, type=as_type)
        except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
            raise ValidationError(f"working-memory key {key!r} does not hold a {short_repr(as_type)}: {exc}") from exc

    async def update(
        self, key: str, change: Callable[[Any], object], *, importance: float | None = None,
        ttl_s: float | None = None,
    ) -> Any:  # fmt: skip
        """Set ``key`` to ``change(current value or None)`` atomically, against any other writer; returns it.
        The key keeps its importance and expiry unless ``importance`` / ``ttl_s`` are given (a new key: 0.5,
        no expiry); they were reset to 0.5 and none, so a renewed lease never expired."""
        if not callable(change):  # else the TypeError came from inside the compare-and-set loop
            raise ValidationError(f"change must be a function of the current value, got {type(change).__name__}")
        given = None if importance is None else check_importance(importance)
        ttl = _check_ttl(ttl_s)

        def ttl_of(raw: bytes | None) -> float | None:  # the given TTL, else what is left of the key's
            return ttl if ttl is not None or raw is None else _left(self._entry(raw, key).expires_at)

        def apply(raw: bytes | None) -> tuple[bytes, Any]:
            entry = None if raw is None else self._entry(raw, key)
            new = change(None if entry is None else self._value(entry, key))
            weight = given if given is not None else 0.5 if entry is None else entry.importance
            return _pack(new, weight, ttl_s=ttl_of(raw)), new

        return await update_kv(self._layer.backend, NAMESPACE, self._key(key), apply, ttl_of=ttl_of)

    async def delete(self, key: str) -> bool:
        return await self._layer.backend.kv_delete(NAMESPACE, self._key(key))

    async def items(self) -> list[WorkingItem]:
        """Every live entry, most important first, newest first among equals."""
        found: list[WorkingItem] = []
        cursor: str | None = None
        while True:
            page = await self._layer.backend.kv_scan(NAMESPACE, prefix=self._prefix, limit=500, cursor=cursor)
            for full_key, raw in page.items:
                (key,) = _parse_item_key(full_key[len(self._prefix) :])
                entry = self._entry(raw, key)
                value = self._value(entry, key)
                found.append(WorkingItem(key=key, value=value, set_at=entry.set_at, importance=entry.importance))
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        return sorted(found, key=lambda item: (-item.importance, -item.set_at, item.key))

    async def to_context(self, max_tokens: int = 500) -> str:
        """The state as a prompt block within ``max_tokens`` (counted with the layer's tokenizer)."""
        check_number(max_tokens, "max_tokens", minimum=1)
        return render(await self.items(), int(max_tokens), self._layer.tokenizer)

    async def snapshot(self) -> list[WorkingItem]:
        """Every entry as msgspec values (for a checkpoint); ``restore`` puts them back."""
        return await self.items()

    async def restore(self, items: Sequence[WorkingItem]) -> None:
        """Make the task hold exactly ``items`` (their set times and importances kept; they do not expire).
        Every item is checked and encoded before anything is deleted."""
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):  # None, 5: TypeError
            raise ValidationError(f"restore takes a list of WorkingItems, got {type(items).__name__}")
        packed = []
        for item in items:
            if not isinstance(item, WorkingItem):
                raise ValidationError(f"restore takes WorkingItems, got {type(item).__name__}")
            packed.append(
                (self._key(item.key), _pack(item.value, check_importance(item.importance), float(item.set_at)))
            )
        await self.clear()
        for key, value in packed:
            await self._layer.backend.kv_set(NAMESPACE, key, value)

    async def clear(self) -> int:
        """Forget the whole task (at its end); returns how many keys were deleted."""
        return await self._layer.backend.kv_delete_prefix(NAMESPACE, self._prefix)

    def __repr__(self) -> str:
        return f"TaskState({self._label})"


def _left(expires_at: float | None) -> float | None:
    """The TTL that keeps an entry's expiry (a moment at least: one due now is still written, then expires)."""
    return None if expires_at is None else max(expires_at - time.time(), 1e-3)


def _check_ttl(ttl_s: object) -> float | None:
    """None (keep) or a positive, finite number of seconds: 0 or less would lose the value at once."""
    if ttl_s is None:
        return None
    seconds = check_number(ttl_s, "ttl_s")
    if not 0 < seconds < 1e10:
        raise ValidationError(
            f"ttl_s must be a positive number of seconds (None keeps the value), got {short_repr(ttl_s)}"
        )
    return seconds


def _parse_item_key(text: str) -> tuple[str]:
    from memkit.layers._keys import parse_key

    parts = parse_key(text)
    if len(parts) != 1 or parts[0] is None:
        raise CorruptDataError(f"not a working-memory key: {text!r}")
    return (parts[0],)


def _line(item: WorkingItem) -> str:
    value = item.value if isinstance(item.value, str) else msgspec.json.encode(item.value).decode()
    return f"- {item.key}: {value}"


def render(items: list[WorkingItem], max_tokens: int, tokenizer: Tokenizer) -> str:
    if not items:
        return ""
    room = max_tokens - tokenizer.count(_HEADER) - MESSAGE_OVERHEAD
    room -= tokenizer.count(f"\n({len(items)} more entries not shown)")  # held back for the marker
    lines: list[str] = []
    for item in items:
        if room < 2:  # no line fits in less
            break
        line = _line(item)
        size = tokenizer.count(line) + 1
        if size > room:
            continue  # a smaller entry further down may still fit (an entry too big hid every other)
        lines.append(line)
        room -= size
    left = len(items) - len(lines)
    if not lines:
        return ""  # not even one entry fits: a header and a count would only spend the caller's budget
    return "\n".join([_HEADER, *lines] + ([f"({left} more entries not shown)"] if left else []))


class WorkingMemory:
    """``mem.working.task(task_id, user_id=..., agent_id=...)`` gives a ``TaskState``."""

    name = "working"
    needs = frozenset({"kv"})

    def __init__(self, backend: Backend, tokenizer: Tokenizer | Callable[[], Tokenizer] | None = None) -> None:
        """``tokenizer``: what ``to_context`` counts with, or a function giving it (the client passes the
        short-term layer's, which is only final once that layer is set up); default the estimate."""
        self.backend = backend
        self._tokenizer = tokenizer or EstimateTokenizer()

    @property
    def tokenizer(self) -> Tokenizer:
        return self._tokenizer if isinstance(self._tokenizer, Tokenizer) else self._tokenizer()

    async def setup(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    def task(self, task_id: str, *, user_id: str | None = None, agent_id: str | None = None) -> TaskState:
        task_id = check_text(task_id, "task_id", MAX_ID_CHARS, error=ScopeError)
        user_id, agent_id = check_owner(user_id, agent_id)
        label = " ".join(
            [repr(task_id)] + [f"{k}={v!r}" for k, v in (("user_id", user_id), ("agent_id", agent_id)) if v]
        )
        return TaskState(self, key_of(user_id, agent_id, task_id) + "||", label)
