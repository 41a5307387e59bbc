"""SQL for the Postgres backend: versioned schema, per-collection tables, WHERE clauses.

Identifiers come from memkit (schema and collection names are checked or
sanitised here); every value is a bind parameter.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from memkit.backend import FilterValue, Scope
from memkit.errors import InvalidURLError

__all__ = ["SCHEMA_VERSION", "Where", "collection_ddl", "schema_ddl", "table_name", "valid_identifier"]

SCHEMA_VERSION: Final = 1
_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")
RECORD_COLUMNS: Final = (
    "id, user_id, agent_id, session_id, body, text, embedding::vector AS embedding, importance, ts, expires_at, fields"
)


def valid_identifier(name: str, what: str) -> str:
    if not _IDENTIFIER.match(name):
        raise InvalidURLError(f"{what} {name!r} must be lower-case letters, digits and underscores")
    return name


def table_name(collection: str) -> str:
    """A safe, unique table name for any collection name."""
    cleaned = re.sub(r"[^a-z0-9_]", "_", collection.lower())[:30]
    digest = hashlib.blake2b(collection.encode(), digest_size=4).hexdigest()
    return f"mk_{cleaned}_{digest}"


def schema_ddl(schema: str) -> list[str]:
    return [
        "CREATE EXTENSION IF NOT EXISTS vector",
        f'CREATE SCHEMA IF NOT EXISTS "{schema}"',
        f'CREATE TABLE IF NOT EXISTS "{schema}".memkit_meta (key text PRIMARY KEY, value text NOT NULL)',
        f'CREATE TABLE IF NOT EXISTS "{schema}".memkit_collections '
        "(name text PRIMARY KEY, table_name text NOT NULL, dim integer)",
        f'CREATE TABLE IF NOT EXISTS "{schema}".memkit_kv (namespace text NOT NULL, key text NOT NULL, '
        "value bytea NOT NULL, expires_at double precision, PRIMARY KEY (namespace, key))",
    ]


def collection_ddl(schema: str, table: str) -> list[str]:
    qualified = f'"{schema}"."{table}"'
    return [
        f"CREATE TABLE IF NOT EXISTS {qualified} ("
        "id text PRIMARY KEY, user_id text, agent_id text, session_id text, body bytea NOT NULL, text text, "
        "tokens text, tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', coalesce(tokens, ''))) STORED, "
        "embedding vector, importance real NOT NULL, ts double precision NOT NULL, expires_at double precision, "
        "fields jsonb NOT NULL DEFAULT '{}')",
        f'CREATE INDEX IF NOT EXISTS "{table}_scope" ON {qualified} (user_id, agent_id, session_id)',
        f'CREATE INDEX IF NOT EXISTS "{table}_tsv" ON {qualified} USING gin (tsv)',
        f'CREATE INDEX IF NOT EXISTS "{table}_fields" ON {qualified} USING gin (fields jsonb_path_ops)',
        f'CREATE INDEX IF NOT EXISTS "{table}_expiry" ON {qualified} (expires_at) WHERE expires_at IS NOT NULL',
    ]


def vector_ddl(schema: str, table: str, dim: int, vector_type: str, *, hnsw: bool = True) -> list[str]:
    qualified = f'"{schema}"."{table}"'
    ops = "halfvec_cosine_ops" if vector_type == "halfvec" else "vector_cosine_ops"
    statements = [
        f"ALTER TABLE {qualified} ALTER COLUMN embedding TYPE {vector_type}({dim}) "
        f"USING embedding::{vector_type}({dim})",
    ]
    if hnsw:
        statements.append(f'CREATE INDEX IF NOT EXISTS "{table}_hnsw" ON {qualified} USING hnsw (embedding {ops})')
    return statements


@dataclass
class Where:
    """A WHERE clause built from bind parameters only."""

    clauses: list[str] = field(default_factory=list)
    params: list[Any] = field(default_factory=list)

    def bind(self, value: Any) -> str:
        self.params.append(value)
        return f"${len(self.params)}"

    def add(self, clause: str) -> None:
        self.clauses.append(clause)

    def scope(self, scope: Scope | None) -> Where:
        if scope is not None:
            for column, value in (("user_id", scope.user_id), ("agent_id", scope.agent_id),
                                  ("session_id", scope.session_id)):  # fmt: skip
                if value is not None:
                    self.add(f"{column} = {self.bind(value)}")
        return self

    def filters(self, filters: Mapping[str, FilterValue] | None) -> Where:
        for key, wanted in (filters or {}).items():
            values = wanted if isinstance(wanted, list | tuple) else (wanted,)
            options = [f"fields @> {self.bind(json.dumps({key: value}))}::jsonb" for value in values]
            self.add("(" + " OR ".join(options or ["false"]) + ")")
        return self

    def alive(self, now: float | None) -> Where:
        if now is not None:
            self.add(f"(expires_at IS NULL OR expires_at > {self.bind(now)})")
        return self

    def sql(self) -> str:
        return " AND ".join(self.clauses) if self.clauses else "true"
