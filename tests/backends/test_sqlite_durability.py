"""SQLite: memories survive a killed process, and two processes share one file safely."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from memkit import Memkit
from memkit.embedders import HashingEmbedder

pytestmark = pytest.mark.anyio

WRITER = textwrap.dedent(
    """
    import sys, anyio, time
    from memkit import Memkit
    from memkit.embedders import HashingEmbedder

    async def main(url, user, n, hold):
        async with Memkit(url, embedder=HashingEmbedder(64)) as mem:
            for i in range(n):
                await mem.long_term.store(f"{user} fact number {i} token{user}{i}", user_id=user)
            print("STORED", n, flush=True)
            if hold:
                time.sleep(3600)  # wait to be killed, connection still open

    anyio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "hold")
    """
)


def start_writer(url: str, user: str, n: int, hold: bool) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, url, user, str(n), "hold" if hold else "exit"],
        stdout=subprocess.PIPE,
        text=True,
    )


async def test_memories_survive_sigkill(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'durable.db'}"
    writer = start_writer(url, "ada", 50, hold=True)
    assert writer.stdout is not None
    line = await anyio.to_thread.run_sync(writer.stdout.readline)
    assert line.strip() == "STORED 50"
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    async with Memkit(url, embedder=HashingEmbedder(64)) as mem:
        page = await mem.long_term.list(user_id="ada", limit=100)
        assert len(page.memories) == 50
        hits = await mem.long_term.recall("tokenada37", user_id="ada", k=1)
        assert hits[0].memory.content == "ada fact number 37 tokenada37"


async def test_two_processes_share_one_file(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    url = f"sqlite:///{path}"
    async with Memkit(url, embedder=HashingEmbedder(64)) as mem:
        await mem.long_term.store("parent memory tokenparent", user_id="parent")
        assert len(await mem.long_term.recall("tokenparent", user_id="parent")) == 1  # arrays now cached
        writers = [start_writer(url, user, 120, hold=False) for user in ("w1", "w2")]
        for writer in writers:
            await anyio.to_thread.run_sync(writer.wait)
            assert writer.returncode == 0
        # The parent's cached arrays catch up with the other processes' commits.
        for user in ("w1", "w2"):
            hits = await mem.long_term.recall(f"token{user}77", user_id=user, k=1)
            assert hits[0].memory.content == f"{user} fact number 77 token{user}77"
            assert len((await mem.long_term.list(user_id=user, limit=500)).memories) == 120
        # A delete made elsewhere is seen here too.
        async with Memkit(url, embedder=HashingEmbedder(64)) as other:
            assert await other.long_term.forget_all(user_id="w1") == 120
        assert await mem.long_term.recall("tokenw177", user_id="w1") == []
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM memkit_records").fetchone()[0] == 121
