"""Values quoted in error messages, made short and safe to print."""

from __future__ import annotations

import reprlib

__all__ = ["short_repr"]

_REPR = reprlib.Repr()  # limits set below: Repr takes them as arguments from Python 3.12 on
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, 60, 60
_REPR.maxlist = _REPR.maxdict = _REPR.maxtuple = _REPR.maxset = 4
"""A value nested 10,000 deep made a plain ``repr`` in an error message raise RecursionError instead."""


def short_repr(value: object) -> str:
    """``repr(value)`` cut to about 60 characters and three levels of nesting; never raises."""
    try:
        text = _REPR.repr(value)
    except Exception:  # a caller's __repr__ that raises: say what the value is instead
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."
