"""``memkit import`` and ``memkit export`` of pre-embedded memories into and out of SQLite.

    python -m benchmarks.transfer --json out/transfer.json [--plot out/transfer.png] [--n 100000]

A JSON Lines file of n memories of 100 users (8 Zipf-distributed words each, the ingest benchmark's corpus)
with their vectors (dim 384, base64 float32, as ``memkit export --vectors`` writes them) is imported into a
new SQLite file by the command itself, in a subprocess, as a user runs it; then the store is exported back
with its vectors. Figures:

- ``import_per_s``: memories per second by the command's own clock (open, read, check every line, write
  in batches of 10,000 into SQLite, save the resume position after each); ``import_wall_per_s`` counts the whole
  process too (interpreter start, imports).
- ``export_per_s``: the same for ``memkit export --vectors`` of the imported store.

Target: ``import_per_s`` >= 20,000 at n = 100,000 (issue 16).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
from tqdm import tqdm

from ._report import machine_info, print_table, write_json
from .ingest import corpus

TARGET_PER_S = 20_000
MODEL = "benchmark-clustered-384"
"""The vectors' model: not one memkit can load, so nothing is embedded again (and nothing could be)."""


def write_file(path: Path, n: int) -> None:
    from memkit.cli._jsonl import Header, Line, encode_vector

    items, vectors = corpus(n, keep_all=False)  # written in order: a chunk at a time is enough
    encode = msgspec.json.Encoder().encode
    with path.open("wb") as handle, tqdm(total=n, desc="writing the JSON Lines file", unit="memory") as progress:
        handle.write(encode(Header(memkit_export=1, model_id=MODEL, dim=384)) + b"\n")
        for at in range(0, n, 10_000):
            chunk = items[at : at + 10_000]
            handle.write(b"".join(encode(Line(content=text, user_id=user, vector=encode_vector(vectors[text])))
                                  + b"\n" for user, text in chunk))  # fmt: skip
            progress.update(len(chunk))


def run(*args: str) -> tuple[dict[str, Any], float]:
    """``memkit ARGS --json`` in a subprocess (its progress bar on this terminal): its figures, wall seconds."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "memkit", *args, "--json"], stdout=subprocess.PIPE, env=env,
                          check=True)  # fmt: skip
    return json.loads(done.stdout), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", dest="json_path", help="write the figures as JSON here")
    parser.add_argument("--n", type=int, default=100_000, help="memories in the file (default 100,000)")
    parser.add_argument("--plot", help="draw the rates as a PNG here (needs matplotlib)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source, url = Path(tmp) / "memories.jsonl", f"sqlite:///{Path(tmp) / 'imported.db'}"
        write_file(source, args.n)
        # On disk before the import starts, as a file to import is: else the kernel writes its 216 MB back
        # while the import runs, and the import's own writes wait behind it.
        os.sync()
        imported, import_wall = run("import", str(source), "--url", url)
        assert imported["imported"] == args.n and not imported["bad"] and imported["embedded"] == 0, imported
        exported, export_wall = run("export", str(Path(tmp) / "out.jsonl"), "--vectors", "--url", url)
        assert exported["exported"] == args.n, exported
        row = {"n": args.n, "file_mb": source.stat().st_size / 1e6,
               "import_per_s": args.n / imported["seconds"], "import_wall_per_s": args.n / import_wall,
               "export_per_s": args.n / exported["seconds"], "export_wall_per_s": args.n / export_wall}  # fmt: skip
    print_table([row], list(row))
    write_json(args.json_path, {**row, "target_import_per_s": TARGET_PER_S, "machine": machine_info()})
    if args.plot:
        plot(args.plot, row)


def plot(path: str, row: dict[str, Any]) -> None:
    """The four rates as bars, with the import's target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = {"import\n(its clock)": row["import_per_s"], "import\n(whole process)": row["import_wall_per_s"],
            "export --vectors\n(its clock)": row["export_per_s"],
            "export --vectors\n(whole process)": row["export_wall_per_s"]}  # fmt: skip
    fig, axes = plt.subplots(figsize=(8, 4.5))
    shown = axes.bar(list(bars), list(bars.values()), color=["tab:blue", "tab:blue", "tab:green", "tab:green"])
    axes.bar_label(shown, labels=[f"{value:,.0f}" for value in bars.values()])
    axes.axhline(TARGET_PER_S, color="black", linestyle="--", linewidth=1, label=f"import target: {TARGET_PER_S:,}/s")
    axes.set_ylabel("memories per second")
    axes.set_title(f"memkit import / export of {row['n']:,} pre-embedded memories ({row['file_mb']:.0f} MB), SQLite")
    axes.legend(loc="upper right")
    axes.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
