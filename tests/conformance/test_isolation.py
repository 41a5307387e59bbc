"""Isolation under attack, on every backend that stores records.

Random users and memories; queries, filters and ids full of quotes, braces, ``|``, ``@``, ``*``,
``\\``, SQL fragments and RediSearch syntax. A user never gets another user's memory back, and
nothing raises but a memkit error.

The key-value face: names full of separators (``|``, ``:``, ``\\x1f``, ``\\x01``), imitations of memkit's
length-prefixed keys and unicode never meet. Conversation threads with such names: no recall, list or get
(``Memory.context`` included) returns another user's text, and after ``forget`` / ``forget_all`` nothing of
a forgotten text is recallable by anyone or left in any record or thread state.
"""

from __future__ import annotations

import re
import time
from typing import Any

import anyio
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memkit import LongTermConfig, LongTermMemory, Memkit, MemkitError, Memory, NotFoundError, Turn, open_backend
from memkit.backend import Backend, FilterValue, Query, Record, Scope
from memkit.embedders import HashingEmbedder
from memkit.layers._turns import THREAD_NAMESPACE, thread_scope, thread_state_prefix

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


# -- the key-value face ------------------------------------------------------------------------------
# Names that imitate how keys are built: separators, the length prefixes of memkit/layers/_keys.py
# ("3:ada|-|4:main"), control characters some stores use as separators, and code points at the edges of
# UTF-8 (the order of kv_scan is code point order).
IMITATIONS = [
    "3:ada|-|4:main", "3:ada", "ada|-", "-", "1:-", "|-|", "0:", "1:|", "5:a|1:b", "a|1:b", "4:iso1|", "\x1f",
    "\x01", "a\x1fb", "a\x01b", ":", "|", "#0", "t#1", "a:b", "a|b", "\n", "日本", "🙂", "\u202e", "\uffff",
    "\U0010ffff", "é",
]  # fmt: skip
ID_ALPHABET = "|:-#\x1f\x01 \n0129aé日🙂\u202e\uffff\U0010ffff"
names = st.one_of(st.sampled_from(["", *IMITATIONS]), st.text(alphabet=ID_ALPHABET, max_size=6))
ids = st.one_of(st.sampled_from(IMITATIONS), st.text(alphabet=ID_ALPHABET, min_size=1, max_size=8))
NS_END = "~"
"""Ends the per-example tag of a namespace; not in ID_ALPHABET, so two examples' namespaces never meet."""


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(pairs=st.lists(st.tuples(names, names), min_size=1, max_size=16, unique=True), data=st.data())
async def test_kv_names_never_meet(store_url: str, pairs: list[tuple[str, str]], data: st.DataObject) -> None:
    """Every (namespace, key) pair is its own entry: get, scan, compare-and-set and deletes see only it."""
    tag = f"iso{time.time_ns()}{NS_END}"
    model = {(tag + ns, key): f"value {i} of {ns!r}/{key!r}".encode() for i, (ns, key) in enumerate(pairs)}
    async with open_backend(store_url) as backend:
        for (ns, key), value in model.items():
            await backend.kv_set(ns, key, value)
        await check_kv_model(backend, model, data)
        (ns, key), value = data.draw(st.sampled_from(sorted(model.items())), label="compare-and-set")
        others = [v for v in model.values() if v != value]
        if others:
            assert not await backend.kv_replace(ns, key, b"taken", expected=others[0])
        assert await backend.kv_delete(ns, key)
        del model[ns, key]
        await check_kv_model(backend, model, data)
        spaces = sorted({tag + ns for ns, _ in pairs})
        ns = data.draw(st.sampled_from(spaces), label="delete_prefix namespace")
        prefix = data.draw(prefixes_of([k for n, k in model if n == ns]), label="delete_prefix prefix")
        doomed = [(n, k) for n, k in model if n == ns and k.startswith(prefix)]
        assert await backend.kv_delete_prefix(ns, prefix) == len(doomed)
        for pair in doomed:
            del model[pair]
        await check_kv_model(backend, model, data, spaces)


def prefixes_of(keys: list[str]) -> st.SearchStrategy[str]:
    cut = [k[:i] for k in keys for i in range(len(k) + 1)]
    return st.sampled_from(sorted({"", *cut, *IMITATIONS[:6]}))


async def check_kv_model(
    backend: Backend, model: dict[tuple[str, str], bytes], data: st.DataObject, spaces: list[str] | None = None
) -> None:
    for (ns, key), value in model.items():
        assert await backend.kv_get(ns, key) == value, (ns, key)
    for ns in spaces or sorted({n for n, _ in model}):
        keys = [k for n, k in model if n == ns]
        prefix = data.draw(prefixes_of(keys), label="scan prefix")
        for wanted in ("", prefix):
            got = await kv_scan_all(backend, ns, wanted, limit=data.draw(st.integers(1, 5), label="limit"))
            assert got == [(k, model[ns, k]) for k in sorted(keys) if k.startswith(wanted)], (ns, wanted)


async def kv_scan_all(backend: Backend, namespace: str, prefix: str = "", limit: int = 100) -> list[tuple[str, bytes]]:
    items: list[tuple[str, bytes]] = []
    cursor = None
    while True:
        page = await backend.kv_scan(namespace, prefix=prefix, limit=limit, cursor=cursor)
        items += page.items
        if page.next_cursor is None:
            return items
        cursor = page.next_cursor


# -- conversation threads, recall, list, get, forget ---------------------------------------------------
TOKEN = re.compile(r"z\d+q\d+x")
"""Every text written below carries a token unique to it, naming its owner (no id or nasty text has one)."""
LINE_WORDS = [w for w in NASTY if "\n" not in w] + ["alpha", "beta", "gamma", "secret"]
"""Single-line turns (multi-line ones: ``test_forgetting_a_multiline_turn_leaves_no_copy``)."""
speakers = st.sampled_from(["user", "assistant", "a|b", "1:x", "日本"])
words = st.lists(st.sampled_from(LINE_WORDS), min_size=1, max_size=4).map(" ".join)
Owner = tuple[str, str | None]
"""(user, thread) of a token; thread None for a fact stored with store()."""


class World:
    """What was written, by whom; what must (not) come back."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.owner: dict[str, Owner] = {}
        self.memories: dict[str, tuple[str, str]] = {}  # id -> (user, content)
        self.forgotten: set[str] = set()  # tokens
        self.written: list[str] = []  # every text, in the order written

    def text(self, body: str, owner: Owner) -> str:
        token = f"z{self.tag}q{len(self.owner)}x"
        self.owner[token] = owner
        self.written.append(f"{body} {token}")
        return self.written[-1]

    def ids_of(self, user: str) -> set[str]:
        return {i for i, (u, _) in self.memories.items() if u == user}

    def in_order(self) -> list[str]:
        """Memory ids in the order their texts were written: ids are random, and hypothesis replays a test
        case's draws, so what it draws from must not depend on them."""
        return sorted(self.memories, key=lambda i: int(TOKEN.findall(self.memories[i][1])[0][len(self.tag) + 2 : -1]))

    def check(self, memory: Memory, user: str) -> None:
        """``memory``, returned to ``user``: the user's own, and every token in it from its own thread."""
        assert memory.scope.user_id == user, (memory.scope, user)
        assert memory.id in self.memories and self.memories[memory.id][0] == user
        thread = memory.metadata.get("thread") if memory.kind == "turn" else None
        for token in TOKEN.findall(memory.content):
            assert self.owner[token] == (user, thread), (token, self.owner[token], user)
        for token in TOKEN.findall(memory.context or ""):
            assert self.owner[token] == (user, thread), (token, self.owner[token], user, "in context")
        assert not self.forgotten & set(TOKEN.findall(f"{memory.content} {memory.context}")), "forgotten text"


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(users=st.lists(ids, min_size=2, max_size=4, unique=True), threads=st.lists(ids, min_size=1, max_size=3),
       context_turns=st.integers(0, 2), data=st.data())  # fmt: skip
async def test_threads_recall_and_forget_never_cross_users(
    store_url: str, users: list[str], threads: list[str], context_turns: int, data: st.DataObject
) -> None:
    world = World(str(time.time_ns()))
    config = LongTermConfig(collection=f"threads{world.tag}", context_turns=context_turns)
    async with Memkit(store_url, embedder=HashingEmbedder(64), long_term=config) as mem:
        lt = mem.long_term
        await write_turns_and_facts(lt, world, users, threads, data)
        await check_views(lt, world, users, data)
        await forget_some(lt, world, users, data)
        await check_views(lt, world, users, data)
        await check_forgotten_gone(mem, world, users)
        for user in users:  # a thread continued after forgetting: its new turns' context holds no forgotten text
            for thread in threads:
                [turn] = await lt.add_turns([Turn(speaker="user", text=world.text("again", (user, thread)))],
                                            user_id=user, thread=thread)  # fmt: skip
                world.memories[turn.id] = (user, turn.content)
                world.check(turn, user)
        await check_forgotten_gone(mem, world, users)


async def write_turns_and_facts(
    lt: LongTermMemory, world: World, users: list[str], threads: list[str], data: st.DataObject
) -> None:
    """Random users add turns to random threads, concurrently; then facts are stored."""
    batches = data.draw(st.lists(st.tuples(st.sampled_from(users), st.none() | st.sampled_from(threads),
                                           st.lists(st.tuples(speakers, words), min_size=1, max_size=3)),
                                 min_size=1, max_size=8), label="turns")  # fmt: skip
    facts = data.draw(st.lists(st.tuples(st.sampled_from(users), words), max_size=4), label="facts")

    async def add(user: str, thread: str | None, said: list[tuple[str, str]]) -> None:
        turns = [Turn(speaker=s, text=world.text(w, (user, thread or "main"))) for s, w in said]
        for memory in await lt.add_turns(turns, user_id=user, thread=thread):
            world.memories[memory.id] = (user, memory.content)

    async def store(user: str, body: str) -> None:
        result = await lt.store(world.text(body, (user, None)), user_id=user)
        if result.status in ("stored", "merged"):  # a merge rewrote the memory's content
            assert result.memory is not None
            world.memories[result.memory.id] = (user, result.memory.content)

    async with anyio.create_task_group() as group:
        for user, thread, said in batches:
            group.start_soon(add, user, thread, said)
    for user, body in facts:  # one at a time: whether a fact merges must not depend on the tasks' interleaving
        await store(user, body)


async def check_views(lt: LongTermMemory, world: World, users: list[str], data: st.DataObject) -> None:
    """Each user's list is exactly their own; recall and get return nothing of anyone else's."""
    # Queries come from every text written, not from what is stored: whether two texts merge depends on their
    # tokens, which carry the time (hypothesis replays a test case with another tag), so the stored contents'
    # count varied between replays of one case ("Inconsistent data generation", once in a CI run).
    contents = world.written or ["alpha"]
    for user in users:
        listed = await list_all(lt, user_id=user)
        assert {m.id for m in listed} == world.ids_of(user)
        for memory in listed:
            world.check(memory, user)
        for query in data.draw(st.lists(st.sampled_from(contents), min_size=1, max_size=3), label="queries"):
            for hit in await lt.recall(query, user_id=user, k=50):
                world.check(hit.memory, user)
        for memory_id, (owner, _) in world.memories.items():
            if owner == user:
                world.check(await lt.get(memory_id, user_id=user), user)
            else:
                with pytest.raises(NotFoundError):
                    await lt.get(memory_id, user_id=user)


async def list_all(lt: LongTermMemory, **scope: Any) -> list[Memory]:
    memories: list[Memory] = []
    cursor = None
    while True:
        page = await lt.list(limit=7, cursor=cursor, **scope)
        memories += page.memories
        if page.next_cursor is None:
            return memories
        cursor = page.next_cursor


async def forget_some(lt: LongTermMemory, world: World, users: list[str], data: st.DataObject) -> None:
    """Forget a few memories one by one, then maybe every memory of one user."""
    # Picks drawn as numbers, not from the memories: how many there are depends on merges (see check_views).
    order = world.in_order()
    picks = data.draw(st.lists(st.integers(0, 2**16), max_size=4), label="forget")
    chosen = list(dict.fromkeys(order[pick % len(order)] for pick in picks)) if order else []
    for memory_id in chosen:
        user, content = world.memories.pop(memory_id)
        assert await lt.forget(memory_id, user_id=user)
        assert not await lt.forget(memory_id, user_id=user)
        world.forgotten |= set(TOKEN.findall(content))
    wiped = data.draw(st.none() | st.sampled_from(users), label="forget_all")
    if wiped is not None:
        doomed = world.ids_of(wiped)
        assert await lt.forget_all(user_id=wiped) == len(doomed)
        for memory_id in doomed:
            world.forgotten |= set(TOKEN.findall(world.memories.pop(memory_id)[1]))


async def check_forgotten_gone(mem: Memkit, world: World, users: list[str]) -> None:
    """Nothing of a forgotten text is recallable by anyone, nor left in any record or thread state."""
    lt = mem.long_term
    for token in sorted(world.forgotten):
        for scope in [{"user_id": u} for u in users] + [{"all_scopes": True}]:
            hits = await lt.recall(f"alpha {token}", k=50, **scope)
            assert not any(token in f"{h.memory.content} {h.memory.context}" for h in hits), (token, scope)
    everyone = await list_all(lt, all_scopes=True)
    assert {m.id for m in everyone} == set(world.memories)
    backend, collection = mem.backend, lt.config.collection
    records, cursor = [], None
    while True:
        page = await backend.scan(collection, Scope(), limit=100, cursor=cursor, all_scopes=True)
        records += page.records
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    for record in records:
        left = set(TOKEN.findall(f"{record.body.decode()} {record.text} {record.fields}")) & world.forgotten
        assert not left, f"record {record.id} still holds forgotten text {left}"
    states = await kv_scan_all(backend, THREAD_NAMESPACE)
    for key, value in states:
        left = set(TOKEN.findall(f"{key} {value.decode()}")) & world.forgotten
        assert not left, f"thread state {key!r} still holds forgotten text {left}"
    for key, _ in states:  # every thread state of this collection parses back to a thread that was written
        found = thread_scope(collection, key)
        if key.startswith(thread_state_prefix(collection)):
            assert found is not None and (found[0].user_id, found[1]) in set(world.owner.values()), key


# -- a defect the tests above led to (fixed: forget() cut a turn out of later contexts line by line) --------
async def test_forgetting_a_multiline_turn_leaves_no_copy(store_url: str) -> None:
    """A context is earlier turns joined by newlines, and a turn may hold newlines itself."""
    async with Memkit(store_url, embedder=HashingEmbedder(64)) as mem:
        lt = mem.long_term
        said, answer = await lt.add_turns([Turn(speaker="ann", text="my pin is\n4321 zebra"),
                                           Turn(speaker="bot", text="noted")], user_id="ann")  # fmt: skip
        assert answer.context == said.content
        assert await lt.forget(said.id, user_id="ann")
        hits = await lt.recall("4321 zebra", user_id="ann")
        assert not any("zebra" in f"{h.memory.content} {h.memory.context}" for h in hits)
