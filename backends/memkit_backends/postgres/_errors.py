"""asyncpg's errors as memkit's: what is retried, and one class table applied to every operation."""

from __future__ import annotations

import socket
from typing import Final

import asyncpg
from asyncpg import exceptions as pg

from memkit.errors import (
    BackendError,
    BackendRefusedError,
    BackendTimeoutError,
    BackendUnavailableError,
    InvalidURLError,
    MemkitError,
    ValidationError,
)
from memkit_backends._server.errors import ErrorTable, map_error

__all__ = ["REFUSED", "TABLE", "TRANSIENT", "postgres_error"]

TRANSIENT: Final[tuple[type[BaseException], ...]] = (
    ConnectionError,  # refused, reset, broken pipe: the server is down or restarting
    FileNotFoundError,  # a Unix socket that is gone while the server restarts
    socket.gaierror,
    asyncpg.PostgresConnectionError,  # includes "connection was closed in the middle of operation"
    pg.CannotConnectNowError,  # starting up, shutting down
    pg.AdminShutdownError,
    pg.CrashShutdownError,
    pg.TooManyConnectionsError,
    pg.DeadlockDetectedError,  # the transaction was rolled back whole: running it again is safe
    pg.SerializationError,
    # A transaction's exit on a connection that died raises this, replacing the connection error.
    asyncpg.InterfaceError,
)
"""Errors after which the same operation on a new connection may succeed. Not OSError as a whole: a
TimeoutError (and memkit's BackendTimeoutError) is one, and a timeout is reported, not retried."""

REFUSED: Final[tuple[type[BaseException], ...]] = (
    pg.InvalidAuthorizationSpecificationError,  # wrong password (a subclass), no such role, pg_hba refused
    pg.InvalidCatalogNameError,  # no such database
    pg.InsufficientPrivilegeError,
)

TABLE: Final[ErrorTable] = (
    (pg.QueryCanceledError, BackendTimeoutError),  # statement_timeout, or cancelled by an administrator
    (pg.LockNotAvailableError, BackendTimeoutError),  # lock_timeout
    (TimeoutError, BackendTimeoutError),
    *((refused, BackendRefusedError) for refused in REFUSED),
    (asyncpg.DataError, ValidationError),  # NUL bytes, bad encodings, numbers out of range, malformed JSON
    (pg.ProgramLimitExceededError, ValidationError),  # an index row or a tsvector too large
    (pg.ClientConfigurationError, InvalidURLError),
    (OSError, BackendUnavailableError),
    (asyncpg.PostgresError, BackendError),
    (asyncpg.InterfaceError, BackendError),
    (pg.InternalClientError, BackendError),
)

_TOO_LONG: Final = (
    ("_pkey", "the record id is"),
    ("_scope", "the scope ids (user, agent, session) are"),
    ("_scan", "the user id and the record id are"),
)


def _too_long(exc: BaseException) -> str:
    """Which input a ProgramLimitExceededError is about: the index it names, or the tsvector limit."""
    index = str(getattr(exc, "constraint_name", None) or "")
    if index.startswith("memkit_kv"):
        return "the key-value namespace and key are too long to index (at most ~2.7 KB together)"
    for suffix, what in _TOO_LONG:
        if index.endswith(suffix):
            return f"{what} too long to index (at most ~2.7 KB)"
    if "tsvector" in str(exc):
        return "the text is too long for full-text search (its words at most 1 MB)"
    return "an input is too long"


def postgres_error(exc: BaseException, where: object) -> MemkitError | None:
    """The memkit error for ``exc`` by the class table; None for what is not a driver error."""
    mapped = map_error(TABLE, exc, where)
    if isinstance(exc, pg.ProgramLimitExceededError) and mapped is not None:
        return ValidationError(f"{where}: {_too_long(exc)}: {exc}")
    return mapped
