"""A str Enum member as a user id is that user, in every layer: keys are built from its value, as the
encoders write it, so what it stored is read back as the plain id and ``forget_user`` erases all of it."""

from __future__ import annotations

import enum

import pytest

from memkit import Memkit
from memkit.embedders import HashingEmbedder

pytestmark = pytest.mark.anyio


class User(str, enum.Enum):  # noqa: UP042  # the pre-3.11 idiom: str() and f-strings spell a member "User.BOB"
    BOB = "bob"


async def _everything(mem: Memkit, user: str) -> dict[str, object]:
    return {
        "memories": [m.content for m in (await mem.long_term.list(user_id=user)).memories],
        "working": await mem.working.task("trip", user_id=user).get("passport"),
        "session": len(await mem.short_term.session("chat", user_id=user).history()),
        "checkpoint": await mem.checkpoints.load("chat", user_id=user, default=None),
        "graph": await mem.graph.to_context("Bob", user_id=user),
    }


async def test_an_enum_user_id_is_its_value_in_every_layer(embedded_url: str) -> None:
    async with Memkit(embedded_url, embedder=HashingEmbedder(64)) as mem:
        stored = await mem.long_term.store("Bob is allergic to shellfish", user_id=User.BOB)
        assert stored.memory is not None and type(stored.memory.scope.user_id) is str
        await mem.working.task("trip", user_id=User.BOB).set("passport", "X1234567")
        await mem.short_term.session("chat", user_id=User.BOB).add({"role": "user", "content": "hello"})
        await mem.checkpoints.save("chat", {"turn": 3}, user_id=User.BOB)
        await mem.graph.upsert_edge("Bob", "lives in", "Oslo", user_id=User.BOB)
        plain = await _everything(mem, "bob")
        assert plain == await _everything(mem, User.BOB)
        assert plain["memories"] == ["Bob is allergic to shellfish"] and plain["working"] == "X1234567"
        assert plain["session"] == 1 and plain["checkpoint"] == {"turn": 3} and "Oslo" in str(plain["graph"])
        gone = await mem.forget_user("bob")
        assert gone.memories == 1 and gone.working_items == 1 and gone.sessions == 1 and gone.checkpoint_keys >= 1
        assert await _everything(mem, User.BOB) == {"memories": [], "working": None, "session": 0,
                                                    "checkpoint": None, "graph": ""}  # fmt: skip
