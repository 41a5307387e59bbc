"""Layer conformance for episodic memory: its behaviours on a backend, so an adapter proves the layer works on
it, not only the contract. Provide an async ``backend`` fixture yielding an open, empty backend."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import anyio
import pytest

from memkit._time import utcnow
from memkit.backend import Backend
from memkit.embedders import HashingEmbedder
from memkit.errors import ConfigurationError, NotFoundError, ScopeError, ValidationError
from memkit.layers._base import Layer, missing_capabilities
from memkit.layers.episodic import Action, Episode, EpisodicConfig, EpisodicMemory, Outcome

__all__ = ["EpisodicConformance"]


async def _layer(backend: Backend, config: EpisodicConfig | None = None) -> EpisodicMemory:
    layer = EpisodicMemory(backend, HashingEmbedder(64), config)
    await layer.setup()
    return layer


def _episode(trigger: str, minutes_ago: float = 0.0, outcome: Outcome = "success", **fields: Any) -> Episode:
    """An episode that took 30 seconds and ended ``minutes_ago``."""
    ended = utcnow() - timedelta(minutes=minutes_ago)
    return Episode(trigger=trigger, outcome=outcome, ended_at=ended, started_at=ended - timedelta(seconds=30),
                   **fields)  # fmt: skip


class EpisodicConformance:
    pytestmark = pytest.mark.anyio

    async def test_record_get_forget(self, backend: Backend) -> None:
        ep = await _layer(backend)
        assert isinstance(ep, Layer) and missing_capabilities(ep.needs, backend.capabilities) == []
        given = _episode("refund a duplicate card payment", outcome="partial", tags=["billing"], feedback="slow",
                         lessons=["ask for the last four digits first"], metadata={"ticket": 7},
                         actions=[Action(tool="refund", arguments={"amount": 12.5}, ok=False,
                                         error="limit")])  # fmt: skip
        episode_id = await ep.record(given, user_id="ada", session_id="s1")
        got = await ep.get(episode_id, user_id="ada")
        assert got.id == episode_id and got.scope is not None and got.scope.session_id == "s1"
        assert (got.trigger, got.outcome, got.tags, got.metadata) == (given.trigger, "partial", ["billing"],
                                                                      {"ticket": 7})  # fmt: skip
        assert got.actions == given.actions and got.lessons == given.lessons and got.lessons_source == "caller"
        assert got.ended_at == given.ended_at and got.started_at == given.started_at
        assert await ep.forget(episode_id, user_id="ada") is True
        with pytest.raises(NotFoundError):
            await ep.get(episode_id, user_id="ada")
        assert await ep.forget(episode_id, user_id="ada") is False

    async def test_find_similar_ranks_and_filters(self, backend: Backend) -> None:
        ep = await _layer(backend)
        await ep.record(_episode("deploy the billing service to staging", outcome="failure", tags=["deploy"]),
                        user_id="u")  # fmt: skip
        await ep.record(_episode("deploy the search service to production", tags=["deploy", "prod"]), user_id="u")
        await ep.record(_episode("write the weekly newsletter", tags=["writing"]), user_id="u")
        hits = await ep.find_similar("deploy billing service staging", user_id="u", k=3)
        assert hits[0].episode.trigger == "deploy the billing service to staging"
        assert hits[0].score >= hits[1].score >= hits[2].score
        wins = await ep.find_similar("deploy billing service staging", user_id="u", outcome="success", k=5)
        assert {h.episode.outcome for h in wins} == {"success"} and len(wins) == 2
        prod = await ep.find_similar("deploy", user_id="u", tags=["prod", "nothing"], k=5)
        assert [h.episode.trigger for h in prod] == ["deploy the search service to production"]
        assert len(await ep.find_similar("deploy", user_id="u", tags="deploy", k=5)) == 2

    async def test_users_are_isolated(self, backend: Backend) -> None:
        ep = await _layer(backend)
        ada = await ep.record(_episode("reset the router password"), user_id="ada")
        await ep.record(_episode("plan the garden beds"), user_id="bob")
        assert all(h.episode.scope.user_id == "bob"  # type: ignore[union-attr]
                   for h in await ep.find_similar("router password", user_id="bob", k=10))  # fmt: skip
        with pytest.raises(NotFoundError):
            await ep.get(ada, user_id="bob")
        assert await ep.forget(ada, user_id="bob") is False
        assert [e.id for e in (await ep.list(user_id="bob")).episodes] != [ada]
        with pytest.raises(ScopeError):
            await ep.find_similar("router password")
        hits = await ep.find_similar("router password garden", all_scopes=True, k=10)
        assert {h.episode.scope.user_id for h in hits} == {"ada", "bob"}  # type: ignore[union-attr]

    async def test_an_agent_id_alone_reads_across_users_only_when_asked(self, backend: Backend) -> None:
        ep = await _layer(backend)
        ada = await ep.record(_episode("rebook a cancelled train"), user_id="ada", agent_id="bot")
        await ep.record(_episode("rebook a missed train"), user_id="bob", agent_id="bot")
        await ep.record(_episode("trains can be rebooked online"), agent_id="bot")
        refused = [ep.find_similar("train", agent_id="bot"), ep.get(ada, agent_id="bot"),
                   ep.forget(ada, agent_id="bot"), ep.list(agent_id="bot"), ep.forget_all(all_scopes=True)]  # fmt: skip
        for call in refused:
            with pytest.raises(ScopeError):
                await call
        hits = await ep.find_similar("train", agent_id="bot", all_scopes=True, k=10)
        assert {h.episode.scope.user_id for h in hits} == {"ada", "bob", None}  # type: ignore[union-attr]
        assert await ep.forget_all(user_id="ada") == 1
        assert await ep.forget_all(agent_id="bot", all_scopes=True) == 2

    async def test_keep_last_deletes_the_oldest_of_one_owner(self, backend: Backend) -> None:
        ep = await _layer(backend, EpisodicConfig(keep_last=3))
        for i in range(5):  # ended 50, 40, ... 10 minutes ago; sessions of one user are counted together
            await ep.record(_episode(f"task number {i}", minutes_ago=50 - 10 * i), user_id="u", session_id=f"s{i}")
        await ep.record(_episode("bob's only task"), user_id="u2")
        await ep.record(_episode("the agent's own task"), user_id="u", agent_id="bot")
        kept = [e.trigger for e in (await ep.list(user_id="u", agent_id=None, limit=10)).episodes]
        assert kept == ["the agent's own task", "task number 4", "task number 3", "task number 2"]
        assert len((await ep.list(user_id="u2")).episodes) == 1
        late = await ep.record(_episode("backfilled, older than every kept one", minutes_ago=500), user_id="u")
        with pytest.raises(NotFoundError):  # not among the newest three: retention takes it at once
            await ep.get(late, user_id="u")

    async def test_keep_last_under_concurrent_writers(self, backend: Backend) -> None:
        """Two clients (as two processes would be) each record 6 episodes, side by side: the 4 newest always
        survive, no more than 4 + 2 (one per writer) are left, and the next record trims to exactly 4."""
        config = EpisodicConfig(keep_last=4)
        clients = [await _layer(backend, config), await _layer(backend, config)]

        async def writer(parity: int) -> None:
            for i in range(parity, 12, 2):
                await clients[parity].record(_episode(f"parallel task {i}", minutes_ago=100 - i), user_id="u")

        async with anyio.create_task_group() as group:
            for parity in (0, 1):
                group.start_soon(writer, parity)
        left = {e.trigger for e in (await clients[0].list(user_id="u", limit=100)).episodes}
        assert {f"parallel task {i}" for i in range(8, 12)} <= left and len(left) <= 4 + 2
        await clients[1].record(_episode("one more", minutes_ago=1), user_id="u")
        left = {e.trigger for e in (await clients[0].list(user_id="u", limit=100)).episodes}
        assert left == {"one more", "parallel task 11", "parallel task 10", "parallel task 9"}

    async def test_ttl_expires_episodes(self, backend: Backend) -> None:
        ep = await _layer(backend, EpisodicConfig(ttl=timedelta(hours=1)))
        old = await ep.record(_episode("an old hotel booking", minutes_ago=120), user_id="u")
        await ep.record(_episode("a new hotel booking"), user_id="u")
        assert [h.episode.trigger for h in await ep.find_similar("hotel booking", user_id="u")] == [
            "a new hotel booking"]  # fmt: skip
        with pytest.raises(NotFoundError):
            await ep.get(old, user_id="u")
        assert await ep.sweep_expired() == 1

    async def test_a_bad_episode_in_a_batch_writes_nothing(self, backend: Backend) -> None:
        ep = await _layer(backend)
        good = _episode("fine")
        bad = Episode(trigger="bad", outcome="success", actions=[Action(tool="t", latency_s=float("nan"))])
        with pytest.raises(ValidationError, match=r"episodes\[1\]\.actions\[0\]\.latency_s"):
            await ep.record_many([good, bad], user_id="u")
        assert (await ep.list(user_id="u")).episodes == []
        assert len(await ep.record_many([good, good], user_id="u")) == 2

    async def test_another_embedder_is_refused(self, backend: Backend) -> None:
        await _layer(backend)
        other = EpisodicMemory(backend, HashingEmbedder(32))
        with pytest.raises(ConfigurationError, match="embedder"):
            await other.setup()
