"""The MCP tools: one decorated function each (see ``_registry.py``).

Each tool's parameters carry their descriptions (the JSON schema clients show a model); results are
TypedDicts, so each tool also publishes an output schema. Values are checked by memkit's own rules, so a
bad value comes back as a tool error with memkit's message. Every tool acts for the user the scoping
rule gives (``_scoping.py``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

import msgspec
from pydantic import Field
from typing_extensions import TypedDict  # pydantic reads TypedDicts from typing_extensions on 3.11

from memkit.mcp_server._registry import App, tool

__all__: list[str] = []

UserId = Annotated[
    str | None,
    Field(description="Whose memory. Omit it: the server acts for its configured user. Naming another user is "
                      "refused unless the server was started with --allow-any-user."),
]  # fmt: skip
Metadata = Annotated[dict[str, Any] | None, Field(description="JSON object stored with it (optional).")]
Kinds = Annotated[list[str] | None, Field(description='Only memories of these kinds (e.g. ["preference"]).')]


class MemoryOut(TypedDict):
    id: str
    kind: str
    content: str
    importance: float
    created_at: str
    metadata: dict[str, Any]


class HitOut(MemoryOut):
    score: float
    similarity: float
    lexical: float
    recency: float


def _memory(memory: Any) -> MemoryOut:
    return MemoryOut(id=memory.id, kind=memory.kind, content=memory.content, importance=memory.importance,
                     created_at=memory.created_at.isoformat(), metadata=memory.metadata)  # fmt: skip


# -- long-term memory -----------------------------------------------------------------------------------
class StoredOut(TypedDict):
    status: Literal["stored", "merged", "duplicate", "rejected"]
    memory_id: str | None
    reason: str | None


@tool(title="Remember a fact", layer="long_term")
async def remember(
    app: App,
    *,
    content: Annotated[str, Field(description="The memory, as one self-contained sentence.")],
    kind: Annotated[str, Field(description="fact, preference, decision, knowledge, task, or your own.")] = "fact",
    importance: Annotated[float, Field(description="How much it matters, 0..1.")] = 0.5,
    metadata: Metadata = None,
    ttl_s: Annotated[float | None, Field(description="Seconds until it expires (omit: kept).")] = None,
    user_id: UserId = None,
) -> StoredOut:
    """Store a long-term memory about the user: a fact, preference or decision worth recalling in later
    conversations. A near-duplicate of a stored memory updates it instead (status "merged")."""
    result = await app.mem.long_term.store(content, user_id=app.scoping.user(user_id), kind=kind,
                                           importance=importance, metadata=metadata, ttl=ttl_s)  # fmt: skip
    memory_id = None if result.memory is None else result.memory.id
    return StoredOut(status=result.status, memory_id=memory_id, reason=result.reason)


class HitsOut(TypedDict):
    hits: list[HitOut]


@tool(title="Recall memories", layer="long_term", read_only=True)
async def recall(
    app: App,
    *,
    query: Annotated[str, Field(description="What to look for, in plain words.")],
    k: Annotated[int, Field(description="How many memories at most (1..200).")] = 5,
    kinds: Kinds = None,
    min_score: Annotated[float | None, Field(description="Drop memories scoring below this.")] = None,
    user_id: UserId = None,
) -> HitsOut:
    """The user's memories that best match the query, best first, by meaning, shared words, recency and
    importance (each hit with its scores)."""
    hits = await app.mem.long_term.recall(query, user_id=app.scoping.user(user_id), k=k, kinds=kinds,
                                          min_score=min_score)  # fmt: skip
    return HitsOut(hits=[HitOut(**_memory(h.memory), score=h.score, similarity=h.similarity, lexical=h.lexical,
                                recency=h.recency) for h in hits])  # fmt: skip


class ForgottenOut(TypedDict):
    memory_id: str
    forgotten: bool


@tool(title="Forget a memory", layer="long_term", destructive=True, idempotent=True)
async def forget(
    app: App,
    *,
    memory_id: Annotated[str, Field(description="The id from recall or list_memories.")],
    user_id: UserId = None,
) -> ForgottenOut:
    """Delete one of the user's memories for good. forgotten is false when it did not exist."""
    done = await app.mem.long_term.forget(memory_id, user_id=app.scoping.user(user_id))
    return ForgottenOut(memory_id=memory_id, forgotten=done)


class PageOut(TypedDict):
    memories: list[MemoryOut]
    next_cursor: str | None


@tool(title="List memories", layer="long_term", read_only=True)
async def list_memories(
    app: App,
    *,
    limit: Annotated[int, Field(description="How many at most (1..1000).")] = 20,
    cursor: Annotated[str | None, Field(description="next_cursor of the previous page.")] = None,
    kinds: Kinds = None,
    newest_first: Annotated[bool, Field(description="Newest first (default) or oldest first.")] = True,
    user_id: UserId = None,
) -> PageOut:
    """The user's memories page by page; pass next_cursor back for the next page (null: no more)."""
    page = await app.mem.long_term.list(user_id=app.scoping.user(user_id), limit=limit, cursor=cursor, kinds=kinds,
                                        newest_first=newest_first)  # fmt: skip
    return PageOut(memories=[_memory(m) for m in page.memories], next_cursor=page.next_cursor)


# -- episodic memory ------------------------------------------------------------------------------------
class ActionIn(TypedDict):
    tool: str
    arguments: NotRequired[dict[str, Any]]
    result: NotRequired[str]
    ok: NotRequired[bool]
    error: NotRequired[str]


class EpisodeOut(TypedDict):
    episode_id: str


@tool(title="Record an episode", layer="episodic")
async def record_episode(
    app: App,
    *,
    trigger: Annotated[str, Field(description="The situation or request that started the task.")],
    outcome: Annotated[Literal["success", "failure", "partial"], Field(description="How it ended.")],
    actions: Annotated[list[ActionIn] | None, Field(description="The tool calls made, in order.")] = None,
    feedback: Annotated[str | None, Field(description="What the user said about the result.")] = None,
    lessons: Annotated[list[str] | None, Field(description="What to do differently (omit: derived).")] = None,
    tags: Annotated[list[str] | None, Field(description="Labels to filter by later.")] = None,
    user_id: UserId = None,
) -> EpisodeOut:
    """Record a finished task so later ones can learn from it: what triggered it, what was done, how it
    ended. Without lessons, they are derived from the failed actions and the feedback."""
    from memkit.layers.episodic import Action, Episode

    steps = [msgspec.convert(dict(a), Action) for a in actions or []]
    episode = Episode(trigger=trigger, outcome=outcome, actions=steps,
                      feedback=feedback, lessons=lessons or [], tags=tags or [])  # fmt: skip
    return EpisodeOut(episode_id=await app.mem.episodic.record(episode, user_id=app.scoping.user(user_id)))


class LessonsOut(TypedDict):
    lessons: str


@tool(title="Lessons from past episodes", layer="episodic", read_only=True)
async def lessons(
    app: App,
    *,
    situation: Annotated[str, Field(description="The task at hand.")],
    k: Annotated[int | None, Field(description="How many past episodes to draw on (default 5).")] = None,
    max_tokens: Annotated[int, Field(description="Budget of the rendered text.")] = 400,
    user_id: UserId = None,
) -> LessonsOut:
    """What past episodes like this situation teach, ready for a prompt ("Avoid: ..." for failures, "What
    worked: ..." for successes); empty when there is nothing to say."""
    text = await app.mem.episodic.lessons_for(situation, k=k, max_tokens=max_tokens,
                                              user_id=app.scoping.user(user_id))  # fmt: skip
    return LessonsOut(lessons=text)


# -- working memory -------------------------------------------------------------------------------------
TaskId = Annotated[str, Field(description="The task the state belongs to.")]


class WorkingSetOut(TypedDict):
    task_id: str
    key: str


@tool(title="Set task state", layer="working", idempotent=True)
async def working_set(
    app: App,
    *,
    task_id: TaskId,
    key: Annotated[str, Field(description="Name of the entry.")],
    value: Annotated[Any, Field(description="Any JSON value.")],
    importance: Annotated[float, Field(description="0..1; important entries are shown first.")] = 0.5,
    ttl_s: Annotated[float | None, Field(description="Seconds until it expires (omit: kept).")] = None,
    user_id: UserId = None,
) -> WorkingSetOut:
    """Set one entry of the current task's working state (replacing its value)."""
    task = app.mem.working.task(task_id, user_id=app.scoping.user(user_id))
    await task.set(key, value, importance=importance, ttl_s=ttl_s)
    return WorkingSetOut(task_id=task_id, key=key)


class WorkingItemOut(TypedDict):
    key: str
    value: Any
    importance: float
    set_at: float


class WorkingGetOut(TypedDict):
    task_id: str
    items: list[WorkingItemOut]


@tool(title="Get task state", layer="working", read_only=True)
async def working_get(
    app: App,
    *,
    task_id: TaskId,
    key: Annotated[str | None, Field(description="One entry (omit: every entry).")] = None,
    user_id: UserId = None,
) -> WorkingGetOut:
    """The task's working state: one entry or all of them, most important first (items is empty when
    the entry is not set)."""
    task = app.mem.working.task(task_id, user_id=app.scoping.user(user_id))
    found = [item for item in await task.items() if key is None or item.key == key]
    return WorkingGetOut(task_id=task_id, items=[WorkingItemOut(key=i.key, value=i.value, importance=i.importance,
                                                                set_at=i.set_at) for i in found])  # fmt: skip


# -- checkpoints ----------------------------------------------------------------------------------------
ThreadId = Annotated[str, Field(description="The conversation or run the checkpoints belong to.")]


class SavedOut(TypedDict):
    thread_id: str
    checkpoint_id: str


@tool(title="Save a checkpoint", layer="checkpoints")
async def checkpoint_save(
    app: App,
    *,
    thread_id: ThreadId,
    state: Annotated[Any, Field(description="The state to save: any JSON value.")],
    metadata: Metadata = None,
    user_id: UserId = None,
) -> SavedOut:
    """Save the agent's state as the thread's newest checkpoint, to resume from after a restart."""
    saved = await app.mem.checkpoints.save(thread_id, state, metadata=metadata, user_id=app.scoping.user(user_id))
    return SavedOut(thread_id=thread_id, checkpoint_id=saved)


class LoadedOut(TypedDict):
    thread_id: str
    checkpoint_id: str
    created_at: str
    state: Any


@tool(title="Load a checkpoint", layer="checkpoints", read_only=True)
async def checkpoint_load(
    app: App,
    *,
    thread_id: ThreadId,
    checkpoint_id: Annotated[str | None, Field(description="Which one (omit: the newest).")] = None,
    user_id: UserId = None,
) -> LoadedOut:
    """The thread's newest checkpoint (or the one named), with the state it saved."""
    from memkit.errors import NotFoundError

    user = app.scoping.user(user_id)
    listed = await app.mem.checkpoints.list(thread_id, user_id=user)
    info = next((c for c in listed if checkpoint_id in (None, c.id)), None)
    if info is None:
        what = "no checkpoint" if checkpoint_id is None else f"no checkpoint {checkpoint_id!r}"
        raise NotFoundError(f"thread {thread_id!r} has {what}")
    state = await app.mem.checkpoints.load(thread_id, info.id, user_id=user)
    return LoadedOut(thread_id=thread_id, checkpoint_id=info.id, created_at=info.created_at.isoformat(),
                     state=msgspec.to_builtins(state))  # fmt: skip


# -- knowledge graph ------------------------------------------------------------------------------------
class EdgeOut(TypedDict):
    source: str
    relation: str
    target: str
    attributes: dict[str, Any]
    valid_from: str | None
    valid_to: str | None


def _edge(edge: Any) -> EdgeOut:
    def moment(value: Any) -> str | None:
        return None if value is None else str(value.isoformat())

    return EdgeOut(source=edge.source, relation=edge.relation, target=edge.target, attributes=edge.attributes,
                   valid_from=moment(edge.valid_from), valid_to=moment(edge.valid_to))  # fmt: skip


@tool(title="State a relation", layer="graph", idempotent=True)
async def graph_upsert(
    app: App,
    *,
    source: Annotated[str, Field(description='The entity the relation starts from, e.g. "Ada".')],
    relation: Annotated[str, Field(description='What links them, e.g. "works_at" or "lives_in".')],
    target: Annotated[str, Field(description='The entity it points to, e.g. "Acme".')],
    attributes: Metadata = None,
    source_type: Annotated[str | None, Field(description='The source\'s type, e.g. "person".')] = None,
    target_type: Annotated[str | None, Field(description='The target\'s type, e.g. "company".')] = None,
    user_id: UserId = None,
) -> EdgeOut:
    """Record that source -[relation]-> target in the user's knowledge graph (either entity is created when
    unknown; a newer value of a one-valued relation such as lives_in ends the old one)."""
    edge = await app.mem.graph.upsert_edge(source, relation, target, attributes=attributes, source_type=source_type,
                                           target_type=target_type, user_id=app.scoping.user(user_id))  # fmt: skip
    return _edge(edge)


class NodeOut(TypedDict):
    name: str
    type: str | None
    attributes: dict[str, Any]


class SubgraphOut(TypedDict):
    root: str
    nodes: list[NodeOut]
    edges: list[EdgeOut]
    truncated: bool


@tool(title="What is related to an entity", layer="graph", read_only=True)
async def graph_related(
    app: App,
    *,
    name: Annotated[str, Field(description="The entity to start from (a name or one of its aliases).")],
    depth: Annotated[int | None, Field(description="How many hops (default 2).")] = None,
    relations: Annotated[list[str] | None, Field(description="Follow only these relations.")] = None,
    user_id: UserId = None,
) -> SubgraphOut:
    """The entities and relations within a few hops of an entity in the user's knowledge graph, holding now."""
    found = await app.mem.graph.related(name, depth=depth, relations=relations, user_id=app.scoping.user(user_id))
    return SubgraphOut(root=found.root.name, nodes=[NodeOut(name=n.name, type=n.type, attributes=n.attributes)
                                                    for n in found.nodes],
                       edges=[_edge(e) for e in found.edges], truncated=found.truncated)  # fmt: skip
