"""The retrieval levers both quality benchmarks flip, one at a time, in ``--compare`` (LoCoMo and LongMemEval
share them, so a default is judged on both in the same way)."""

from __future__ import annotations

from typing import Any

from memkit import LongTermConfig

__all__ = ["lever_variants", "selected"]

_NO_PASSAGES = 100_000
"""``passage_words`` so large that no turn is ever split: one key per turn, as before passages."""


def lever_variants(base: LongTermConfig) -> dict[str, dict[str, Any]]:
    """Each lever flipped from the default: on where it is off, off where it is on."""
    found: dict[str, dict[str, Any]] = {}
    if base.passage_words == _NO_PASSAGES:
        found["passages for long turns"] = {"passage_words": None}
    else:
        found["no passages (one key per turn)"] = {"passage_words": _NO_PASSAGES}
    for name, field, values in (("session boost", "session_weight", (0.1, 0.25)),
                                ("time boost", "time_weight", (0.1, 0.2)),
                                ("speaker boost", "speaker_weight", (0.05, 0.1)),
                                ("turn-before share", "neighbour_before", (0.5, 0.75, 1.0))):  # fmt: skip
        current = getattr(base, field)
        if current:
            found[f"no {name}"] = {field: 0.0}
        for value in values:
            if value != current:
                found[f"{name} {value}"] = {field: value}
    found["no fact keys" if base.fact_keys else "fact keys"] = {"fact_keys": not base.fact_keys}
    filler = "keep conversational filler" if base.drop_filler else "drop conversational filler"
    found[filler] = {"drop_filler": not base.drop_filler}
    for terms in (5, 10):
        if terms != base.feedback_terms:
            found[f"feedback: {terms} words"] = {"feedback_terms": terms}
    if base.feedback_terms:
        found["no feedback"] = {"feedback_terms": 0}
    if base.context_words is not None:
        found["whole previous turn as context"] = {"context_words": None}
    for words in (24, 48):
        if words != base.context_words:
            found[f"context: last {words} words of the previous turn"] = {"context_words": words}
    return found


def selected(variants: dict[str, dict[str, Any]], levers: str | None) -> dict[str, dict[str, Any]]:
    """The variants a ``--levers`` option names: comma-separated parts of their names, any case (``"feedback,
    BM25"``); all of them for None. A part that names none stops the run, listing the names: a check of one
    lever should not silently run nothing (or everything, and the embeddings every variant needs)."""
    if levers is None:
        return variants
    parts = [part.strip().casefold() for part in levers.split(",") if part.strip()]
    unmatched = [part for part in parts if not any(part in name.casefold() for name in variants)]
    if unmatched or not parts:
        names = "\n  ".join(variants)
        raise SystemExit(
            f"--levers {levers!r}: {', '.join(unmatched) or 'nothing'} names no variant; the variants:\n  {names}"
        )
    return {name: overrides for name, overrides in variants.items() if any(p in name.casefold() for p in parts)}
