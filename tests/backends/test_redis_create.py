"""Redis create-if-absent: one script round trip for a new record, the general compare-and-set otherwise."""

from __future__ import annotations

import msgspec
import pytest
import redis

from memkit import open_backend
from memkit.testing import make_record
from tests.conftest import fresh_redis_url

pytestmark = pytest.mark.anyio


def calls(client: redis.Redis, command: str) -> int:
    stats = client.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


async def test_a_new_record_is_created_without_watch_and_a_present_one_is_not_overwritten(redis_url: str) -> None:
    url = fresh_redis_url(redis_url)
    client = redis.Redis.from_url(url.split("?")[0])
    async with open_backend(url) as backend:
        await backend.ensure_collection("c", 8)
        first = make_record("r1", seed=1, text="the blue teapot", fields={"kind": "fact", "tags": ("a", "b")})
        watches = calls(client, "watch")
        assert await backend.replace("c", first, expected_body=None)
        assert calls(client, "watch") == watches  # one script, no WATCH / reads / MULTI round trips
        [stored] = await backend.get("c", ["r1"])
        assert stored.body == first.body and stored.fields == first.fields and stored.text == first.text
        assert stored.vector is not None and (stored.vector == first.vector).all()
        # Present: a different record is refused, the same one again is a retry that succeeded.
        other = msgspec.structs.replace(make_record("r1", seed=2), body=b"another body")
        assert not await backend.replace("c", other, expected_body=None)
        assert await backend.replace("c", first, expected_body=None)
        assert calls(client, "watch") > watches  # those went through the general compare-and-set
        [kept] = await backend.get("c", ["r1"])
        assert kept.body == first.body
        # Found by the search index as an upserted record would be.
        assert await backend.count("c", first.scope) == 1
    client.close()
