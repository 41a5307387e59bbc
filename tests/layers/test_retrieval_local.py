"""Retrieval with the real packaged embedder on small, hand-written memories."""

from __future__ import annotations

import pytest

from memkit import Memkit
from memkit.embedders import CachedEmbedder

pytestmark = pytest.mark.anyio

MEMORIES = [
    ("preference", "I can't stand spicy food, please never suggest it."),
    ("fact", "My manager is Oyelaran Adebayo-Whitfield."),
    ("fact", "I moved to Denver last spring."),
    ("preference", "I like to run early in the morning before work."),
    ("fact", "Our product launch is planned for the second week of March."),
    ("decision", "We decided to use Kubernetes for the new cluster."),
]


async def test_paraphrase_rare_name_and_forgetting(store_url: str, local_embedder: CachedEmbedder) -> None:
    async with Memkit(store_url, embedder=local_embedder) as mem:
        ids = {}
        for kind, content in MEMORIES:
            result = await mem.long_term.store(content, user_id="u", kind=kind)
            assert result.memory is not None
            ids[content] = result.memory.id
        hits = await mem.long_term.recall("Which dishes would be a bad idea for dinner?", user_id="u", k=1)
        assert hits[0].memory.content == MEMORIES[0][1]
        hits = await mem.long_term.recall("Email Adebayo-Whitfield about it", user_id="u", k=1)
        assert hits[0].memory.content == MEMORIES[1][1]
        hits = await mem.long_term.recall("When do we ship the product?", user_id="u", k=1)
        assert hits[0].memory.content == MEMORIES[4][1]
        assert await mem.long_term.forget(ids[MEMORIES[2][1]], user_id="u")
        hits = await mem.long_term.recall("Which city do I live in?", user_id="u", k=6)
        assert MEMORIES[2][1] not in [hit.memory.content for hit in hits]
