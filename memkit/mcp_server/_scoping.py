"""Whose memories an MCP call reads and writes.

The rule: the server is started for one user (``--user-id``, else ``$MEMKIT_USER_ID``, else ``"default"``),
and every tool call and resource read acts for that user. A tool's ``user_id`` argument may be omitted or
repeat that id; any other id is refused with a tool error, so a client cannot reach another user's
memories by naming them. Only a server started with ``--allow-any-user`` (for a trusted client that
serves many users itself) lets the argument choose the user; omitted, it is still the server's user.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from memkit.errors import ScopeError

__all__ = ["DEFAULT_USER", "Scoping"]

DEFAULT_USER = "default"


@dataclass(frozen=True)
class Scoping:
    user_id: str
    allow_any_user: bool = False

    @classmethod
    def from_options(cls, user_id: str | None, allow_any_user: bool) -> Scoping:
        chosen = user_id if user_id is not None else os.environ.get("MEMKIT_USER_ID") or DEFAULT_USER
        if not chosen.strip():  # an empty --user-id is a mistake, not a request for the default user
            raise ScopeError("the server's user id is empty; pass --user-id NAME")
        return cls(chosen, allow_any_user)

    def user(self, requested: str | None) -> str:
        """The user a call acts for, by the rule above."""
        if requested is None or requested == self.user_id:
            return self.user_id
        if not self.allow_any_user:
            raise ScopeError(
                f"this server acts for user {self.user_id!r} only; a call cannot name another user "
                "(start the server with --allow-any-user to let clients choose)"
            )
        return requested
