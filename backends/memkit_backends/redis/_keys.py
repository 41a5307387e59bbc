"""Keys, tags and query strings for the Redis backend.

Every value that reaches a RediSearch query (scope ids, filter values) is
first turned into a hex digest, so a query string only ever holds hex and
memkit's own syntax: there is nothing left to escape and nothing to inject.
Text-search tokens come from memkit's tokenizer (word characters only).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from memkit.backend import FilterValue, Scope

__all__ = [
    "INDEX_PREFIX", "NONE_EXPIRY", "NO_SCOPE", "SCOPE_FIELDS", "body_prefix_of", "collection_prefix",
    "counters_prefix_of", "filter_tags", "index_name", "number", "query_clauses", "scope_number", "scope_tag",
    "tag", "text_clauses",
]  # fmt: skip

INDEX_PREFIX: Final = "memkit"
NONE_EXPIRY: Final = 1e300
"""Stored as the expiry of records that never expire (RediSearch numeric ranges need a number)."""
SCOPE_FIELDS: Final = (("u", "un", "user_id"), ("a", "an", "agent_id"), ("s", "sn", "session_id"))
"""Per scope id: its TAG field, its numeric twin for text queries (see ``text_clauses``), its attribute."""
NO_SCOPE: Final = -1
"""The scope number stored for an id that is not set."""


def tag(*parts: Any) -> str:
    return hashlib.blake2b(json.dumps(parts, sort_keys=True).encode(), digest_size=12).hexdigest()


@functools.lru_cache(maxsize=65_536)  # scope ids repeat across a batch; a digest each is most of encoding
def scope_tag(value: str) -> str:
    return tag("scope", value)


@functools.lru_cache(maxsize=65_536)
def scope_number(value: str) -> int:
    """A scope id as a 52-bit integer: exact in the float64 RediSearch keeps for NUMERIC fields."""
    digest = hashlib.blake2b(json.dumps(["scope", value]).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 12


def _name_digest(collection: str) -> str:
    return hashlib.blake2b(collection.encode(), digest_size=6).hexdigest()


def index_name(collection: str) -> str:
    return f"{INDEX_PREFIX}:idx:{_name_digest(collection)}"


def collection_prefix(collection: str) -> str:
    return f"{INDEX_PREFIX}:r:{_name_digest(collection)}:"


def body_prefix_of(collection: str) -> str:
    """Where records' bodies live: outside the index's prefix, so writing one re-indexes nothing."""
    return f"{INDEX_PREFIX}:b:{_name_digest(collection)}:"


def counters_prefix_of(collection: str) -> str:
    """Where records' access counters live (a small hash per record): outside the index's prefix, so a
    recall's touch re-indexes nothing."""
    return f"{INDEX_PREFIX}:a:{_name_digest(collection)}:"


def number(value: float) -> str:
    """A float as RediSearch reads it back exactly (``repr`` is the shortest round-trip form)."""
    return repr(float(value))


def _field_value(value: Any) -> Any:
    """One digest per value the contract calls equal: an integral float matches the equal int (``1.0 == 1``,
    as on every other backend), a bool stays a bool (``True`` is not ``1``, as in JSON)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def filter_tags(fields: Mapping[str, Any]) -> str:
    """The ``flt`` TAG field: a digest per scalar field, and one per tag of a tuple field, so a filter on a
    tag field matches a record when any of its tags is wanted (a scalar ``"a"`` and a tag ``"a"`` digest
    alike, as the contract matches them alike)."""
    digests = []
    for key, value in fields.items():
        if isinstance(value, tuple | list):
            digests += [tag("f", key, item) for item in value]
        else:
            digests.append(tag("f", key, _field_value(value)))
    return ",".join(digests)


def query_clauses(scope: Scope | None, filters: Mapping[str, FilterValue] | None, now: float | None) -> list[str]:
    clauses = []
    if scope is not None:
        for field, _, attribute in SCOPE_FIELDS:
            if (value := getattr(scope, attribute)) is not None:
                clauses.append(f"@{field}:{{{scope_tag(value)}}}")
    for key, wanted in (filters or {}).items():
        values = wanted if isinstance(wanted, list | tuple) else (wanted,)
        options = [tag("f", key, _field_value(value)) for value in values] or [tag("matches nothing")]
        clauses.append("@flt:{" + " | ".join(options) + "}")
    if now is not None:
        clauses.append(f"@exp:[({number(now)} +inf]")
    return clauses


def text_clauses(scope: Scope, filters: Mapping[str, FilterValue] | None) -> list[str]:
    """Scope and filters for a text query, with the scope in a form that adds nothing to text scores.

    RediSearch scores a TAG clause as one more search term, whose weight grows with the number of other
    users' records in the collection: on LoCoMo with every conversation in one collection, recall@10
    went from 67.8 to 70.5 without it (RediSearch's older BM25 scorer, before the other fixes). Numeric
    ranges are not scored, so the scope is matched on its numeric twin (a 52-bit digest; the caller
    checks the scope of the records it returns, so a digest collision can never leak one). Filters stay
    TAG clauses: a double negation, which would not score, returned almost nothing on RediSearch 2.10.
    """
    clauses = []
    for _, field, attribute in SCOPE_FIELDS:
        if (value := getattr(scope, attribute)) is not None:
            digest = scope_number(value)
            clauses.append(f"@{field}:[{digest} {digest}]")
    return clauses + query_clauses(None, filters, None)
