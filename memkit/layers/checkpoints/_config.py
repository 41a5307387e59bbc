"""The checkpoint layer's settings, and what ``list()`` says about each checkpoint."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Literal

import msgspec

from memkit._repr import short_repr
from memkit.errors import ConfigurationError, MissingDependencyError
from memkit.layers.checkpoints._format import Compression, Serializer, has_module

__all__ = ["CheckpointConfig", "CheckpointInfo"]

DEFAULT_MAX_BYTES = 64 * 1024 * 1024


class CheckpointConfig(msgspec.Struct, frozen=True, kw_only=True):
    keep_last: int | None = 50
    """How many checkpoints a thread keeps: each save drops the oldest beyond it (None keeps every one; an
    agent saving after each turn would then grow its storage, and the thread's index, without bound)."""
    serializer: Serializer = "msgpack"
    """``"msgpack"`` (smaller, faster, keeps bytes and non-finite floats) or ``"json"`` (readable)."""
    compression: Literal["auto", "zstd", "zlib"] | None = "auto"
    """``"auto"``: zstd when ``zstandard`` is installed (extra ``zstd``), else zlib; None stores as is."""
    min_compress_bytes: int = 4096
    """Smaller payloads are stored uncompressed: there is little to gain and a header to pay."""
    encryption_key: bytes | None = None
    """An AES key of 16, 24 or 32 bytes (extra ``crypto``): checkpoints are then encrypted and authenticated,
    and one that does not decrypt with it is refused. Keep the key outside the storage it protects."""
    accept_plaintext: bool = False
    """With a key set, also load checkpoints saved without encryption (while migrating to encryption)."""
    max_bytes: int = DEFAULT_MAX_BYTES
    """The largest serialized checkpoint saved or loaded (checked before and after decompressing)."""
    orphan_grace_s: float = 600.0
    """``prune`` deletes a blob no index lists (left by a save that died) once it is this old: a younger one
    may belong to a save still on its way to the index."""

    def __post_init__(self) -> None:
        _check(self)

    def __rich_repr__(self) -> list[tuple[str, Any]]:
        """Every setting, the key masked: a config printed or logged must not leak what it protects."""
        shown = [(name, getattr(self, name)) for name in self.__struct_fields__]
        return [(n, "<hidden>" if n == "encryption_key" and v is not None else v) for n, v in shown]

    def __repr__(self) -> str:
        return f"CheckpointConfig({', '.join(f'{name}={value!r}' for name, value in self.__rich_repr__())})"

    @property
    def resolved_compression(self) -> Compression | None:
        if self.compression == "auto":
            return "zstd" if has_module("zstandard") else "zlib"
        return self.compression


def _check(config: CheckpointConfig) -> None:
    def whole(value: object, what: str, low: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigurationError(f"CheckpointConfig.{what} must be an integer >= {low}, got {short_repr(value)}")

    if config.keep_last is not None:
        whole(config.keep_last, "keep_last", 1)
    whole(config.min_compress_bytes, "min_compress_bytes", 0)
    whole(config.max_bytes, "max_bytes", 1)
    grace = config.orphan_grace_s
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not math.isfinite(grace) or grace < 0:
        raise ConfigurationError(
            f"CheckpointConfig.orphan_grace_s must be a number of seconds >= 0, got {short_repr(grace)}"
        )
    if config.serializer not in ("msgpack", "json"):
        raise ConfigurationError(
            f"CheckpointConfig.serializer must be 'msgpack' or 'json', got {short_repr(config.serializer)}"
        )
    if config.compression not in ("auto", "zstd", "zlib", None):
        raise ConfigurationError(
            f"CheckpointConfig.compression must be 'auto', 'zstd', 'zlib' or None, got {short_repr(config.compression)}"
        )
    if config.compression == "zstd" and not has_module("zstandard"):
        raise MissingDependencyError("compression='zstd' needs zstandard; run: pip install 'memkit-sdk[zstd]'")
    if not isinstance(config.accept_plaintext, bool):
        raise ConfigurationError(
            f"CheckpointConfig.accept_plaintext must be True or False, got {short_repr(config.accept_plaintext)}"
        )
    key = config.encryption_key
    if key is not None:
        if not isinstance(key, bytes) or len(key) not in (16, 24, 32):
            size = f"{len(key)} bytes" if isinstance(key, bytes) else type(key).__name__
            raise ConfigurationError(f"CheckpointConfig.encryption_key must be 16, 24 or 32 bytes (AES), got {size}")
        if not has_module("cryptography"):
            raise MissingDependencyError("encryption needs cryptography; run: pip install 'memkit-sdk[crypto]'")


class CheckpointInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One saved checkpoint, as ``list()`` gives it (newest first)."""

    id: str
    parent_id: str | None
    """The checkpoint it continues from (the thread's latest when it was saved, unless given)."""
    created_at: datetime
    size_bytes: int
    """What it takes in the storage (header and payload, after compression and encryption)."""
    serializer: Serializer
    compression: Compression | None
    """What it was stored with: None when it was too small or did not compress."""
    encrypted: bool
    metadata: dict[str, Any]
