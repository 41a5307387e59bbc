"""``SplitBackend`` (a layer's records on one store, its keys on another) passes the record face through,
including a batch's near-duplicate check: the records' store does it in one pass, not once per scope."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from memkit_backends.memory import MemoryBackend

from memkit._split import SplitBackend
from memkit.backend import Record, Scope, StorageURL

pytestmark = pytest.mark.anyio


async def test_a_batchs_near_duplicate_check_goes_to_the_records_store_in_one_call() -> None:
    vector = np.ones(4, np.float32) / 2
    async with MemoryBackend(StorageURL("memory://")) as records, MemoryBackend(StorageURL("memory://")) as keys:
        split = SplitBackend(records=records, keys=keys)
        await split.upsert("c", [Record(id=f"{user}-1", scope=Scope(user_id=user), body=b"{}", vector=vector,
                                        importance=0.5, timestamp=1.0) for user in ("ada", "bob")])  # fmt: skip
        calls: list[str] = []
        for name in ("nearest", "nearest_many"):
            original = getattr(records, name)

            async def spy(*args: Any, _name: str = name, _original: Any = original, **options: Any) -> Any:
                calls.append(_name)
                return await _original(*args, **options)

            setattr(records, name, spy)
        found = await split.nearest_many("c", [(Scope(user_id="ada"), [vector]), (Scope(user_id="bob"), [vector])],
                                         k=1, min_similarity=0.9)  # fmt: skip
        assert [[[record_id for record_id, _ in row] for row in answer] for answer in found] == [
            [["ada-1"]],
            [["bob-1"]],
        ]
        assert calls == ["nearest_many"]
