"""Shared output for benchmarks: a printed table, JSON, and an optional PNG."""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Panel", "bar_panels", "figures_parser", "machine_info", "print_table", "python_probe_ms", "write_json"]


def machine_info() -> dict[str, Any]:
    import os

    import numba
    import numpy

    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "numpy": numpy.__version__,
        "numba": numba.__version__,
    }


def python_probe_ms(repeat: int = 5) -> float:
    """Milliseconds a fixed piece of pure Python takes here (best of ``repeat``): dicts, tuples, strings and
    sorting, what a layer's own code does between backend calls. Printed beside figures in milliseconds or
    items per second, so runs of different hours or machines can be compared: this 2-core machine's speed
    moves by half between runs minutes apart, and a target met or missed in one run says little alone."""
    import time

    best = float("inf")
    for _ in range(repeat):
        began = time.perf_counter()
        index: dict[tuple[str, int], list[int]] = {}
        for i in range(60_000):
            key = (f"key {i % 5_000}", i % 7)
            index.setdefault(key, []).append(i)
        ordered = sorted(index.items(), key=lambda item: (len(item[1]), item[0]))
        "|".join(f"{k[0]}:{len(v)}" for k, v in ordered)
        best = min(best, time.perf_counter() - began)
    return best * 1000


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.3f}" if abs(value) < 1000 else f"{value:.0f}"
        return str(value)

    widths = [max(len(c), *(len(cell(r.get(c, ""))) for r in rows)) for c in columns]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)))
    for row in rows:
        print("  ".join(cell(row.get(c, "")).rjust(w) for c, w in zip(columns, widths, strict=True)))


def figures_parser(
    doc: str | None, *, plot_help: str = "draw the figures as a PNG here (needs matplotlib)"
) -> argparse.ArgumentParser:
    """A benchmark's argument parser, its docstring as the help, with the two options every benchmark that draws
    its figures takes: ``--json`` (``args.json_path``) and ``--plot``."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", dest="json_path", help="write the figures as JSON here")
    parser.add_argument("--plot", help=plot_help)
    return parser


def write_json(path: str | None, payload: Any) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {path}")


@dataclass(frozen=True)
class Panel:
    """One chart of ``bar_panels``: a group of bars per label, one bar per series."""

    title: str
    ylabel: str
    labels: list[str]
    series: dict[str, list[float]]
    log: bool = False
    target: tuple[str, float] | None = None
    """A horizontal line with its legend text (a target the figures are held to)."""


def bar_panels(path: str, title: str, panels: Sequence[Panel]) -> None:
    """Grouped bar charts side by side, each with its axis label, legend and the value on each bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes_row = plt.subplots(1, len(panels), figsize=(5.5 * len(panels) + 1, 5), squeeze=False)
    for axes, panel in zip(axes_row[0], panels, strict=True):
        width = 0.8 / max(len(panel.series), 1)
        places = np.arange(len(panel.labels))
        for i, (name, values) in enumerate(panel.series.items()):
            bars = axes.bar(places + i * width, values, width, label=name)
            axes.bar_label(bars, labels=[f"{v:.3g}" for v in values], fontsize=7)
        axes.set_xticks(places + width * (len(panel.series) - 1) / 2, panel.labels, rotation=20, ha="right")
        if panel.target is not None:
            axes.axhline(panel.target[1], color="black", linestyle="--", linewidth=1, label=panel.target[0])
        axes.set_ylabel(panel.ylabel)
        axes.set_yscale("log" if panel.log else "linear")
        axes.set_title(panel.title)
        axes.grid(True, axis="y", alpha=0.3)
        axes.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")
