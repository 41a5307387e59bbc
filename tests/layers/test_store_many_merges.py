"""Near-duplicates within one store_many batch: an item merges into the first earlier item of its batch that is
close enough and was kept as a new memory, never into one that itself merged away, and unrelated items stay."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from memkit import Memkit

pytestmark = pytest.mark.anyio

DIM = 8


def _unit(*parts: tuple[int, float]) -> np.ndarray:
    vector = np.zeros(DIM, np.float32)
    for axis, weight in parts:
        vector[axis] = weight
    return vector / np.linalg.norm(vector)


VECTORS = {
    "alpha": _unit((0, 1.0)),
    "alpha again": _unit((0, 1.0), (1, 0.1)),  # close to alpha
    "alpha once more": _unit((0, 1.0), (2, 0.1)),  # close to both: alpha is the first kept
    "xray": _unit((3, 1.0)),
    "yankee": _unit((4, 1.0)),
    "yankee too": _unit((4, 1.0), (5, 0.1)),  # close to yankee only
}


class TableEmbedder:
    """Test double of a model: each text's vector from a table."""

    dim = DIM
    model_id = "table-8"

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([VECTORS[text] for text in texts])


async def test_items_merge_into_the_first_close_item_kept() -> None:
    async with Memkit("memory://", embedder=TableEmbedder()) as mem:
        results = await mem.long_term.store_many(list(VECTORS), user_id="ada")
        assert [r.status for r in results] == ["stored", "merged", "merged", "stored", "stored", "merged"]
        ids = [r.memory.id for r in results if r.memory is not None]
        assert ids[0] == ids[1] == ids[2] and ids[4] == ids[5] and len({ids[0], ids[3], ids[4]}) == 3
        stored = sorted(m.content for m in (await mem.long_term.list(user_id="ada")).memories)
        assert stored == ["alpha once more", "xray", "yankee too"]  # the newest wording of each
