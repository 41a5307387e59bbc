"""A pinecone:// URL's options, typed and checked, and the SDK's asyncio index client they make.

``pinecone://INDEX?namespace=memkit`` (anything else raises ``InvalidURLError``):

- ``api_key``: the API key; else ``$PINECONE_API_KEY``. Masked wherever the URL is shown.
- ``host``: the index's data-plane host (``https://INDEX-xxxx.svc....pinecone.io``, or a loopback test
  double's ``http://127.0.0.1:PORT``); without it the host is looked up once from the index name.
- ``namespace`` (default ``memkit``): the prefix of the namespaces memkit writes, one per collection
  (``memkit.long_term``), so other data in the same index is never read or deleted.
- ``timeout`` (seconds, default 30): for one HTTP attempt (the SDK retries; see ``_errors``).
- ``concurrency`` (default 8): requests one operation keeps in flight (batches of a large upsert,
  the per-record updates of ``touch``).
"""

from __future__ import annotations

import os
from typing import Final, NamedTuple

from pinecone import AsyncPinecone
from pinecone.async_client.async_index import AsyncIndex

from memkit.backend import StorageURL
from memkit.errors import ConfigurationError
from memkit_backends.pinecone._layout import check_prefix

__all__ = ["Settings", "open_index", "settings_of"]

_OPTIONS: Final = ("api_key", "host", "namespace", "timeout", "concurrency")


class Settings(NamedTuple):
    index_name: str | None
    api_key: str
    host: str | None
    prefix: str
    timeout: float
    concurrency: int


def settings_of(url: StorageURL) -> Settings:
    """The settings of ``url``; bad options raise here, before anything connects."""
    url.check_options(_OPTIONS)
    api_key = url.option("api_key", "") or os.environ.get("PINECONE_API_KEY", "")
    if not api_key:
        raise ConfigurationError(f"{url}: no Pinecone API key; add ?api_key=... or set PINECONE_API_KEY")
    host = url.option("host", "") or None
    index = url.host or None
    if index is None and host is None:
        raise ConfigurationError(f"{url}: name the index (pinecone://INDEX) or give its data-plane ?host=")
    return Settings(
        index_name=index,
        api_key=api_key,
        host=host,
        prefix=check_prefix(url.option("namespace", "memkit")),
        timeout=url.option("timeout", 30.0, minimum=0.001),
        concurrency=url.option("concurrency", 8, minimum=1),
    )


async def open_index(settings: Settings) -> AsyncIndex:
    """The data-plane client: straight to ``host`` when given, else after one describe-index lookup."""
    if settings.host is not None:
        return AsyncIndex(host=settings.host, api_key=settings.api_key, timeout=settings.timeout)
    async with AsyncPinecone(api_key=settings.api_key, timeout=settings.timeout) as control:
        return await control.index(name=settings.index_name or "")
