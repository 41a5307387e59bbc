"""The distribution's name, for install hints. ``memkit`` on PyPI is an unrelated project: a hint must never
send a user there (``pip install -U 'memkit[redis]'`` would replace this package)."""

from __future__ import annotations

from typing import Final

__all__ = ["DISTRIBUTION", "install_hint"]

DISTRIBUTION: Final = "memkit-sdk"


def install_hint(extra: str) -> str:
    return f"pip install '{DISTRIBUTION}[{extra}]'"
