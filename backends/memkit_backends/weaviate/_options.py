"""A weaviate:// URL's options, typed and checked before anything connects.

``weaviate://HOST:8080`` (plain HTTP and gRPC) or ``weaviates://HOST`` (TLS for both; port 443); anything
but these options raises ``InvalidURLError`` naming it:

- ``api_key``: sent as a bearer token; else ``$WEAVIATE_API_KEY``; none for a server without
  authentication. Masked wherever the URL is shown (``StorageURL``), and never part of a repr.
- ``grpc_port`` (50051, or 443 for ``weaviates://``) and ``grpc_host`` (the URL's host): where Weaviate's
  gRPC API listens; reads and batch writes go there, the schema over REST.
- ``prefix`` (``Memkit``): the start of every collection memkit creates (``Memkit_long_term``), so other
  collections on the server are never read or deleted: a capital letter, then letters and digits.
- ``index`` (``flat`` | ``hnsw``, default ``flat``): the vector index of the collections memkit creates.
  ``flat`` scans the vectors a filter admits (exact, no graph to maintain on insert); ``hnsw`` builds a
  graph, exact only while a filter admits fewer rows than Weaviate's ``flatSearchCutoff`` (40,000).
- ``timeout`` (seconds, 30): for one request; ``retries`` (4): attempts after a transient failure (429,
  502-504, gRPC UNAVAILABLE or RESOURCE_EXHAUSTED, a lost connection), with exponential backoff (0.1 s, doubling).
- ``batch`` (200): objects per gRPC batch request (at most 1,000); ``concurrency`` (4): requests one
  operation keeps in flight.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Final

from memkit._url import StorageURL
from memkit.errors import InvalidURLError

__all__ = ["OPTIONS", "Settings", "settings_of"]

OPTIONS: Final = ("api_key", "grpc_port", "grpc_host", "prefix", "index", "timeout", "retries", "batch",
                  "concurrency")  # fmt: skip
MAX_BATCH: Final = 1_000


@dataclass(frozen=True)
class Settings:
    host: str
    port: int
    secure: bool
    grpc_host: str
    grpc_port: int
    prefix: str
    index: str
    timeout: float
    retries: int
    batch: int
    concurrency: int
    api_key: str | None = field(default=None, repr=False)
    """Never shown: ``repr`` leaves it out."""


def _check_prefix(prefix: str) -> str:
    if not (1 <= len(prefix) <= 40 and prefix[0].isascii() and prefix[0].isupper() and prefix.isascii()
            and prefix.isalnum()):  # fmt: skip
        raise InvalidURLError(f"prefix={prefix!r}: use a capital ASCII letter then up to 39 letters or digits")
    return prefix


def settings_of(url: StorageURL) -> Settings:
    """The settings of ``url``; a bad option raises ``InvalidURLError`` here."""
    url.check_options(OPTIONS)
    if url.scheme not in ("weaviate", "weaviates"):
        raise InvalidURLError(f"{url}: the scheme is weaviate:// or weaviates://")
    if not url.host:
        raise InvalidURLError(f"{url}: name the server, e.g. weaviate://localhost:8080")
    if url.path not in ("", "/"):
        raise InvalidURLError(f"{url}: a weaviate:// URL has no path; collections are named by memkit")
    secure = url.scheme == "weaviates"
    grpc_port = url.option("grpc_port", 443 if secure else 50051, minimum=1)
    if grpc_port > 65535:
        raise InvalidURLError(f"grpc_port={grpc_port} in {url}: a port is at most 65535")
    batch = url.option("batch", 200, minimum=1)
    if batch > MAX_BATCH:
        raise InvalidURLError(f"batch={batch} in {url}: at most {MAX_BATCH} objects per request")
    return Settings(
        host=url.host,
        port=url.port or (443 if secure else 8080),
        secure=secure,
        grpc_host=url.option("grpc_host", url.host),
        grpc_port=grpc_port,
        prefix=_check_prefix(url.option("prefix", "Memkit")),
        index=url.option("index", "flat", choices=("flat", "hnsw")),
        timeout=url.option("timeout", 30.0, minimum=0.001),
        retries=url.option("retries", 4, minimum=0),
        batch=batch,
        concurrency=url.option("concurrency", 4, minimum=1),
        api_key=url.option("api_key", "") or os.environ.get("WEAVIATE_API_KEY") or None,
    )
