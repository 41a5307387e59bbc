"""How the ONNX encoder splits a sorted list of texts into calls: the cheapest split, within its limits."""

from __future__ import annotations

import functools
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from memkit.embedders._onnx import _TOKENS_PER_CALL, padded_batches


def cost(lengths: list[int], calls: list[tuple[int, int]], call_cost: int) -> int:
    return sum(call_cost + (stop - start) * max(lengths[start], 1) for start, stop in calls)


def allowed(lengths: list[int], calls: list[tuple[int, int]], max_rows: int) -> bool:
    return all(stop - start <= max_rows and (stop - start == 1 or (stop - start) * lengths[start] <= _TOKENS_PER_CALL)
               for start, stop in calls)  # fmt: skip


def cheapest_by_brute_force(lengths: list[int], max_rows: int, call_cost: int) -> int:
    n = len(lengths)
    best = None
    for cuts in itertools.product([False, True], repeat=max(n - 1, 0)):
        bounds = [0, *[i + 1 for i, cut in enumerate(cuts) if cut], n]
        calls = list(itertools.pairwise(bounds))
        if allowed(lengths, calls, max_rows):
            total = cost(lengths, calls, call_cost)
            best = total if best is None else min(best, total)
    assert best is not None
    return best


descending = st.lists(st.integers(0, 300), min_size=1, max_size=9).map(functools.partial(sorted, reverse=True))


@settings(max_examples=300, deadline=None)
@given(descending, st.integers(1, 5), st.integers(0, 40))
def test_the_split_covers_every_text_in_order_and_costs_the_least(
    lengths: list[int], max_rows: int, call_cost: int
) -> None:
    calls = padded_batches(lengths, max_rows, call_cost)
    assert calls[0][0] == 0 and calls[-1][1] == len(lengths)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(calls)) and all(s < e for s, e in calls)
    assert allowed(lengths, calls, max_rows)
    assert cost(lengths, calls, call_cost) == cheapest_by_brute_force(lengths, max_rows, call_cost)


def test_a_few_long_texts_among_short_ones_get_calls_of_their_own() -> None:
    lengths = [256, 200, 60, 58, 40, 12, 10, 9, 9, 8]  # a session of LongMemEval: padded to 256 it was 2,560
    calls = padded_batches(lengths, 64, 16)
    assert cost(lengths, calls, 0) <= 1.1 * sum(lengths)


def test_equal_texts_fill_calls_up_to_the_row_limit_and_the_token_cap() -> None:
    assert padded_batches([10] * 130, 64, 16) == [(0, 64), (64, 128), (128, 130)]
    assert padded_batches([256] * 70, 64, 16) == [(0, 64), (64, 70)]  # 64 x 256 = 16,384: at the cap
    assert padded_batches([300] * 60, 64, 16) == [(0, 54), (54, 60)]  # 54 x 300 <= 16,384 < 55 x 300
    assert padded_batches([20_000, 5], 64, 16) == [(0, 1), (1, 2)]  # one text past the cap still runs alone
    assert padded_batches([], 64, 16) == []
    assert padded_batches([2] * 300, 1024, 16) == [(0, 128), (128, 256), (256, 300)]  # a big batch size: 128 rows
