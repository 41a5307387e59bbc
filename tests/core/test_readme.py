"""The README's Quickstart runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent.parent / "README.md"


def python_block(after_heading: str) -> str:
    text = README.read_text()
    section = text.split(f"## {after_heading}", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, f"no python block under {after_heading}"
    return match.group(1)


def test_quickstart_runs(tmp_path: Path) -> None:
    code = python_block("Quickstart")
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=True,
    )  # fmt: skip
    lines = result.stdout.strip().splitlines()
    assert "peanuts" in lines[0]
    assert (tmp_path / "memories.db").exists()
