"""URL options shared by the in-process backends."""

from __future__ import annotations

from typing import Final, cast, get_args

from memkit.backend import StorageURL
from memkit.scoring import StorageDtype

__all__ = ["DTYPE_OPTION", "storage_dtype"]

DTYPE_OPTION: Final = "dtype"


def storage_dtype(url: StorageURL) -> StorageDtype:
    """``?dtype=float32|float16|int8``: how the in-process arrays store vectors."""
    return cast(StorageDtype, url.option(DTYPE_OPTION, "float32", choices=get_args(StorageDtype)))
