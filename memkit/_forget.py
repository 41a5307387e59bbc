"""Erasing one user from every layer at once: ``Memkit.forget_user``.

The record layers delete by scope (every memory, episode, graph node and edge whose user id is this one,
whatever its agent or session). The key-value layers key by ``key_of(user, agent, ...)``, length-prefixed,
so ``key_of(user)`` + ``|`` is a prefix that only this user's keys have (``"3:ada|"`` never matches
``"4:adam|"``): working memory, checkpoints and short-term sessions are deleted by that prefix, each on its
layer's own store. The tool cache is shared by every user (keyed by tool and arguments), so it is left alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from memkit._validation import check_text
from memkit.errors import CapabilityError, ConfigurationError, ScopeError
from memkit.layers._keys import key_of
from memkit.layers.checkpoints._layer import NAMESPACE as CHECKPOINTS
from memkit.layers.shortterm._state import SESSION_NAMESPACE
from memkit.layers.working import NAMESPACE as WORKING

if TYPE_CHECKING:
    from memkit._client import Memkit

__all__ = ["UserForgotten", "forget_user"]


class UserForgotten(msgspec.Struct, frozen=True, kw_only=True):
    """What ``forget_user`` deleted, per layer."""

    user_id: str
    memories: int
    episodes: int
    graph_items: int
    """Nodes and edges."""
    working_items: int
    checkpoint_keys: int
    """Each thread's saved checkpoints and its index."""
    sessions: int


async def forget_user(mem: Memkit, user_id: str) -> UserForgotten:
    user_id = check_text(user_id, "user_id", error=ScopeError)
    prefix = key_of(user_id) + "|"

    async def keys(layer: str, namespace: str) -> int:
        served = _served(mem, layer)
        return 0 if served is None else int(await served.backend.kv_delete_prefix(namespace, prefix))

    async def records(layer: str) -> int:
        served = _served(mem, layer)
        return 0 if served is None else int(await served.forget_all(user_id=user_id))

    async def graph() -> int:  # every graph of the user's: with each agent too
        served = _served(mem, "graph")
        return 0 if served is None else int(await served.erase_user(user_id))

    # Conversation state (sessions, checkpoints, tasks) first: a failure midway leaves memories rather than a
    # half-erased conversation for the agent to resume from; running it again finishes the job.
    sessions = await keys("short_term", SESSION_NAMESPACE)
    checkpoints = await keys("checkpoints", CHECKPOINTS)
    working = await keys("working", WORKING)
    return UserForgotten(user_id=user_id, memories=await records("long_term"), episodes=await records("episodic"),
                         graph_items=await graph(), working_items=working, checkpoint_keys=checkpoints,
                         sessions=sessions)  # fmt: skip


def _served(mem: Memkit, layer: str) -> Any:
    """The layer, or None where this store cannot serve it (then it holds nothing of anyone)."""
    try:
        return getattr(mem, layer)
    except (ConfigurationError, CapabilityError):
        return None
