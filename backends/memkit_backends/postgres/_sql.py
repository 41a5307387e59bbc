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

__all__ = [
    "COUNTERS_SUFFIX",
    "ID_ORDER",
    "RECORD_COLUMNS",
    "SCHEMA_VERSION",
    "Where",
    "collection_ddl",
    "counters_ddl",
    "schema_ddl",
    "table_name",
    "upgrade_collection_ddl",
    "upgrade_schema_ddl",
    "valid_identifier",
    "vector_ddl",
]

SCHEMA_VERSION: Final = 4
"""1: the first layout. 2: access counters as columns, a (user, timestamp, id) index for scans, key-value
keys in the "C" collation (code-point order, as kv_scan promises). 3: vectors kept in the row (storage MAIN).
4: access counts in a counters table per collection (``counters_ddl``); counts in the rows still count."""
_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")
RECORD_COLUMNS: Final = (
    "id, user_id, agent_id, session_id, body, text, embedding::vector AS embedding, importance, ts, expires_at, "
    "fields, access_count + coalesce(c.reads, 0) AS access_count, greatest(last_accessed, c.read_at) AS last_accessed"
)
"""A record's columns, read from ``PostgresBackend._with_counters`` (the records joined to their counters as
``c``): its counts are the row's own (written before schema 4) plus its row of the counters table."""
COUNTERS_SUFFIX: Final = "_counters"
ID_ORDER: Final = 'id COLLATE "C"'
"""Ties of timestamps break by id in code-point order, as on every backend, whatever the database's collation."""


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
        f'CREATE TABLE IF NOT EXISTS "{schema}".memkit_kv (namespace text NOT NULL, key text COLLATE "C" NOT NULL, '
        "value bytea NOT NULL, expires_at double precision, PRIMARY KEY (namespace, key))",
    ]


def upgrade_schema_ddl(schema: str, version: int) -> list[str]:
    """What brings a schema written by ``version`` to ``SCHEMA_VERSION`` (collection tables aside)."""
    if version >= 2:
        return []
    # A collation change rebuilds the primary key but not the table.
    return [f'ALTER TABLE "{schema}".memkit_kv ALTER COLUMN key TYPE text COLLATE "C"']


def collection_ddl(schema: str, table: str) -> list[str]:
    qualified = f'"{schema}"."{table}"'
    return [
        f"CREATE TABLE IF NOT EXISTS {qualified} ("
        "id text PRIMARY KEY, user_id text, agent_id text, session_id text, body bytea NOT NULL, text text, "
        "tokens text, tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', coalesce(tokens, ''))) STORED, "
        "embedding vector, importance real NOT NULL, ts double precision NOT NULL, expires_at double precision, "
        "fields jsonb NOT NULL DEFAULT '{}', access_count bigint NOT NULL DEFAULT 0, last_accessed double precision)",
        f'CREATE INDEX IF NOT EXISTS "{table}_scope" ON {qualified} (user_id, agent_id, session_id)',
        f'CREATE INDEX IF NOT EXISTS "{table}_tsv" ON {qualified} USING gin (tsv)',
        f'CREATE INDEX IF NOT EXISTS "{table}_fields" ON {qualified} USING gin (fields jsonb_path_ops)',
        f'CREATE INDEX IF NOT EXISTS "{table}_expiry" ON {qualified} (expires_at) WHERE expires_at IS NOT NULL',
        _scan_index(qualified, table),
        _inline_vectors(qualified),
        counters_ddl(schema, table),
    ]


def counters_ddl(schema: str, table: str) -> str:
    # A touch (a recall's access statistics) updates this narrow row, never the record's: an UPDATE rewrites
    # the whole row, vector and text included, and a 2 KB row with no room on its page (the default fillfactor)
    # is not a HOT update but a new version elsewhere with an entry in every index. Measured at 100k rows,
    # 300 recalls repeated: 3-15% of touches were HOT, and recall p50 went 11.7 -> 18.4 ms in 900 recalls.
    # The key references the record, so deleting a record deletes its counts (a record stored again under
    # the same id starts from zero).
    return (
        f'CREATE TABLE IF NOT EXISTS "{schema}"."{table}{COUNTERS_SUFFIX}" (record_id text PRIMARY KEY '
        f'REFERENCES "{schema}"."{table}" (id) ON DELETE CASCADE, reads bigint NOT NULL, read_at double precision)'
    )


def _scan_index(qualified: str, table: str) -> str:
    # A user's scan pages are read in index order: no sort of the whole scope per page. The row's own counters
    # (access_count, last_accessed: written before schema 4) stay out of every index.
    return f'CREATE INDEX IF NOT EXISTS "{table}_scan" ON {qualified} (user_id, ts, {ID_ORDER})'


def upgrade_collection_ddl(schema: str, table: str, version: int) -> list[str]:
    """What brings a collection table written by ``version`` to ``SCHEMA_VERSION``; idempotent."""
    qualified = f'"{schema}"."{table}"'
    statements = []
    if version < 2:
        statements += [
            # A constant default: a catalogue change, no table rewrite.
            f"ALTER TABLE {qualified} ADD COLUMN IF NOT EXISTS access_count bigint NOT NULL DEFAULT 0, "
            "ADD COLUMN IF NOT EXISTS last_accessed double precision",
            _scan_index(qualified, table),
        ]
    if version < 3:  # rows written from now on keep their vector inline; older ones until rewritten
        statements.append(_inline_vectors(qualified))
    if version < 4:  # counts already in the rows stay there, and are added to the new table's on reading
        statements.append(counters_ddl(schema, table))
        statements.append(f"ALTER TABLE {qualified} RESET (fillfactor)")  # kept for touches (HNSW) before
    return statements


def _inline_vectors(qualified: str) -> str:
    # A 384-dim vector (1.5 KB) with a row's body and text passes the 2 KB TOAST threshold: out of line, every
    # comparison fetched it from the TOAST table again. Scoring a scope's 200 rows for each of 10 vectors of a
    # batch read 6,198 buffers in 7.2 ms (EXPLAIN ANALYZE, 20k rows). MAIN keeps it in the row (it still
    # moves out, as a last resort, for a row that would not fit a page), as pgai does for its vector columns.
    return f"ALTER TABLE {qualified} ALTER COLUMN embedding SET STORAGE MAIN"


def vector_ddl(schema: str, table: str, dim: int, vector_type: str, *, hnsw: bool = True) -> list[str]:
    qualified = f'"{schema}"."{table}"'
    ops = "halfvec_cosine_ops" if vector_type == "halfvec" else "vector_cosine_ops"
    # No fillfactor below 100 (an earlier release kept room on each page so that a touch, then an UPDATE of the
    # row, gave the graph no new entry): touches now go to the counters table (``counters_ddl``).
    column = f"{vector_type}({dim})"
    statements = [f"ALTER TABLE {qualified} ALTER COLUMN embedding TYPE {column} USING embedding::{column}"]
    statements.append(_inline_vectors(qualified))  # a type change takes the type's default storage
    if hnsw:
        statements.append(f'CREATE INDEX IF NOT EXISTS "{table}_hnsw" ON {qualified} USING hnsw (embedding {ops})')
    return statements


@dataclass
class Where:
    """A WHERE clause built from bind parameters only."""

    clauses: list[str] = field(default_factory=list)
    params: list[Any] = field(default_factory=list)
    scoped: bool = False
    """A user, agent or session id narrows the rows (the scope index finds them)."""

    def copy(self) -> Where:
        return Where(list(self.clauses), list(self.params), self.scoped)

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
                    self.scoped = True
        return self

    def filters(self, filters: Mapping[str, FilterValue] | None) -> Where:
        """Each wanted value matches a scalar field equal to it or a tag field holding it. Within a scope,
        strings all at once: ``fields -> k ?| [v, ...]`` (jsonb's ``?`` finds a string as the scalar itself
        or as an array element, never a number or bool); other values: ``fields @> {k: v}``. A dedupe lookup
        of a 10-memory batch was 20 containment tests per row of the scope (4 ms over a 1,000-row scope:
        the planner walks the scope's scan index for the LIMIT and never took the GIN index); now one test
        a row. With no scope (``all_scopes``) every value is a containment, which the GIN index serves."""
        for key, wanted in (filters or {}).items():
            values = wanted if isinstance(wanted, list | tuple) else (wanted,)
            if not self.scoped:
                options = [f"fields @> {self.bind(json.dumps({key: shape}))}::jsonb"
                           for value in values for shape in (value, [value])]  # fmt: skip
                self.add("(" + " OR ".join(options or ["false"]) + ")")
                continue
            strings = [value for value in values if isinstance(value, str)]
            options = [f"(fields -> {self.bind(key)}) ?| {self.bind(strings)}::text[]"] if strings else []
            options += [f"fields @> {self.bind(json.dumps({key: value}))}::jsonb"
                        for value in values if not isinstance(value, str)]  # fmt: skip
            self.add("(" + " OR ".join(options or ["false"]) + ")")
        return self

    def alive(self, now: float | None) -> Where:
        if now is not None:
            self.add(f"(expires_at IS NULL OR expires_at > {self.bind(now)})")
        return self

    def after(self, position: tuple[float, str] | None, *, descending: bool) -> Where:
        """Rows past a keyset position in (ts, id) order: one row comparison, an index range on the scan index."""
        if position is not None:
            ts, record_id = position
            self.add(f"(ts, {ID_ORDER}) {'<' if descending else '>'} ({self.bind(ts)}, {self.bind(record_id)})")
        return self

    def sql(self) -> str:
        return " AND ".join(self.clauses) if self.clauses else "true"
