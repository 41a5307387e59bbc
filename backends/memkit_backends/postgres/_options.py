"""The URL options of ``postgresql://``, read and checked once; the DSN handed to asyncpg.

memkit's own options (removed before the URL reaches asyncpg):

- ``schema`` (``memkit``): where memkit's tables live; lower-case letters, digits and underscores.
- ``pool_min`` / ``pool_max`` (1 / 10): connections kept open / at most.
- ``connect_timeout`` (seconds, 10): for opening the pool and every new connection.
- ``vector`` (``vector`` | ``halfvec``): how embeddings are stored; ``halfvec`` halves the size.
- ``retries`` (6): how often an operation is retried, with exponential backoff, after a lost connection.
- ``index`` (``none`` | ``hnsw``): ``none`` maintains no graph on insert (ingest ~30x faster on 2 cores,
  and queries scoped to one user stay exact and fast through the scope index); ``hnsw`` builds pgvector's
  HNSW index, worth it when one scope, or a search across all scopes, holds far more rows than a scan serves.

Passed through to asyncpg, which reads them as libpq does (``PASS_THROUGH``): ``host`` (a Unix socket
directory), ``port``, ``user``, ``password``, ``passfile``, the TLS options ``sslmode``, ``sslrootcert``,
``sslcert``, ``sslkey``, ``sslcrl``, ``sslpassword``, ``sslnegotiation``, ``ssl_min_protocol_version``,
``ssl_max_protocol_version``, ``target_session_attrs``, ``krbsrvname``, ``gsslib``, and the session
settings ``application_name``, ``statement_timeout`` and ``lock_timeout`` (milliseconds, or with a unit:
``statement_timeout=5s``; a statement cut off raises ``BackendTimeoutError``). Anything else is refused
(``InvalidURLError``): asyncpg would send an unknown name to the server as a setting, and a misspelled
``sslmode`` must not silently mean "no TLS".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlencode, urlsplit

from memkit._url import StorageURL
from memkit.errors import InvalidURLError
from memkit_backends.postgres._sql import valid_identifier

__all__ = ["OWN", "PASS_THROUGH", "Settings"]

OWN: Final = ("schema", "pool_min", "pool_max", "connect_timeout", "vector", "retries", "index")
PASS_THROUGH: Final = (
    "host", "port", "user", "password", "passfile", "sslmode", "sslrootcert", "sslcert", "sslkey", "sslcrl",
    "sslpassword", "sslnegotiation", "ssl_min_protocol_version", "ssl_max_protocol_version",
    "target_session_attrs", "krbsrvname", "gsslib", "application_name", "statement_timeout", "lock_timeout",
)  # fmt: skip
_CHOICES: Final = {
    "sslmode": ("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
    "sslnegotiation": ("postgres", "direct"),
    "target_session_attrs": ("any", "primary", "standby", "prefer-standby", "read-write", "read-only"),
}


@dataclass(frozen=True)
class Settings:
    schema: str
    pool_min: int
    pool_max: int
    connect_timeout: float
    vector_type: str
    retries: int
    index: str
    dsn: str = field(repr=False)
    """The URL for asyncpg: scheme ``postgresql``, pass-through options only. Holds the password: never shown."""

    @classmethod
    def from_url(cls, url: StorageURL) -> Settings:
        url.check_options((*OWN, *PASS_THROUGH))
        pool_min = url.option("pool_min", 1, minimum=0)
        pool_max = url.option("pool_max", 10, minimum=1)
        if pool_max < pool_min:
            raise InvalidURLError(f"pool_max={pool_max} is below pool_min={pool_min} in {url}")
        timeout = url.option("connect_timeout", 10.0)
        if not timeout > 0:  # also refuses nan
            raise InvalidURLError(f"connect_timeout={timeout} in {url}: must be > 0")
        given = [name for name in PASS_THROUGH if name in url.options]
        passed = {name: url.option(name, "", choices=_CHOICES.get(name)) for name in given}
        if "port" in passed:
            passed["port"] = str(url.option("port", 0, minimum=1))
        parts = urlsplit(url.raw)
        return cls(
            schema=valid_identifier(url.option("schema", "memkit"), "schema"),
            pool_min=pool_min,
            pool_max=pool_max,
            connect_timeout=timeout,
            vector_type=url.option("vector", "vector", choices=("vector", "halfvec")),
            retries=url.option("retries", 6, minimum=0),
            index=url.option("index", "none", choices=("none", "hnsw")),
            dsn=parts._replace(scheme="postgresql", query=urlencode(passed)).geturl(),
        )
