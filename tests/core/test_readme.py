"""The README's Python blocks run as written; a block that is only a fragment says so in its first line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def run(code: str, cwd: Path) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()


def python_block(after_heading: str) -> str:
    section = README.read_text().split(f"## {after_heading}", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, f"no python block under {after_heading}"
    return match.group(1)


def test_quickstart_runs(tmp_path: Path) -> None:
    lines = run(python_block("Quickstart"), tmp_path)
    assert "peanuts" in lines[0]
    assert (tmp_path / "memories.db").exists()


@pytest.mark.parametrize("block", [b for b in BLOCKS if not b.startswith("# fragment")], ids=lambda b: b[:40])
def test_every_complete_block_runs(block: str, tmp_path: Path) -> None:
    run(block, tmp_path)


def test_fragments_say_so() -> None:
    assert BLOCKS, "the README has Python blocks"
    for block in BLOCKS:
        if block.startswith("# fragment"):
            assert block.split("\n", 1)[0].startswith("# fragment: "), "a fragment says what it is part of"
