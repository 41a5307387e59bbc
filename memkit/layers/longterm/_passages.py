"""Extra keys for conversation turns: passages of long turns (and, optionally, facts read from a turn).

The dense model sees only its window (all-MiniLM-L6-v2: 256 word pieces, about 180 words); past it a turn's
words are invisible to the similarity signal. A turn whose indexed text (its context and content) is longer
than the window gets keys: its content cut into overlapping passages that each fit. Keys are records of a
collection of their own (``<collection>_keys``, so ``list``, ``count`` and export see only memories), each with
its own vector and text, the turn's scope, timestamp, importance, expiry and fields, and the turn's id in
``parent``. Recall scores keys beside turns and folds them back: a turn is returned once, with the similarity of
its best key or its own, whichever is higher. Keys are derived data: forgetting or changing a turn rewrites them.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import msgspec

from memkit.backend import Backend, Hit, Query, Record, Weights
from memkit.layers._turns import TURN_KEY
from memkit.layers.longterm._codec import record_fields
from memkit.layers.longterm._records import Memory

__all__ = [
    "DEFAULT_PASSAGE_WORDS",
    "PARENT",
    "delete_keys",
    "fold_keys",
    "key_records",
    "keys_collection",
    "passage_words",
    "passages",
]

PARENT: Final = "parent"
"""Key record field: the id of the memory (turn) the key stands for."""
DEFAULT_PASSAGE_WORDS: Final = 150
"""Words per passage when the embedder does not say its window: all-MiniLM-L6-v2's 256 word pieces hold about
180 English words, fewer for rare words, numbers and names, which split into several pieces."""
_WORDS_PER_TOKEN: Final = 0.6
"""A window given in tokens, in words: conservative (English prose runs ~0.75 words a word piece)."""
_WORD: Final = re.compile(r"\S+")
Embed = Callable[[list[str]], Awaitable[Any]]


def keys_collection(collection: str) -> str:
    return f"{collection}_keys"


def passage_words(embedder: object, configured: int | None) -> int:
    """Words per passage: the configured number, else the embedder's window (``window`` in tokens, on it or
    on the embedder it wraps), else ``DEFAULT_PASSAGE_WORDS``."""
    if configured is not None:
        return configured
    seen = 0
    while embedder is not None and seen < 4:
        window = getattr(embedder, "window", None)
        if isinstance(window, int) and not isinstance(window, bool) and window > 16:
            return max(16, int(window * _WORDS_PER_TOKEN))
        embedder = getattr(embedder, "inner", None)
        seen += 1
    return DEFAULT_PASSAGE_WORDS


def passages(text: str, words: int) -> list[str]:
    """``text`` cut into passages of at most ``words`` words, each overlapping the one before by a fifth (a
    sentence cut at a border is whole in one of them); one passage when it fits."""
    spans = [m.span() for m in _WORD.finditer(text)]
    if len(spans) <= words:
        return [text]
    stride = max(1, words - words // 5)
    found = []
    for start in range(0, len(spans), stride):
        chunk = spans[start : start + words]
        found.append(text[chunk[0][0] : chunk[-1][1]])
        if start + words >= len(spans):
            break
    return found


def key_texts(memory: Memory, indexed: str, words: int, extra: Sequence[str] = ()) -> list[str]:
    """The keys of one turn: passages of its content when its indexed text is longer than the window, and
    ``extra`` keys (facts)."""
    keys = passages(memory.content, words) if len(_WORD.findall(indexed)) > words else []
    return [*keys, *(text for text in extra if text.strip())]


def key_records(memory: Memory, parent: Record, texts: Sequence[str], vectors: Sequence[Any]) -> list[Record]:
    """Key records of ``memory`` (stored as ``parent``): scored like it but for their own text and vector."""
    fields = {**record_fields(memory), PARENT: memory.id}
    return [
        Record(id=f"{memory.id}/{i}", scope=memory.scope, body=b"{}", text=text, vector=vector,
               importance=parent.importance, timestamp=parent.timestamp, expires_at=parent.expires_at, fields=fields)
        for i, (text, vector) in enumerate(zip(texts, vectors, strict=True))
    ]  # fmt: skip


async def delete_keys(backend: Backend, collection: str, memories: Sequence[Memory]) -> None:
    """Delete every key of these memories (all of one scope)."""
    if not memories:
        return
    keys = keys_collection(collection)
    ids = tuple(m.id for m in memories)
    while True:
        page = await backend.scan(keys, memories[0].scope, filters={PARENT: ids}, limit=1000)
        if not page.records or not await backend.delete(keys, [r.id for r in page.records], memories[0].scope):
            return


async def fold_keys(backend: Backend, collection: str, query: Query, hits: list[Hit]) -> list[Hit]:
    """``hits`` (the collection's best candidates) with their keys folded in: a turn's similarity is its best
    key's when that is higher, and its fused score rises by the similarity weight times the difference. Keys
    lend similarity only: the turn's own record is scored by BM25 over all its words already, and a key's text
    score would be scaled by the best key in scope, not by the best turn. A turn found only by a key is scored
    by the store (filtered to its turn key), then lifted the same way; each turn is returned once."""
    weight = query.weights.similarity
    if weight <= 0 or query.vector is None:
        return hits
    dense = Weights(similarity=weight, lexical=0.0, recency=0.0, importance=0.0)
    keyed = await backend.query(keys_collection(collection), msgspec.structs.replace(query, text=None, weights=dense))
    best: dict[str, float] = {}
    turn_of: dict[str, str] = {}
    for hit in keyed:
        parent = str(hit.record.fields.get(PARENT, ""))
        if parent and hit.scores.similarity > best.get(parent, -2.0):
            best[parent] = hit.scores.similarity
            turn_of[parent] = str(hit.record.fields.get(TURN_KEY, ""))
    if not best:
        return hits
    have = {hit.record.id for hit in hits}
    missing = sorted({turn_of[p] for p in best if p not in have and turn_of[p]})
    if missing:
        filters = {**query.filters, TURN_KEY: missing}
        hits = hits + await backend.query(collection, msgspec.structs.replace(query, k=len(missing), filters=filters))
    folded = [_lifted(hit, best.get(hit.record.id), weight) for hit in hits]
    folded.sort(key=lambda hit: (-hit.scores.final, hit.record.id))
    return folded


def _lifted(hit: Hit, key_similarity: float | None, weight: float) -> Hit:
    scores = hit.scores
    if key_similarity is None or key_similarity <= scores.similarity:
        return hit
    lifted = msgspec.structs.replace(scores, similarity=key_similarity,
                                     final=scores.final + weight * (key_similarity - scores.similarity))  # fmt: skip
    return msgspec.structs.replace(hit, scores=lifted)
