"""gather_bounded: results in order, at most ``limit`` at once, the first failure raised unwrapped."""

from __future__ import annotations

import anyio
import pytest

from memkit._concurrency import gather_bounded
from memkit.errors import ContentError

pytestmark = pytest.mark.anyio


async def test_results_keep_their_order_and_the_limit_holds() -> None:
    running = peak = 0

    async def call(n: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.01 * (5 - n % 5))  # later calls finish first
        running -= 1
        return n * n

    assert await gather_bounded([lambda n=n: call(n) for n in range(12)], limit=3) == [n * n for n in range(12)]
    assert peak == 3


async def test_the_first_failure_is_raised_as_it_is_and_the_rest_are_cancelled() -> None:
    finished = []

    async def fails() -> int:
        await anyio.sleep(0.01)
        raise ContentError("bad item")

    async def slow() -> int:
        await anyio.sleep(5)
        finished.append(1)
        return 1

    with anyio.fail_after(2):
        with pytest.raises(ContentError, match="bad item"):  # not an ExceptionGroup
            await gather_bounded([slow, fails, slow], limit=3)
    assert finished == []


async def test_both_returns_two_results_of_different_types_in_order() -> None:
    from memkit._concurrency import both

    async def number() -> int:
        await anyio.sleep(0.02)
        return 7

    async def word() -> str:
        return "seven"

    assert await both(number, word) == (7, "seven")
