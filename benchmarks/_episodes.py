"""Episodic recall cost: the p50 of ``EpisodicMemory.find_similar`` over n recorded episodes of 100 users.

A helper for the graph benchmark (which reports it beside its own figures), runnable alone too::

    python -m benchmarks._episodes [--n 10000] [URL ...]     (default: memory:// and a temporary sqlite://)

Episodes are generated (triggers of 8 Zipf-distributed words, a third of them failures with an error and a
lesson) and recorded with ``record_many``, one batch per user. Vectors come from an embedder that looks up
the precomputed vector of each text (``benchmarks.ingest.LookupEmbedder``), so the model is not measured;
each query is a user's own trigger, so the user's rows are scored as in real use (scope pushed down, hybrid
score, top 5).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import numpy as np

from .ingest import LookupEmbedder

if TYPE_CHECKING:
    from memkit.layers.episodic import Episode

DIM = 384  # the LookupEmbedder's
USERS = 100
QUERIES = 200
WARMUP = 20


def _episodes(n: int, seed: int = 0) -> tuple[dict[str, list[Episode]], dict[str, np.ndarray]]:
    """n episodes by user, and a vector for each indexed text and each trigger (clustered, as tasks are)."""
    from memkit.layers.episodic import Action, Episode
    from memkit.layers.episodic._codec import index_text

    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = np.array(["".join(rng.choice(letters, int(rng.integers(4, 9)))) for _ in range(5_000)])
    odds = 1.0 / np.arange(1, len(vocab) + 1)
    words = vocab[rng.choice(len(vocab), size=(n, 8), p=odds / odds.sum())]
    centres = rng.standard_normal((200, DIM)).astype(np.float32)
    vectors = centres[rng.integers(0, 200, n)] + 0.8 * rng.standard_normal((n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    by_user: dict[str, list[Episode]] = {}
    lookup: dict[str, np.ndarray] = {}
    for i in range(n):
        trigger = f"task {i}: " + " ".join(words[i])
        failed = i % 3 == 0
        action = Action(tool=f"tool_{i % 7}", arguments={"n": i}, ok=not failed, error="timeout" if failed else None)
        episode = Episode(trigger=trigger, outcome="failure" if failed else "success", actions=[action],
                          lessons=[f"retry tool_{i % 7} with a longer timeout"] if failed else [],
                          tags=[f"kind{i % 5}"])  # fmt: skip
        by_user.setdefault(f"user{i % USERS}", []).append(episode)
        lookup[index_text(episode)] = lookup[trigger] = vectors[i]
    return by_user, lookup


async def episodes_find_p50_ms(url: str, n: int = 10_000) -> float:
    """Record ``n`` generated episodes of 100 users at ``url`` (an empty store), then return the median
    milliseconds of ``find_similar`` (k=5) for a random user's own trigger."""
    from memkit import open_backend
    from memkit.layers.episodic import EpisodicMemory

    by_user, lookup = _episodes(n)
    async with open_backend(url) as backend:
        layer = EpisodicMemory(backend, LookupEmbedder(lookup))
        await layer.setup()
        for user, episodes in by_user.items():
            for start in range(0, len(episodes), 1_000):
                await layer.record_many(episodes[start : start + 1_000], user_id=user)
        rng = np.random.default_rng(11)
        users = list(by_user)
        timings = []
        for at in range(WARMUP + QUERIES):
            user = users[int(rng.integers(0, len(users)))]
            episode = by_user[user][int(rng.integers(0, len(by_user[user])))]
            started = time.perf_counter()
            await layer.find_similar(episode.trigger, user_id=user, k=5)
            if at >= WARMUP:  # the first queries compile the kernel and fill caches
                timings.append(time.perf_counter() - started)
    return float(np.median(timings)) * 1000


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("urls", nargs="*")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        urls = args.urls or ["memory://", f"sqlite:///{Path(tmp) / 'episodes.db'}"]
        for url in urls:
            p50 = anyio.run(episodes_find_p50_ms, url, args.n)
            print(f"{url.split('://')[0]:>8}  n={args.n:,}  find_similar p50 {p50:.3f} ms")


if __name__ == "__main__":
    main()
