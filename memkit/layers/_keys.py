"""Keys built from ids users choose, made injective: two different id tuples never give one key.

Joining ids with a separator is not enough (``("a|b", "c")`` and ``("a", "b|c")`` meet), so each part is
length-prefixed; ``None`` has a mark of its own. The result has no NUL (ids with NUL are refused at
the layer), so it is a valid key on every backend.
"""

from __future__ import annotations

import hashlib

from memkit.backend import Scope

__all__ = ["digest_of", "key_of", "parse_key", "scope_key"]

_NONE = "-"


def key_of(*parts: str | None) -> str:
    """``key_of("ada", None, "main")`` -> ``"3:ada|-|4:main"``; injective over tuples of the same length."""
    return "|".join([_NONE if part is None else f"{len(part)}:{part}" for part in parts])  # a list joins faster


def parse_key(key: str) -> list[str | None]:
    """The parts of a ``key_of`` key (inverse of it); raises ValueError on anything else."""
    parts: list[str | None] = []
    at = 0
    while at < len(key):
        if key.startswith(_NONE, at):
            parts.append(None)
            at += len(_NONE)
        else:
            colon = key.index(":", at)
            size = int(key[at:colon])
            parts.append(key[colon + 1 : colon + 1 + size])
            at = colon + 1 + size
        if at < len(key):
            if key[at] != "|":
                raise ValueError(f"not a memkit key: {key!r}")
            at += 1
    return parts


def scope_key(scope: Scope) -> str:
    return key_of(scope.user_id, scope.agent_id, scope.session_id)


def digest_of(*parts: str | None, size: int = 16) -> str:
    """A fixed-size hex digest of ``key_of(*parts)``: for ids derived from content."""
    return hashlib.blake2b(key_of(*parts).encode(), digest_size=size).hexdigest()
