"""Running the ``memkit`` command as a user does: a real subprocess, its output and exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

COMMAND = [sys.executable, "-m", "memkit"]


def memkit(*args: str, cwd: Path | None = None, stdin: str | None = None, timeout: float = 120,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    environment = {k: v for k, v in os.environ.items() if k not in ("MEMKIT_URL", "MEMKIT_USER_ID")}
    environment.update({"HF_HUB_OFFLINE": "1", **(env or {})})
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          input=stdin if stdin is not None else "", env=environment, check=False)  # fmt: skip


def ok_json(*args: str, **options: Any) -> Any:
    """``memkit ... --json`` that must succeed: its output, decoded."""
    result = memkit(*args, "--json", **options)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"
