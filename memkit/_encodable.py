"""Whether text can be stored: every backend writes UTF-8, which has no lone surrogates."""

from __future__ import annotations

__all__ = ["encodable"]


def encodable(text: str) -> bool:
    """False for text holding a lone surrogate (``"\\ud800"``, from bytes decoded with ``surrogateescape``)."""
    if text.isascii():  # most text, checked without encoding a copy
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True
