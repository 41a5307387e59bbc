"""The server-candidate reranker: pruning must never drop a row that belongs in the top k."""

from __future__ import annotations

import math

import numpy as np
from memkit_backends._server.rerank import Candidates, numbers_table

from memkit.backend import Query, Scope, Weights

NOW = 1_000_000.0
QUERY = Query(scope=Scope(user_id="u"), vector=np.ones(2, np.float32), text="word", k=1, now=NOW,
              weights=Weights(similarity=0.5, lexical=0.5, recency=0.0, importance=0.0))  # fmt: skip


def test_an_expired_candidate_does_not_prune_a_live_text_match() -> None:
    candidates = Candidates()
    # The nearest row expired; the kernel will drop it, so it must not set the bar for the others.
    candidates.add(["expired", "live"], numbers_table([(0.9, 0.0, NOW, NOW - 1.0), (0.1, 0.0, NOW, None)]))
    candidates.similarity_floor = 0.1
    candidates.lexical = {"text-match": 10.0, "best-text-match": 20.0}
    # "text-match" can reach 0.5 * 0.1 + 0.5 * 0.5 = 0.3: below the expired row's 0.45, above "live"'s 0.05
    text_only, _ = candidates.unresolved(QUERY, text_truncated=False)
    assert sorted(text_only) == ["best-text-match", "text-match"]


def test_a_text_match_that_cannot_reach_the_top_k_is_not_fetched() -> None:
    candidates = Candidates()
    candidates.add(["near"], numbers_table([(0.95, 0.0, NOW, None)]))
    candidates.similarity_floor = 0.2
    candidates.lexical = {"near": 10.0, "weak": 0.1}
    # best possible for "weak": 0.5 * 0.2 + 0.5 * 0.01 = 0.105, far below "near" at 0.975
    text_only, _ = candidates.unresolved(QUERY, text_truncated=False)
    assert text_only == []


def test_rank_orders_by_the_kernel_and_reports_each_signal() -> None:
    candidates = Candidates()
    candidates.add(["b", "a", "b"], numbers_table([(0.2, 0.5, NOW, None), (0.8, 0.1, NOW, math.inf),
                                                   (0.99, 1.0, NOW, None)]))  # fmt: skip
    candidates.lexical = {"b": 2.0}
    ranked = candidates.rank(Query(scope=Scope(user_id="u"), vector=np.ones(2), text="w", k=2, now=NOW,
                                   weights=QUERY.weights))  # fmt: skip
    # b: 0.5 * 0.2 + 0.5 * (2.0 / 2.0) = 0.6 from its first row (the duplicate's 0.99 is ignored); a: 0.4
    assert [i for i, _ in ranked] == ["b", "a"]
    b, a = (scores for _, scores in ranked)
    assert math.isclose(b.final, 0.6, rel_tol=1e-5) and b.lexical == 1.0 and b.importance == 0.5
    assert math.isclose(a.final, 0.4, rel_tol=1e-5) and a.lexical == 0.0 and a.recency == 1.0
