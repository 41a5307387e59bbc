"""Opaque keyset cursors of the embedded backends: urlsafe base64 of a JSON value.

A record scan's cursor is the last ``(timestamp, id)`` seen; a key-value scan's is the last key.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import msgspec

from memkit.errors import ValidationError

__all__ = ["decode_key_cursor", "decode_scan_cursor", "encode_key_cursor", "encode_scan_cursor"]

_scan_decoder = msgspec.json.Decoder(tuple[float, str])
_key_decoder = msgspec.json.Decoder(str)


def _encode(value: Any) -> str:
    return base64.urlsafe_b64encode(msgspec.json.encode(value)).decode("ascii")


def _decode(cursor: object, decoder: msgspec.json.Decoder[Any]) -> Any:
    if not isinstance(cursor, str):
        raise ValidationError(f"a cursor is a string from a previous page, got {type(cursor).__name__}")
    try:
        return decoder.decode(base64.urlsafe_b64decode(cursor.encode("ascii")))
    except (binascii.Error, UnicodeEncodeError, ValueError, msgspec.DecodeError) as exc:
        raise ValidationError(f"malformed cursor {cursor[:40]!r}: pass back a next_cursor unchanged") from exc


def encode_scan_cursor(timestamp: float, record_id: str) -> str:
    return _encode([timestamp, record_id])


def decode_scan_cursor(cursor: object) -> tuple[float, str]:
    timestamp, record_id = _decode(cursor, _scan_decoder)
    if "\x00" in record_id:  # no id holds NUL (one rule on every backend): not a cursor memkit wrote
        raise ValidationError(f"malformed cursor {str(cursor)[:40]!r}: pass back a next_cursor unchanged")
    return float(timestamp), record_id


def encode_key_cursor(key: str) -> str:
    return _encode(key)


def decode_key_cursor(cursor: object) -> str:
    key: str = _decode(cursor, _key_decoder)
    return key
