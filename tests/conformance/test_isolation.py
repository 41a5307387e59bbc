"""Isolation under attack, on every backend that stores records.

Random users and memories; queries, filters and ids full of quotes, braces, ``|``, ``@``, ``*``,
``\\``, SQL fragments and RediSearch syntax. A user never gets another user's memory back, and
nothing raises but a memkit error.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memkit import MemkitError, open_backend
from memkit.backend import Backend, FilterValue, Query, Record, Scope

pytestmark = pytest.mark.anyio

NASTY = [
    "'", '"', "{", "}", "|", "@", "*", "\\", "%", "_", "-", "(", ")", "[", "]", ":", ";", "$", "~", "^",
    "' OR '1'='1", "'); DROP TABLE memkit_records; --", "@user_id:{bob}", "*=>[KNN 10 @emb $vec]",
    "alice} | @u:{bob", "1=1", "NEAR(a b)", "a AND NOT b", "\\x00", "\u202e", "\u00e9", "NULL",
]  # fmt: skip
text = st.lists(st.sampled_from([*NASTY, "alpha", "beta", "gamma", "secret"]), min_size=1, max_size=5).map(" ".join)
users = st.sampled_from(["alice", "bob", "bob'--", "{carol}", "dave|eve", "@mallory", "*"])
DIM = 8


def vector(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


memories = st.lists(st.tuples(users, text, st.integers(0, 1000)), min_size=1, max_size=12)
filters = st.dictionaries(
    st.sampled_from(["kind", "meta.tag", "x"]), st.one_of(text, st.lists(text, max_size=3)), max_size=2
)
queries = st.lists(st.tuples(users, text, filters), min_size=1, max_size=4)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(memories=memories, queries=queries, data=st.data())
async def test_no_cross_user_results(
    store_url: str,
    memories: list[tuple[str, str, int]],
    queries: list[tuple[str, str, dict[str, FilterValue]]],
    data: st.DataObject,
) -> None:
    collection = f"iso{data.draw(st.integers(0, 10**9))}"
    # Opened per example: hypothesis examples and anyio's fixture runner do not mix reliably.
    async with open_backend(store_url) as backend:
        await check_isolation(backend, collection, memories, queries)


async def check_isolation(
    backend: Backend,
    collection: str,
    memories: list[tuple[str, str, int]],
    queries: list[tuple[str, str, dict[str, FilterValue]]],
) -> None:
    await backend.ensure_collection(collection, DIM)
    records = [
        Record(id=f"{user}:{i}:{content[:8]}", scope=Scope(user_id=user), body=content.encode(), text=content,
               vector=vector(seed), importance=0.5, timestamp=time.time(),
               fields={"kind": content[:5], "meta.tag": user})
        for i, (user, content, seed) in enumerate(memories)
    ]  # fmt: skip
    await backend.upsert(collection, records)
    for user, query_text, filters in queries:
        scope = Scope(user_id=user)
        query = Query(scope=scope, vector=vector(len(query_text)), text=query_text, filters=filters, k=20,
                      now=time.time())  # fmt: skip
        try:
            hits = await backend.query(collection, query)
            page = await backend.scan(collection, scope, filters=filters or None, limit=50)
            got = await backend.get(collection, [r.id for r in records], scope)
        except MemkitError:
            continue  # a clear refusal is allowed; a leak or a foreign exception is not
        assert all(hit.record.scope.user_id == user for hit in hits)
        assert all(record.scope.user_id == user for record in page.records)
        own = {r.id for r in records if r.scope.user_id == user}
        assert {r.id for r in got} == own
