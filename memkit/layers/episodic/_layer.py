"""Episodic memory: what an agent did before in a similar situation, how it went, and what it learned."""

from __future__ import annotations

import builtins
import functools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import anyio.lowlevel
import msgspec

from memkit._concurrency import gather_bounded
from memkit._time import new_id, now_epoch, utcnow
from memkit._validation import check_flag, check_int, check_number, check_text, read_scope, require_scope
from memkit.backend import Backend, FilterValue, Query, Scope, Weights
from memkit.embedders import Embedder
from memkit.errors import NotFoundError, ValidationError
from memkit.layers._embedding import claim_collection, embed_texts
from memkit.layers.episodic._codec import decode, importance_of, index_text, owner_of, to_hit, to_record
from memkit.layers.episodic._lessons import heuristic_lessons, model_lessons
from memkit.layers.episodic._records import Episode, EpisodeHit, EpisodePage, EpisodicConfig, Outcome
from memkit.layers.episodic._render import render_lessons
from memkit.layers.episodic._retention import trim
from memkit.layers.episodic._validate import check_episode, check_outcomes, check_situation, check_tags
from memkit.tokens import EstimateTokenizer, Tokenizer

if TYPE_CHECKING:
    from memkit.llm import LLM

__all__ = ["EpisodicMemory"]

_MAX_BATCH: Final = 10_000
_MAX_LIST_LIMIT: Final = 1_000
_MAX_CURSOR_CHARS: Final = 16_384
_MODEL_CALLS_AT_ONCE: Final = 4
"""Episodes of one ``record_many`` whose lessons the model derives side by side."""


def _named_scope(user_id: str | None, agent_id: str | None, session_id: str | None, all_scopes: object) -> Scope:
    """The scope of a call that names or deletes episodes: ``all_scopes`` widens an agent's, never to none."""
    return read_scope(user_id, agent_id, session_id, all_scopes=check_flag(all_scopes, "all_scopes"), empty_ok=False)


def _filters(outcome: object, tags: object) -> dict[str, FilterValue]:
    wanted: dict[str, FilterValue] = {}
    if outcome is not None:
        wanted["outcome"] = tuple(check_outcomes(outcome))
    if tags is not None:
        wanted["tags"] = tuple(check_tags([tags] if isinstance(tags, str) else tags))
    return wanted


class EpisodicMemory:
    """Past tasks of a user (or agent), found again by how similar their situation is to a new one.

    ``record()`` stores an episode: its trigger and lessons are embedded and indexed for words, its
    importance says how instructive it is (explicit, or a failure with lessons > a failure without > a
    partial > a success), and an episode given without lessons gets them from ``llm`` when one is given,
    else from its failed actions and feedback. ``find_similar()`` ranks episodes by the store's hybrid score
    (similarity, words, recency, importance); ``lessons_for()`` renders them as prompt guidance.

    Scopes work as in long-term memory: every call needs ``user_id`` or ``agent_id``; reading across users
    (or by an agent id alone) needs ``all_scopes=True``. Retention (``EpisodicConfig.keep_last``, ``ttl``)
    is applied as episodes are recorded.
    """

    name = "episodic"
    needs: frozenset[str] = frozenset({"records", "kv", "vector_search", "filtered_scan"})

    def __init__(
        self, backend: Backend, embedder: Embedder, config: EpisodicConfig | None = None, *, llm: LLM | None = None
    ) -> None:
        if config is not None and not isinstance(config, EpisodicConfig):
            raise ValidationError(f"config must be an EpisodicConfig or None, got {type(config).__name__}")
        if llm is not None and not callable(getattr(llm, "structured", None)):
            raise ValidationError(f"llm must be a memkit.llm.LLM (with structured()), got {type(llm).__name__}")
        self.backend = backend
        self.embedder = embedder
        self.config = config or EpisodicConfig()
        self.llm = llm

    @property
    def _collection(self) -> str:
        return self.config.collection

    async def setup(self) -> None:
        """Create the collection, or check it holds vectors of this embedder (never a silent mix)."""
        await claim_collection(self.backend, self.embedder, self._collection, "EpisodicConfig")

    async def aclose(self) -> None:
        return None  # nothing runs in the background

    # -- writes -----------------------------------------------------------------------------------------
    async def record(
        self,
        episode: Episode,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
    ) -> str:
        """Store a finished episode; returns its id. Bad input raises before anything is written."""
        scope = require_scope(user_id, agent_id, session_id)
        [episode_id] = await self._record([check_episode(episode, self.config, utcnow())], scope)
        return episode_id

    async def record_many(
        self,
        episodes: Sequence[Episode],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
    ) -> builtins.list[str]:
        """Store many episodes of one scope at once (an agent's history, imported): one embedding call, one
        write, retention once. Ids in order; one bad episode raises before any is written."""
        scope = require_scope(user_id, agent_id, session_id)
        if isinstance(episodes, str | Episode) or not isinstance(episodes, Sequence):
            raise ValidationError("record_many takes a list of Episode")
        if len(episodes) > _MAX_BATCH:
            raise ValidationError(f"record_many takes at most {_MAX_BATCH:,} episodes at once, got {len(episodes)}")
        now = utcnow()
        checked = [check_episode(e, self.config, now, f"episodes[{i}]") for i, e in enumerate(episodes)]
        return await self._record(checked, scope) if checked else []

    async def _record(self, checked: builtins.list[Episode], scope: Scope) -> builtins.list[str]:
        finished = await self._with_lessons(checked)
        finished = [msgspec.structs.replace(e, id=new_id(), scope=scope, importance=importance_of(e))
                    for e in finished]  # fmt: skip
        vectors = await embed_texts(self.embedder, [index_text(e) for e in finished])
        records = [to_record(e, v, self.config.ttl) for e, v in zip(finished, vectors, strict=True)]
        await self.backend.upsert(self._collection, records)
        if self.config.keep_last is not None:
            await trim(self.backend, self._collection, owner_of(scope), self.config.keep_last, now_epoch())
        return [r.id for r in records]

    async def _with_lessons(self, episodes: builtins.list[Episode]) -> builtins.list[Episode]:
        """Each episode given without lessons, with lessons derived (by the model, else by the heuristic)."""
        missing = [at for at, e in enumerate(episodes) if not e.lessons]
        if not missing:
            return episodes
        derived: builtins.list[tuple[builtins.list[str] | None, Any]]
        if self.llm is not None:
            calls = [functools.partial(model_lessons, self.llm, episodes[at], self.config) for at in missing]
            derived = [(lessons, "model") for lessons in await gather_bounded(calls, _MODEL_CALLS_AT_ONCE)]
        else:
            derived = [(heuristic_lessons(episodes[at], self.config), "heuristic") for at in missing]
        done = builtins.list(episodes)
        for at, (lessons, source) in zip(missing, derived, strict=True):
            if lessons:
                done[at] = msgspec.structs.replace(episodes[at], lessons=lessons, lessons_source=source)
        return done

    async def forget(
        self,
        episode_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        all_scopes: bool = False,
    ) -> bool:
        """Delete one episode; False when there is none with this id in the scope."""
        scope = _named_scope(user_id, agent_id, session_id, all_scopes)
        episode_id = check_text(episode_id, "episode_id")
        return await self.backend.delete(self._collection, [episode_id], scope) > 0

    async def forget_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        all_scopes: bool = False,
    ) -> int:
        """Delete every episode of a user (or session); returns how many. An agent id alone reaches what
        every user recorded with that agent, so it takes ``all_scopes=True``."""
        scope = _named_scope(user_id, agent_id, session_id, all_scopes)
        total = 0
        while True:
            page = await self.backend.scan(self._collection, scope, limit=_MAX_LIST_LIMIT, all_scopes=all_scopes)
            deleted = await self.backend.delete(self._collection, [r.id for r in page.records], scope)
            if not deleted:  # nothing left, or nothing this scope may delete: never loop on it
                return total
            total += deleted

    async def sweep_expired(self) -> int:
        """Delete episodes past their ``ttl`` now (they are never found, swept or not)."""
        return await self.backend.delete_expired(self._collection, now_epoch())

    # -- reads ------------------------------------------------------------------------------------------
    async def get(
        self,
        episode_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        all_scopes: bool = False,
    ) -> Episode:
        """The episode with this id in the scope; ``NotFoundError`` when there is none (or it expired)."""
        scope = _named_scope(user_id, agent_id, session_id, all_scopes)
        episode_id = check_text(episode_id, "episode_id")
        await anyio.lowlevel.checkpoint()  # in-process backends never wait: let other tasks run
        for record in await self.backend.get(self._collection, [episode_id], scope):
            if not record.is_expired(now_epoch()):
                return decode(record)
        raise NotFoundError(f"no episode {episode_id!r} in scope {scope}")

    async def list(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        outcome: Outcome | Sequence[Outcome] | None = None,
        tags: str | Sequence[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
        newest_first: bool = True,
        all_scopes: bool = False,
    ) -> EpisodePage:
        """Episodes in a scope, newest first by ``ended_at`` (or oldest first); pass ``next_cursor`` back for
        the next page. ``outcome`` and ``tags`` filter as in ``find_similar``."""
        scope = read_scope(user_id, agent_id, session_id, all_scopes=check_flag(all_scopes, "all_scopes"))
        limit = check_int(limit, "limit", 1, _MAX_LIST_LIMIT)
        if cursor is not None:
            cursor = check_text(cursor, "cursor", _MAX_CURSOR_CHARS)
        page = await self.backend.scan(self._collection, scope, filters=_filters(outcome, tags), limit=limit,
                                       cursor=cursor, now=now_epoch(), all_scopes=all_scopes,
                                       newest_first=check_flag(newest_first, "newest_first"))  # fmt: skip
        return EpisodePage(episodes=[decode(r) for r in page.records], next_cursor=page.next_cursor)

    async def find_similar(
        self,
        situation: str,
        *,
        k: int | None = None,
        outcome: Outcome | Sequence[Outcome] | None = None,
        tags: str | Sequence[str] | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        min_score: float | None = None,
        weights: Weights | None = None,
        all_scopes: bool = False,
    ) -> builtins.list[EpisodeHit]:
        """The ``k`` (default 5) past episodes most like ``situation``, best first, with per-signal scores.

        ``outcome``: one of "success", "failure", "partial", or a list of them. ``tags``: a tag or a list;
        an episode matches when it has any of them."""
        scope = read_scope(user_id, agent_id, session_id, all_scopes=check_flag(all_scopes, "all_scopes"))
        text = check_situation(situation, self.config)
        k = check_int(self.config.default_k if k is None else k, "k", 1, self.config.max_k)
        if weights is not None and not isinstance(weights, Weights):
            raise ValidationError(f"weights must be a memkit.Weights, got {type(weights).__name__}")
        threshold = self.config.min_score if min_score is None else check_number(min_score, "min_score")
        wanted = _filters(outcome, tags)
        await anyio.lowlevel.checkpoint()
        [vector] = await embed_texts(self.embedder, [text])
        query = Query(
            scope=scope, all_scopes=all_scopes, vector=vector, text=text, filters=wanted, k=k,
            weights=weights or self.config.weights, now=now_epoch(),
            half_life_s=self.config.half_life_days * 86400.0,
            min_score=-math.inf if threshold is None else float(threshold),
        )  # fmt: skip
        return [to_hit(hit) for hit in await self.backend.query(self._collection, query)]

    async def lessons_for(
        self,
        situation: str,
        *,
        k: int | None = None,
        max_tokens: int = 400,
        tokenizer: Tokenizer | None = None,
        outcome: Outcome | Sequence[Outcome] | None = None,
        tags: str | Sequence[str] | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        min_score: float | None = None,
        all_scopes: bool = False,
    ) -> str:
        """What past experience says about ``situation``, ready for a prompt, within ``max_tokens`` (counted
        by ``tokenizer``, default ``EstimateTokenizer``): the ``k`` most similar episodes, best first, each
        failure as "Avoid: ..." (with what failed and its lesson), each success as "What worked: ...".
        "" when there is nothing to say."""
        max_tokens = check_int(max_tokens, "max_tokens", 1, 1_000_000)
        if tokenizer is None:
            tokenizer = EstimateTokenizer()
        elif not isinstance(tokenizer, Tokenizer):
            raise ValidationError(f"tokenizer must have count(text) -> int, got {type(tokenizer).__name__}")
        hits = await self.find_similar(situation, k=k, outcome=outcome, tags=tags, user_id=user_id,
                                       agent_id=agent_id, session_id=session_id, min_score=min_score,
                                       all_scopes=all_scopes)  # fmt: skip
        return render_lessons(hits, max_tokens, tokenizer)
