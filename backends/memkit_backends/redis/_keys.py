"""Keys, tags and query strings for the Redis backend.

Every value that reaches a RediSearch query (scope ids, filter values) is
first turned into a hex digest, so a query string only ever holds hex and
memkit's own syntax: there is nothing left to escape and nothing to inject.
Text-search tokens come from memkit's tokenizer (word characters only).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from memkit.backend import FilterValue, Scope

__all__ = ["INDEX_PREFIX", "NONE_EXPIRY", "collection_prefix", "filter_tags", "index_name", "query_clauses", "tag"]

INDEX_PREFIX: Final = "memkit"
NONE_EXPIRY: Final = 1e300
"""Stored as the expiry of records that never expire (RediSearch numeric ranges need a number)."""


def tag(*parts: Any) -> str:
    return hashlib.blake2b(json.dumps(parts, sort_keys=True).encode(), digest_size=12).hexdigest()


def _name_digest(collection: str) -> str:
    return hashlib.blake2b(collection.encode(), digest_size=6).hexdigest()


def index_name(collection: str) -> str:
    return f"{INDEX_PREFIX}:idx:{_name_digest(collection)}"


def collection_prefix(collection: str) -> str:
    return f"{INDEX_PREFIX}:r:{_name_digest(collection)}:"


def filter_tags(fields: Mapping[str, Any]) -> str:
    return ",".join(tag("f", key, value) for key, value in fields.items())


def query_clauses(scope: Scope | None, filters: Mapping[str, FilterValue] | None, now: float | None) -> list[str]:
    clauses = []
    if scope is not None:
        for field, value in (("u", scope.user_id), ("a", scope.agent_id), ("s", scope.session_id)):
            if value is not None:
                clauses.append(f"@{field}:{{{tag('scope', value)}}}")
    for key, wanted in (filters or {}).items():
        values = wanted if isinstance(wanted, list | tuple) else (wanted,)
        options = [tag("f", key, value) for value in values] or [tag("matches nothing")]
        clauses.append("@flt:{" + " | ".join(options) + "}")
    if now is not None:
        clauses.append(f"@exp:[({now!r} +inf]")
    return clauses
