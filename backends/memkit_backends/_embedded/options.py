"""URL options shared by the in-process backends."""

from __future__ import annotations

from typing import cast, get_args

from memkit.backend import StorageURL
from memkit.errors import InvalidURLError
from memkit.scoring import StorageDtype

__all__ = ["storage_dtype"]


def storage_dtype(url: StorageURL) -> StorageDtype:
    value = url.options.get("dtype", "float32")
    if value not in get_args(StorageDtype):
        raise InvalidURLError(f"dtype={value!r} in {url}: use one of {', '.join(get_args(StorageDtype))}")
    return cast(StorageDtype, value)
