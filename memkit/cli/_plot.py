"""``memkit stats --plot FILE.png``: a store's long-term memories over time, one line per kind.

Each line counts the memories of a kind created up to each moment (live records only: what the store holds
now, dated by when each was first stored). matplotlib is the ``plot`` extra, imported only here; the check
for it runs before the store is opened, so a missing extra fails at once.
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from memkit._install import install_hint
from memkit.cli._output import CliError, ExitCode

__all__ = ["Timeline", "check_matplotlib", "draw"]

_KINDS_SHOWN = 8
"""More lines than this cannot be told apart; the rarest kinds are drawn together as "other"."""


class _Dated(msgspec.Struct):
    """The two fields of a memory's body the picture needs (the others are skipped by the decoder)."""

    kind: str = "?"
    created_at: datetime | None = None


_decode_dated = msgspec.json.Decoder(_Dated).decode


class Timeline:
    """When each memory of each kind was created, gathered during the stats scan."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = {}

    def add(self, record: Any) -> None:
        try:
            dated = _decode_dated(record.body)
        except msgspec.DecodeError:  # a body memkit cannot read: dated by its record, counted under its field
            dated = _Dated(kind=str(record.fields.get("kind", "?")))
        at = record.timestamp if dated.created_at is None else dated.created_at.timestamp()
        self.times.setdefault(dated.kind, []).append(at)


def check_matplotlib() -> None:
    # find_spec is None for a module blocked in sys.modules as well as for one not installed.
    try:
        found = importlib.util.find_spec("matplotlib") is not None
    except ValueError:  # a module in sys.modules without a spec
        found = False
    if not found:
        raise CliError(f"--plot needs matplotlib: {install_hint('plot')}", None, ExitCode.CONFIGURATION)


_EARLIEST, _LATEST = -2_208_988_800.0, 7_258_118_400.0
"""1900-01-01 and 2200-01-01 UTC: a memory dated outside (an import accepts any ``created_at``; year 9999 made
matplotlib's date axis fail) is drawn at the nearer of them, and the axis label says how many were."""


def _clamped(times: dict[str, list[float]]) -> tuple[dict[str, list[float]], int]:
    outside = sum(1 for ats in times.values() for at in ats if not _EARLIEST <= at <= _LATEST)
    return {kind: [min(max(at, _EARLIEST), _LATEST) for at in ats] for kind, ats in times.items()}, outside


def _grouped(times: dict[str, list[float]]) -> dict[str, list[float]]:
    counts = Counter({kind: len(at) for kind, at in times.items()})
    shown = [kind for kind, _ in counts.most_common(_KINDS_SHOWN)]
    if len(counts) > _KINDS_SHOWN:
        shown = shown[: _KINDS_SHOWN - 1]
    grouped = {kind: sorted(times[kind]) for kind in shown}
    rest = sorted(at for kind, ats in times.items() if kind not in shown for at in ats)
    if rest:
        grouped["other"] = rest
    return grouped


def _dates(seconds: list[float]) -> Any:
    """Unix seconds as datetime64 (UTC), which matplotlib draws on a date axis."""
    import numpy as np

    return (np.asarray(seconds, dtype=np.float64) * 1e6).astype("datetime64[us]")


def _step(axes: Any, ats: list[float], start: float, end: float, **style: Any) -> None:
    """A step per memory, from 0 at the store's first memory to the count now."""
    axes.step(_dates([start, *ats, end]), [0, *range(1, len(ats) + 1), len(ats)], where="post", **style)


def _axes(axes: Any, title: str, outside: int) -> None:
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
    from matplotlib.ticker import MaxNLocator

    axes.set_title(title)
    edge = f"; {outside} dated before 1900 or after 2199, drawn at the edge" if outside else ""
    axes.set_xlabel(f"time the memory was first stored (UTC){edge}")
    axes.set_ylabel("memories (cumulative count)")
    axes.set_ylim(bottom=0)
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts: no half memories
    locator = AutoDateLocator()  # type: ignore[no-untyped-call]
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]
    axes.grid(True, alpha=0.3)


def draw(timeline: Timeline, path: Path, *, title: str, now: float) -> None:
    """Write the PNG (blocking: call it in a worker thread)."""
    import matplotlib

    matplotlib.use("Agg")  # no display: a file only
    import matplotlib.pyplot as plt

    times, outside = _clamped(timeline.times)
    grouped = _grouped(times)
    every = sorted(at for ats in grouped.values() for at in ats)
    start, end = (every[0], max(every[-1], now)) if every else (now - 86_400, now)
    figure, axes = plt.subplots(figsize=(10, 5.5), dpi=100)
    try:
        for kind, ats in grouped.items():
            _step(axes, ats, start, end, linewidth=1.8, label=f"{kind} ({len(ats)})")
        if len(grouped) > 1:
            _step(axes, every, start, end, color="black", linestyle="--", linewidth=1.2,
                  label=f"all kinds ({len(every)})")  # fmt: skip
        if not every:
            axes.set_xlim(_dates([start, end]))
            axes.text(0.5, 0.5, "no memories yet", ha="center", va="center", transform=axes.transAxes)
        _axes(axes, title, outside)
        if every:
            axes.legend(title="kind (memories now)", loc="upper left")
        figure.tight_layout()
        figure.savefig(path, format="png")
    finally:
        plt.close(figure)
