"""Scope, filters, expiry and scan positions as Weaviate filters: a small tree of data, never strings.

``Where`` is built here from memkit's query (``Cond`` leaves under ``And`` / ``Or``) and turned into the
client's ``Filter`` objects only at the edge (``to_weaviate``); no value is ever spliced into text, so
nothing needs escaping. What a leaf compares is a number, a boolean, a UUID or a hex digest:

- scope ids are compared as ``scope_digest`` (Weaviate trims ``field``-tokenized text, so raw ids could
  meet: ``"alice "`` and ``"alice"``);
- field values through one digest per (name, value) in the ``flt`` list, because the contract's equality is
  not Weaviate's: ``1.0`` equals ``1`` but ``True`` does not, a scalar ``"a"`` matches a tag ``"a"``, a
  field may be named ``$or`` or ``id``. ``contains any`` on a list matches when any element is among the
  wanted values: any-of for a list filter and for a tag field alike; an empty any-of matches nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple, TypeAlias

from memkit.backend import Fields, FieldValue, FilterValue, Scope

__all__ = [
    "NOTHING",
    "And",
    "Cond",
    "Or",
    "Where",
    "expired_where",
    "field_token",
    "field_tokens",
    "ids_where",
    "query_where",
    "scope_digest",
    "to_weaviate",
]

NOTHING: Final = "0" * 32
"""The token of an empty any-of filter: no digest is all zeros, so it matches nothing."""
OPERATORS: Final = ("eq", "gt", "gte", "lt", "lte", "any")


class Cond(NamedTuple):
    """One comparison: property ``prop`` (``"_id"``: the object UUID) ``op`` ``value``."""

    prop: str
    op: str
    value: Any


class And(NamedTuple):
    parts: tuple[Where, ...]


class Or(NamedTuple):
    parts: tuple[Where, ...]


Where: TypeAlias = Cond | And | Or


def scope_digest(key: str, value: str) -> str:
    """What ``u`` / ``a`` / ``s`` hold for a scope id: a digest of its exact UTF-8 bytes."""
    return hashlib.blake2b(value.encode(), digest_size=16, person=b"memkit.scope." + key.encode()).hexdigest()


def _canonical(value: FieldValue) -> FieldValue:
    """One value per class the contract calls equal: an integral float is the int it equals."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def field_token(name: str, value: FieldValue) -> str:
    """The digest a stored field value and a wanted filter value share exactly when the contract equates them
    (JSON keeps ``true``, ``1`` and ``"1"`` apart)."""
    text = json.dumps(["f", name, _canonical(value)], ensure_ascii=False)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def field_tokens(fields: Fields) -> list[str]:
    tokens = []
    for name, value in fields.items():
        values = value if isinstance(value, tuple | list) else (value,)
        tokens += [field_token(name, item) for item in values]
    return tokens


def scope_conditions(scope: Scope | None) -> list[Where]:
    if scope is None:
        return []
    pairs = (("u", scope.user_id), ("a", scope.agent_id), ("s", scope.session_id))
    return [Cond(key, "eq", scope_digest(key, value)) for key, value in pairs if value is not None]


def field_conditions(filters: Mapping[str, FilterValue] | None) -> list[Where]:
    conditions: list[Where] = []
    for name, wanted in (filters or {}).items():
        values = wanted if isinstance(wanted, list | tuple) else (wanted,)
        tokens = sorted({field_token(name, value) for value in values}) or [NOTHING]
        conditions.append(Cond("flt", "any", tuple(tokens)))
    return conditions


def query_where(
    scope: Scope | None,
    filters: Mapping[str, FilterValue] | None = None,
    *,
    now: float | None = None,
    min_importance: float = 0.0,
    extra: Sequence[Where] = (),
) -> And:
    """Every condition ANDed: memkit's objects (``v``), the scope, each filter, live at ``now`` (when given),
    importance at least ``min_importance`` (when above 0), and ``extra`` (a scan position, a set of ids)."""
    conditions: list[Where] = [Cond("v", "eq", 1), *scope_conditions(scope), *field_conditions(filters)]
    if now is not None:
        conditions.append(Cond("exp", "gt", float(now)))
    if min_importance > 0:
        conditions.append(Cond("imp", "gte", float(min_importance)))
    return And((*conditions, *extra))


def expired_where(now: float) -> And:
    """memkit's objects that expired at or before ``now``."""
    return And((Cond("v", "eq", 1), Cond("exp", "lte", float(now))))


def ids_where(uuids: Sequence[str]) -> Cond:
    return Cond("_id", "any", tuple(uuids))


def to_weaviate(where: Where) -> Any:
    """The client's ``Filter`` for ``where`` (imports the driver: call it only inside the adapter)."""
    from weaviate.classes.query import Filter

    if isinstance(where, And | Or):
        parts = [to_weaviate(part) for part in where.parts]
        if len(parts) == 1:
            return parts[0]
        return Filter.all_of(parts) if isinstance(where, And) else Filter.any_of(parts)
    target = Filter.by_id() if where.prop == "_id" else Filter.by_property(where.prop)
    value = list(where.value) if where.op == "any" else where.value
    method = {"eq": "equal", "gt": "greater_than", "gte": "greater_or_equal", "lt": "less_than",
              "lte": "less_or_equal", "any": "contains_any"}[where.op]  # fmt: skip
    return getattr(target, method)(value)
