"""Writing conversation turns: their records, then their keys (passages of long turns, facts read from them).

``add_turns`` claims the turns' positions (``_conversation``) and builds their memories; this writes them, with
one embedding call for the records and the keys. ``update`` writes a changed turn's keys anew here too, so a
turn's keys are made in one place.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio

from memkit.backend import Backend
from memkit.embedders import Embedder
from memkit.layers._turns import Turn
from memkit.layers.longterm._codec import index_text, to_record
from memkit.layers.longterm._passages import Embed, key_records, key_texts, keys_collection, passage_words
from memkit.layers.longterm._records import LongTermConfig, Memory

__all__ = ["write_keys", "write_turns"]


async def write_turns(
    backend: Backend,
    config: LongTermConfig,
    memories: list[Memory],
    turns: Sequence[Turn],
    *,
    embedder: Embedder,
    embed: Embed,
) -> None:
    """The turns' records, then their keys (passages of long turns, facts): one embedding call for both."""
    texts = [index_text(m) for m in memories]
    extra = await _facts(turns) if config.fact_keys else [[] for _ in turns]
    words = passage_words(embedder, config.passage_words)
    keys = [key_texts(m, text, words, more) for m, text, more in zip(memories, texts, extra, strict=True)]
    vectors = await embed(texts + [key for group in keys for key in group])
    records = [to_record(m, v) for m, v in zip(memories, vectors, strict=False)]
    await backend.upsert(config.collection, records)
    key_rows, at = [], len(memories)
    for memory, record, group in zip(memories, records, keys, strict=True):
        key_rows.extend(key_records(memory, record, group, vectors[at : at + len(group)]))
        at += len(group)
    if key_rows:
        await backend.upsert(keys_collection(config.collection), key_rows)


async def write_keys(
    backend: Backend, config: LongTermConfig, memory: Memory, *, embedder: Embedder, embed: Embed
) -> None:
    """A stored turn's keys, written anew (the caller has deleted its old ones)."""
    found = await backend.get(config.collection, [memory.id], memory.scope)
    texts = key_texts(memory, index_text(memory), passage_words(embedder, config.passage_words))
    if found and texts:
        vectors = await embed(texts)
        await backend.upsert(keys_collection(config.collection), key_records(memory, found[0], texts, vectors))


async def _facts(turns: Sequence[Turn]) -> list[list[str]]:
    """What the offline fact extractor reads in each turn (in a worker thread: it is CPU work)."""
    from memkit.extract import HeuristicFactExtractor, ObservedTurn  # imports the graph layer: lazily

    extractor = HeuristicFactExtractor()

    def read() -> list[list[str]]:
        return [[fact.text for fact in extractor.read(ObservedTurn(messages=[
            {"role": "user", "name": turn.speaker, "content": turn.text}])).facts] for turn in turns]  # fmt: skip

    return await anyio.to_thread.run_sync(read)
