"""Scope, filters, expiry and scan positions as Pinecone metadata filters: data, never strings.

A filter is a dict Pinecone evaluates; no value is ever spliced into text, so there is nothing to escape.
Scope ids are compared as they are (``{"_u": {"$eq": user_id}}``). Field values are compared through one
digest per (name, value) pair in the ``_flt`` list, because the contract's equality is not Pinecone's:
``1.0`` equals ``1`` but ``True`` does not (Pinecone keeps numbers as float64, where 2**53 + 1 == 2**53), a
scalar ``"a"`` matches a tag ``"a"``, and a field may be named ``$or``. ``$in`` on a list matches when any
element is among the wanted values: any-of for a list filter and for a tag field alike.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from memkit.backend import Fields, FieldValue, FilterValue, Scope

__all__ = ["NOTHING", "Filter", "expired_filter", "field_token", "field_tokens", "query_filter"]

Filter = dict[str, Any]
NOTHING: Final = "0" * 32
"""The token of an empty any-of filter: no digest is all zeros, so it matches nothing."""


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


def _scope_conditions(scope: Scope | None) -> list[Filter]:
    if scope is None:
        return []
    pairs = (("_u", scope.user_id), ("_a", scope.agent_id), ("_s", scope.session_id))
    return [{key: {"$eq": value}} for key, value in pairs if value is not None]


def _field_conditions(filters: Mapping[str, FilterValue] | None) -> list[Filter]:
    conditions = []
    for name, wanted in (filters or {}).items():
        values = wanted if isinstance(wanted, list | tuple) else (wanted,)
        tokens = sorted({field_token(name, value) for value in values}) or [NOTHING]
        conditions.append({"_flt": {"$in": tokens}})
    return conditions


def query_filter(
    scope: Scope | None,
    filters: Mapping[str, FilterValue] | None = None,
    *,
    now: float | None = None,
    min_importance: float = 0.0,
    timestamp_from: tuple[str, float] | None = None,
) -> Filter:
    """Every condition ANDed: memkit's records (``_v``), the scope, each filter, live at ``now`` (when given),
    importance at least ``min_importance`` (when above 0), and ``timestamp_from`` = (``"$gte"`` or ``"$lte"``,
    timestamp): where a scan page starts."""
    conditions: list[Filter] = [{"_v": {"$eq": 1}}, *_scope_conditions(scope), *_field_conditions(filters)]
    if now is not None:
        conditions.append({"_exp": {"$gt": float(now)}})
    if min_importance > 0:
        conditions.append({"_imp": {"$gte": float(min_importance)}})
    if timestamp_from is not None:
        operator, timestamp = timestamp_from
        conditions.append({"_ts": {operator: float(timestamp)}})
    return {"$and": conditions}


def expired_filter(now: float) -> Filter:
    """memkit's records that expired at or before ``now``."""
    return {"$and": [{"_v": {"$eq": 1}}, {"_exp": {"$lte": float(now)}}]}
