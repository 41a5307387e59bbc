"""``memkit stats --plot`` through real subprocesses: a PNG of the memories over time by kind, and a
one-line error with the install command when matplotlib is missing."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli._run import memkit, ok_json, sqlite_url

pytestmark = pytest.mark.slow

_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height from the IHDR chunk, which a valid PNG has first."""
    data = path.read_bytes()
    assert data[:8] == _PNG_MAGIC and data[12:16] == b"IHDR", data[:16]
    assert data[-8:-4] == b"IEND"  # written to the end, not cut short
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def _store(url: str) -> None:
    for text, kind in (("likes tea", "preference"), ("lives in Lisbon", "fact"), ("moved to Porto", "fact")):
        ok_json("store", text, "--user-id", "ada", "--kind", kind, "--url", url, "--embedder", "hashing")
    ok_json("store", "plays chess", "--user-id", "bob", "--kind", "hobby", "--url", url)


def test_stats_plot_writes_a_png_of_memories_by_kind(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    url = sqlite_url(tmp_path / "m.db")
    _store(url)
    png = tmp_path / "out" / "stats.png"
    png.parent.mkdir()
    report = ok_json("stats", "--url", url, "--plot", str(png))
    assert report["plot"] == str(png) and report["collections"]["long_term"]["total"] == 4
    width, height = _png_size(png)
    assert width >= 600 and height >= 400
    # Four lines and a legend draw more than an empty store's axes: the picture holds the data.
    empty_url = sqlite_url(tmp_path / "empty.db")
    ok_json("store", "x", "--user-id", "ada", "--url", empty_url, "--embedder", "hashing")
    ok_json("forget-all", "--user-id", "ada", "--yes", "--url", empty_url)
    empty = tmp_path / "empty.png"
    human = memkit("stats", "--url", empty_url, "--plot", str(empty))
    assert human.returncode == 0 and f"plot  {empty}" in human.stdout
    _png_size(empty)
    assert png.stat().st_size > empty.stat().st_size > 5_000


def test_stats_plot_to_an_unwritable_path_is_a_short_error(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    url = sqlite_url(tmp_path / "m.db")
    _store(url)
    result = memkit("stats", "--url", url, "--plot", str(tmp_path / "no-such-dir" / "s.png"))
    assert result.returncode == 4 and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2


def test_stats_plot_without_matplotlib_says_what_to_install(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "m.db")
    _store(url)
    png = tmp_path / "s.png"
    # None in sys.modules makes `import matplotlib` fail as if it were not installed.
    code = ("import sys; sys.modules['matplotlib'] = None; from memkit.cli import main; "
            f"sys.exit(main(['stats', '--url', {url!r}, '--plot', {str(png)!r}]))")  # fmt: skip
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 6, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'memkit-sdk[plot]'" in lines[0] and "matplotlib" in lines[0], lines
    assert not png.exists()
    assert memkit("stats", "--url", url).returncode == 0  # without --plot, stats needs no matplotlib


def test_stats_plot_draws_memories_dated_far_away_at_the_edge(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "far.jsonl"
    dates = ["9999-12-31T00:00:00Z", "0001-01-01T00:00:00Z", "2024-05-01T00:00:00Z"]
    path.write_text("".join(f'{{"content": "note {i}", "user_id": "ada", "created_at": "{at}"}}\n'
                            for i, at in enumerate(dates)))  # fmt: skip
    url = sqlite_url(tmp_path / "m.db")
    assert memkit("import", str(path), "--url", url, "--embedder", "hashing").returncode == 0
    png = tmp_path / "far.png"
    result = memkit("stats", "--url", url, "--plot", str(png))
    assert result.returncode == 0, result.stderr
    _png_size(png)


def test_dates_outside_the_axis_are_clamped_and_counted() -> None:
    from memkit.cli._plot import _EARLIEST, _LATEST, _clamped

    times, outside = _clamped({"fact": [253_402_214_400.0, 0.0], "preference": [-62_135_596_800.0]})
    assert times == {"fact": [_LATEST, 0.0], "preference": [_EARLIEST]} and outside == 2
