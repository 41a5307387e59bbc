"""The command on a terminal, as a person runs it: forget-all's y/N question and import's progress bar,
through a pseudo-terminal (POSIX only)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli._run import COMMAND, ok_json, sqlite_url

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")]


def on_terminal(args: list[str], answer: str | None = None, timeout: float = 120) -> tuple[int, str]:
    """``memkit ARGS`` with stdin, stdout and stderr on a pseudo-terminal of 120 columns; ``answer`` is typed
    once the command asks (a line ending in "] "). Returns the exit code and everything the terminal showed."""
    import fcntl
    import pty
    import struct
    import termios

    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a new terminal has 0 columns
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMKIT_")} | {"HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen([*COMMAND, *args], stdin=child, stdout=child, stderr=child, env=env, close_fds=True)
    os.close(child)
    shown, deadline = b"", time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # the child closed the terminal: it has ended
                    break
                shown += chunk
                if answer is not None and shown.rstrip().endswith(b"]"):
                    os.write(main, answer.encode() + b"\n")
                    answer = None
            elif process.poll() is not None:
                break
        return process.wait(timeout=30), shown.decode(errors="replace")
    finally:
        os.close(main)
        if process.poll() is None:
            process.kill()


@pytest.mark.parametrize(("answer", "deleted"), [("y", True), ("n", False), ("", False)])
def test_forget_all_asks_on_a_terminal_and_deletes_only_on_yes(tmp_path: Path, answer: str, deleted: bool) -> None:
    url = sqlite_url(tmp_path / "m.db")
    ok_json("store", "likes tea", "--user-id", "ada", "--url", url, "--embedder", "hashing")
    ok_json("store", "likes rock", "--user-id", "bob", "--url", url)
    code, shown = on_terminal(["forget-all", "--user-id", "ada", "--url", url], answer=answer)
    assert (
        "forget all 1 memories, 0 episodes, the knowledge graph, working memory, checkpoints and sessions of user 'ada'"
        in shown
    )
    assert "This cannot be undone. [y/N]" in shown
    users = [m["scope"]["user_id"] for m in ok_json("list", "--url", url)["memories"]]
    if deleted:
        assert code == 0 and users == ["bob"]
    else:
        assert code == 2 and "nothing was deleted" in shown and sorted(users) == ["ada", "bob"]


def test_import_shows_a_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps({"content": f"note {i}", "user_id": "ada"}) + "\n" for i in range(300)))
    code, shown = on_terminal(["import", str(path), "--url", sqlite_url(tmp_path / "m.db"), "--embedder", "hashing"])
    assert code == 0, shown
    assert "importing" in shown and "100%" in shown and "imported 300 memories" in shown
