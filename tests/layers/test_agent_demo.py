"""The reference design in two processes: what session 1 said is in session 2's context, and a correction
supersedes the old fact (tests/layers/agent_demo.py, with the packaged model and the offline extractor)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).with_name("agent_demo.py")


def _session(number: str, url: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, str(DEMO), number, url], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_new_process_knows_what_the_last_one_was_told(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'agent.db'}"
    assert _session("1", url, tmp_path) == ""
    seen = json.loads(_session("2", url, tmp_path))
    before, after = seen["before"], seen["after"]
    for planted in ("vegetarian", "Lisbon", "window seat"):
        assert planted in before, planted
    assert "Berlin" in after and "Lisbon" not in after  # the correction superseded the old home
    assert "vegetarian" in after and seen["errors"] == {}
    assert "ok thanks" not in before  # filler is never stored
