"""The threshold a correction with no readable relation needs to replace a memory, measured with the packaged model.

Corrections of the same statement scored 0.79-0.98 cosine against it with all-MiniLM-L6-v2, corrections of
another statement 0.08-0.57 (``ReconcileConfig.correction_similarity`` is 0.75). "My sister lives in Porto" /
"Actually, my brother lives in Porto" scored 0.88: it could be either (which sibling lives there?) and is left
out. Relations the patterns read (home, employer, tastes, favourites) never need the threshold: their slot
decides (tests/extract/test_writer.py).
"""

from __future__ import annotations

import pytest

from memkit import Memkit
from memkit.embedders import Embedder
from memkit.extract import FactWriter, ObservedTurn, ReconcileConfig

pytestmark = pytest.mark.anyio

SAME = [
    ("My dentist appointment is on Tuesday", "Actually, my dentist appointment is on Thursday"),
    ("I drive a red Toyota", "Sorry, I meant I drive a blue Toyota"),
    ("My flight leaves at 7:45", "Correction: my flight leaves at 9:15"),
    ("I have two cats", "Actually I have three cats"),
    ("My daughter is 7 years old", "Actually, my daughter is 8 years old"),
    ("I'm training for a half marathon in May", "Actually, I'm training for a full marathon in June"),
    ("My budget for the trip is 2000 dollars", "Actually my budget for the trip is 3000 dollars"),
    ("I usually go to the gym on Mondays", "Actually, I usually go to the gym on Wednesdays"),
    ("I'm vegetarian", "Actually, I'm vegan now"),
    ("I've been learning Spanish for two years", "Actually, I've been learning Spanish for three years"),
    ("My team has five engineers", "Correction: my team has seven engineers"),
]
OTHER = [
    ("My dentist appointment is on Tuesday", "Actually, my flight leaves at 9:15"),
    ("I drive a red Toyota", "Actually, I have three cats"),
    ("My daughter is 7 years old", "Actually, my son started school this year"),
    ("I'm training for a half marathon in May", "Actually, I go swimming on Fridays"),
    ("My budget for the trip is 2000 dollars", "Actually my hotel is near the station"),
    ("I usually go to the gym on Mondays", "Actually, I usually cook on Sundays"),
    ("I've been learning Spanish for two years", "Actually, I've been playing guitar for two years"),
]


def _turn(text: str, user: str) -> ObservedTurn:
    return ObservedTurn(messages=[{"role": "user", "content": text}], user_id=user)


@pytest.mark.parametrize(("pairs", "replaced"), [(SAME, True), (OTHER, False)], ids=["same", "other"])
async def test_corrections_replace_what_they_correct_and_nothing_else(
    local_embedder: Embedder, pairs: list[tuple[str, str]], replaced: bool
) -> None:
    async with Memkit("memory://", embedder=local_embedder) as mem:
        writer = FactWriter(mem.long_term)
        assert writer.config.reconcile == ReconcileConfig(correction_similarity=0.75)
        for n, (old, correction) in enumerate(pairs):
            [stored] = [e for e in await writer.write(_turn(old, f"u{n}")) if e.action != "ignore"]
            [event] = [e for e in await writer.write(_turn(correction, f"u{n}")) if e.action != "ignore"]
            assert event.fact is not None and event.fact.kind == "correction", correction
            if replaced:
                assert event.action == "supersede", (old, correction, event.reason)
                assert event.previous is not None and stored.memory is not None
                assert event.previous.id == stored.memory.id
            else:
                assert event.action == "add", (old, correction, event.reason)
