"""The client for a weaviate:// URL, and the explicit schema memkit creates its collections with."""

from __future__ import annotations

import json
from typing import Any

from memkit.errors import BackendUnavailableError
from memkit_backends.weaviate._layout import LAYOUT, PROPERTIES
from memkit_backends.weaviate._options import Settings

__all__ = ["collection_schema", "open_client", "stored_dim"]


async def open_client(settings: Settings) -> Any:
    """A connected ``WeaviateAsyncClient``. The client's start-up checks are skipped (one of them asks PyPI
    for the latest client version): connecting reads ``/v1/meta``, and readiness is asked for here."""
    import weaviate
    from weaviate.classes.init import AdditionalConfig, Auth, Timeout

    auth = Auth.api_key(settings.api_key) if settings.api_key else None
    timeout = Timeout(init=settings.timeout, query=settings.timeout, insert=settings.timeout)
    client = weaviate.use_async_with_custom(
        http_host=settings.host, http_port=settings.port, http_secure=settings.secure,
        grpc_host=settings.grpc_host, grpc_port=settings.grpc_port, grpc_secure=settings.secure,
        auth_credentials=auth, additional_config=AdditionalConfig(timeout=timeout), skip_init_checks=True,
    )  # fmt: skip
    try:
        await client.connect()
        if not await client.is_ready():
            raise BackendUnavailableError(f"Weaviate at {settings.host}:{settings.port} is not ready")
    except BaseException:
        await client.close()
        raise
    return client


def _property(name: str, data_type: str, tokenization: str | None, filterable: bool, searchable: bool
              ) -> dict[str, Any]:  # fmt: skip
    prop: dict[str, Any] = {"name": name, "dataType": [data_type], "indexFilterable": filterable,
                            "indexSearchable": searchable}  # fmt: skip
    if tokenization is not None:
        prop["tokenization"] = tokenization
    if data_type == "number" and filterable:
        prop["indexRangeFilters"] = True
    return prop


def collection_schema(name: str, collection: str, dim: int | None, index: str) -> dict[str, Any]:
    """The collection definition memkit creates (REST ``POST /v1/schema``): explicit properties, no
    vectorizer (memkit sends its own vectors), cosine distance, BM25 with k1 = 1.2, b = 0.75 and no stop
    words (memkit's tokens have none left, and Weaviate's English list would drop some stems), no
    multi-tenancy (``_backend`` says why). The description records memkit's layout and the dimension."""
    description = json.dumps({"memkit": LAYOUT, "collection": collection, "dim": dim})
    return {
        "class": name,
        "description": description,
        "vectorizer": "none",
        "vectorIndexType": index,
        "vectorIndexConfig": {"distance": "cosine"},
        "invertedIndexConfig": {"bm25": {"k1": 1.2, "b": 0.75}, "stopwords": {"preset": "none"}},
        "multiTenancyConfig": {"enabled": False},
        "properties": [_property(*spec) for spec in PROPERTIES],
    }


def stored_dim(description: str | None) -> tuple[bool, int | None]:
    """(whether memkit created the collection, its dimension) from a collection's description."""
    try:
        found = json.loads(description or "")
    except ValueError:
        return False, None
    if not isinstance(found, dict) or found.get("memkit") != LAYOUT:
        return False, None
    dim = found.get("dim")
    return True, dim if isinstance(dim, int) and not isinstance(dim, bool) else None
