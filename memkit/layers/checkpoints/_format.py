"""The checkpoint blob: a fixed binary header, then the payload. Written once, readable by every later memkit.

Layout (format version 1, all integers little-endian)::

    offset size  field
         0    4  magic           b"MKCP"
         4    2  version         uint16, 1; a reader refuses a version newer than its own
         6    1  serializer      1 MessagePack, 2 JSON (msgspec's encoders, no pickle: decoding runs no code)
         7    1  compression     0 none, 1 zlib (RFC 1950 stream), 2 zstd (one frame, content size in it)
         8    1  encryption      0 none, 1 AES-GCM: payload = 12-byte nonce + ciphertext + 16-byte tag
         9    1  content         0 any msgspec value, 1 a memkit AgentState (``load()`` decodes it as one)
        10    2  reserved        0; a reader refuses anything else
        12    8  raw_length      bytes of the serialized value before compression and encryption
        20    8  stored_length   bytes after this header (the blob is exactly 44 + stored_length)
        28   16  checksum        blake2b (16-byte digest) of bytes 0..27 followed by the stored bytes
        44    -  payload

The payload is ``encrypt(compress(serialize(value)))`` (each step only when its byte says so). The AES-GCM
associated data is bytes 0..27 of the header followed by the blob's location (the thread and checkpoint it
was saved as), so a blob copied to another thread or renamed does not decrypt.

Reading checks, in order and before any allocation the header could inflate: the length against
``max_bytes``, magic, version, the exact length, the checksum (a torn or bit-flipped blob stops here),
the field values, ``raw_length`` against ``max_bytes``, then decrypts (a wrong key fails the tag), and
decompresses into at most ``raw_length`` bytes (a zip bomb cannot expand past it), then decodes. Every
failure is a ``SerializationError``; nothing partial is returned.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.util
import os
import struct
import zlib
from collections.abc import Callable
from typing import Any, Final, Literal

import msgspec

from memkit._repr import short_repr
from memkit.errors import MissingDependencyError, SerializationError, ValidationError

__all__ = [
    "HEADER_SIZE",
    "MAGIC",
    "VERSION",
    "Compression",
    "Header",
    "Sealer",
    "Serializer",
    "decode_value",
    "encode_value",
    "has_module",
    "read_header",
]

MAGIC: Final = b"MKCP"
VERSION: Final = 1
_FIELDS = struct.Struct("<4sHBBBBHQQ")
HEADER_SIZE: Final = _FIELDS.size + 16
_NONCE, _TAG = 12, 16

Serializer = Literal["msgpack", "json"]
Compression = Literal["zstd", "zlib"]
_SERIALIZERS: dict[int, Serializer] = {1: "msgpack", 2: "json"}
_COMPRESSIONS: dict[int, Compression | None] = {0: None, 1: "zlib", 2: "zstd"}
_SERIALIZER_CODES = {name: code for code, name in _SERIALIZERS.items()}
_COMPRESSION_CODES = {name: code for code, name in _COMPRESSIONS.items()}
_ZLIB_LEVEL, _ZSTD_LEVEL = 1, 3
"""Fast levels: a checkpoint is written after every turn, and most of the gain comes at the first level."""

_encoders: dict[str, Callable[[Any], bytes]] = {
    "msgpack": msgspec.msgpack.Encoder().encode,
    "json": msgspec.json.Encoder().encode,
}
_ENCODE_ERRORS = (TypeError, msgspec.EncodeError, UnicodeEncodeError, OverflowError, RecursionError, ValueError)


def has_module(name: str) -> bool:
    """Installed, without importing it (``import memkit`` must not pay for zstandard or cryptography)."""
    return importlib.util.find_spec(name) is not None


def encode_value(value: object, serializer: Serializer) -> bytes:
    """``value`` serialized; a ValidationError says which type could not be (nothing was written)."""
    try:
        return _encoders[serializer](value)
    except _ENCODE_ERRORS as exc:
        raise ValidationError(
            f"a checkpoint holds values msgspec can encode as {serializer} (dicts, lists, str, numbers, "
            f"Structs, dataclasses, datetimes...); the {type(value).__name__} given could not be: {exc}"
        ) from exc


def decode_value(raw: bytes, serializer: Serializer, as_type: Any) -> Any:
    """The value ``raw`` holds, as ``as_type``; a SerializationError when it is malformed or another shape."""
    try:
        if serializer == "msgpack":
            return msgspec.msgpack.decode(raw, type=as_type)
        return msgspec.json.decode(raw, type=as_type)
    except msgspec.ValidationError as exc:
        raise SerializationError(f"the checkpoint does not hold a {_name(as_type)}: {exc}") from exc
    except TypeError:  # load() checked the type for MessagePack; JSON takes a few types fewer
        raise ValidationError(f"type {_name(as_type)} cannot be decoded from {serializer}") from None
    except (msgspec.DecodeError, RecursionError, ValueError, OverflowError) as exc:
        raise SerializationError(f"the checkpoint's {serializer} payload is malformed: {exc}") from exc


def _name(as_type: Any) -> str:
    name = getattr(as_type, "__name__", None)
    return name if isinstance(name, str) else short_repr(as_type)


class Header(msgspec.Struct, frozen=True, kw_only=True):
    serializer: Serializer
    compression: Compression | None
    encrypted: bool
    agent_state: bool
    raw_length: int
    stored_length: int


def read_header(blob: bytes, max_bytes: int) -> Header:
    """The header of ``blob``, every field and the checksum checked (``SerializationError`` otherwise)."""
    if len(blob) > max_bytes + HEADER_SIZE + _NONCE + _TAG:
        raise SerializationError(f"the checkpoint is {len(blob)} bytes; the limit is {max_bytes} (max_bytes)")
    if len(blob) < 6 or blob[:4] != MAGIC:
        raise SerializationError("not a memkit checkpoint (its first bytes are not the checkpoint magic)")
    version = int.from_bytes(blob[4:6], "little")
    if version > VERSION:
        raise SerializationError(f"the checkpoint has format version {version}; this memkit reads up to {VERSION}")
    if len(blob) < HEADER_SIZE:
        raise SerializationError(f"the checkpoint is truncated: {len(blob)} bytes, shorter than its header")
    _, version, serializer, compression, encryption, content, reserved, raw_length, stored = _FIELDS.unpack_from(blob)
    if stored != len(blob) - HEADER_SIZE:
        raise SerializationError(f"the checkpoint is truncated or padded: {len(blob) - HEADER_SIZE} payload bytes "
                                 f"where the header says {stored}")  # fmt: skip
    if not hmac.compare_digest(_checksum(blob[: _FIELDS.size], blob[HEADER_SIZE:]), blob[_FIELDS.size : HEADER_SIZE]):
        raise SerializationError("the checkpoint fails its checksum: it is damaged (torn write or changed bytes)")
    bad = version < 1 or reserved or serializer not in _SERIALIZERS or compression not in _COMPRESSIONS
    if bad or encryption not in (0, 1) or content not in (0, 1):
        raise SerializationError("the checkpoint's header has values this memkit does not know")
    if raw_length > max_bytes:
        raise SerializationError(f"the checkpoint holds {raw_length} bytes; the limit is {max_bytes} (max_bytes)")
    return Header(serializer=_SERIALIZERS[serializer], compression=_COMPRESSIONS[compression],
                  encrypted=bool(encryption), agent_state=bool(content), raw_length=raw_length,
                  stored_length=stored)  # fmt: skip


def _checksum(fields: bytes, payload: bytes) -> bytes:
    digest = hashlib.blake2b(fields, digest_size=16)
    digest.update(payload)
    return digest.digest()


class Sealer:
    """Turns serialized bytes into a blob and back, with the settings of one ``CheckpointConfig``."""

    def __init__(self, *, compression: Compression | None, min_compress_bytes: int, key: bytes | None,
                 max_bytes: int) -> None:  # fmt: skip
        self.compression = compression
        self.min_compress_bytes = min_compress_bytes
        self.max_bytes = max_bytes
        self._key = key
        self._aead: Any = None

    def seal(self, raw: bytes, serializer: Serializer, *, agent_state: bool, location: bytes) -> tuple[Header, bytes]:
        """The blob of ``raw`` (and its header): compressed when that makes it smaller, encrypted when a key
        is set."""
        compression, payload = self.compression, raw
        if compression is None or len(raw) < self.min_compress_bytes:
            compression = None
        else:
            payload = _compress(raw, compression)
            if len(payload) >= len(raw):  # incompressible: store it as it is
                compression, payload = None, raw
        encrypted = self._key is not None
        stored = len(payload) + (_NONCE + _TAG if encrypted else 0)
        codes = (_SERIALIZER_CODES[serializer], _COMPRESSION_CODES[compression], int(encrypted), int(agent_state))
        fields = _FIELDS.pack(MAGIC, VERSION, *codes, 0, len(raw), stored)
        if encrypted:
            nonce = os.urandom(_NONCE)
            payload = nonce + self._cipher().encrypt(nonce, payload, fields + location)
        header = Header(serializer=serializer, compression=compression, encrypted=encrypted, agent_state=agent_state,
                        raw_length=len(raw), stored_length=stored)  # fmt: skip
        return header, b"".join((fields, _checksum(fields, payload), payload))

    def open(self, blob: bytes, *, location: bytes, accept_plaintext: bool = False) -> tuple[Header, bytes]:
        """The header and the serialized bytes of ``blob``, every check of the module docstring passed."""
        header = read_header(blob, self.max_bytes)
        payload = memoryview(blob)[HEADER_SIZE:]
        if header.encrypted:
            payload = memoryview(self._decrypt(bytes(payload), blob[: _FIELDS.size] + location))
        elif self._key is not None and not accept_plaintext:
            raise SerializationError(
                "the checkpoint is not encrypted but an encryption key is configured: refused, since anyone "
                "who can write to the storage could have put it there (accept_plaintext=True allows it)"
            )
        if header.compression is None:
            raw = bytes(payload)
        else:
            raw = _decompress(payload, header.compression, header.raw_length)
        if len(raw) != header.raw_length:
            raise SerializationError(f"the checkpoint holds {len(raw)} bytes where its header says {header.raw_length}")
        return header, raw

    def _cipher(self) -> Any:
        if self._aead is None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._aead = AESGCM(self._key)  # type: ignore[arg-type]  # only called with a key
        return self._aead

    def _decrypt(self, payload: bytes, associated: bytes) -> bytes:
        if self._key is None:
            raise SerializationError("the checkpoint is encrypted; set CheckpointConfig(encryption_key=...) to load it")
        from cryptography.exceptions import InvalidTag

        try:
            return bytes(self._cipher().decrypt(payload[:_NONCE], payload[_NONCE:], associated))
        except (InvalidTag, ValueError) as exc:
            raise SerializationError(
                "the checkpoint does not decrypt: a wrong encryption key, or the blob was changed or moved"
            ) from exc


def _compress(raw: bytes, compression: Compression) -> bytes:
    if compression == "zlib":
        return zlib.compress(raw, _ZLIB_LEVEL)
    return bytes(_zstd().ZstdCompressor(level=_ZSTD_LEVEL, write_content_size=True).compress(raw))


def _decompress(payload: memoryview, compression: Compression, raw_length: int) -> bytes:
    """At most ``raw_length`` bytes out, whatever the stream claims: a zip bomb stops at the limit."""
    if compression == "zlib":
        inflate = zlib.decompressobj()
        try:
            out = inflate.decompress(payload, raw_length + 1)
        except zlib.error as exc:
            raise SerializationError(f"the checkpoint's zlib stream is damaged: {exc}") from exc
        if not inflate.eof or inflate.unused_data or len(out) != raw_length:
            raise SerializationError("the checkpoint's zlib stream does not hold the length its header says")
        return out
    zstandard = _zstd()
    try:  # decompress() trusts a frame's own content size: it must be the header's (bounded) length
        if zstandard.frame_content_size(payload) != raw_length:
            raise SerializationError("the checkpoint's zstd frame does not hold the length its header says")
        return bytes(zstandard.ZstdDecompressor().decompress(payload, max_output_size=raw_length))
    except zstandard.ZstdError as exc:
        raise SerializationError(f"the checkpoint's zstd frame is damaged: {exc}") from exc


def _zstd() -> Any:
    try:
        import zstandard
    except ImportError as exc:
        raise MissingDependencyError(
            "this checkpoint is zstd-compressed and zstandard is not installed; run: pip install 'memkit-sdk[zstd]'"
        ) from exc
    return zstandard
