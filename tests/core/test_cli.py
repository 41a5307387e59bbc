"""The README's main job: ``memkit demo``, the memory-aware agent across two processes on embedded SQLite."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


def test_demo_recalls_across_processes(tmp_path: Path) -> None:
    exe = shutil.which("memkit") or ""
    command = [exe, "demo"] if exe else [sys.executable, "-m", "memkit.cli", "demo"]
    result = subprocess.run(
        [*command, "--db", str(tmp_path / "demo.db")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        check=True,
    )
    out = result.stdout
    assert "[process 1]" in out and "[process 2]" in out
    pids = [line.split("pid ")[1].rstrip(")") for line in out.splitlines() if "(pid " in line]
    assert len(set(pids)) == 2
    # The first hit of each query is the memory that answers it.
    sections = out.split("query: ")[1:]
    assert len(sections) == 3
    firsts = [section.splitlines()[2] for section in sections]
    assert "window seats" in firsts[0]
    assert "peanuts" in firsts[1]
    assert "Postgres" in firsts[2]
    # Process 1 observed a conversation (filler ignored); process 2's context has the correction, not the old home.
    assert "ignore    ok thanks" in out and "add       The user is allergic to peanuts." in out
    block = out.split("context() for the next model call", 1)[1]
    assert "Berlin" in block and "Lisbon" not in block and "peanuts" in block
