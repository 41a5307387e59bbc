"""An agent loop killed with SIGKILL at random points resumes from its last completed turn, with nothing lost
and no turn or cached tool call done twice (tests/crash/agent.py is the loop).

What proves it: every one of the 2,000 messages is in the final session exactly once and in order (the
budget keeps them all verbatim); a counter in working memory and a running total in the checkpointed state
are right only if every resume restored them (a turn applied twice or lost shows); and a tool runs again only
when the run that ran it died before its call returned (else its result was cached, and a second run is a
duplicate). A quarter of the kills land while a run opens, loads and resumes."""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import anyio
import pytest

from memkit import AgentState, Memkit

from ..conftest import fresh_postgres_url, fresh_redis_url

AGENT = Path(__file__).with_name("agent.py")
TURNS = 1_000
TRIALS = 20


def start_agent(url: str, events: Path, run: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CRASH_RUN": str(run), "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, str(AGENT), url, str(events), str(TURNS)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


def kill_at_random(process: subprocess.Popen[bytes], rng: random.Random) -> None:
    """SIGKILL a random moment of its loop; one run in four at a random moment of its start instead (while it
    opens, loads its checkpoint and resumes from it)."""
    assert process.stdout is not None
    if rng.random() < 0.25:
        time.sleep(rng.uniform(0.3, 1.5))
    else:
        ready, _, _ = select.select([process.stdout], [], [], 60)
        if ready and process.stdout.readline().strip() == b"ready":
            time.sleep(rng.uniform(0.0, 0.3))
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def read_events(events: Path) -> list[tuple[int, str, int | None]]:
    rows: list[tuple[int, str, int | None]] = []
    for line in events.read_text().splitlines():
        parts = line.split()
        rows.append((int(parts[0]), parts[1], int(parts[2]) if len(parts) > 2 else None))
    return rows


def assert_no_cached_call_ran_twice(rows: list[tuple[int, str, int | None]]) -> None:
    """A tool may run again only if the run that ran it before died before its result was cached."""
    cached_by: dict[int, set[int]] = defaultdict(set)
    ran_in: dict[int, list[int]] = defaultdict(list)
    for run, what, turn in rows:
        if what == "cached" and turn is not None:
            cached_by[turn].add(run)
        if what == "tool" and turn is not None:
            for earlier in ran_in[turn]:
                assert earlier not in cached_by[turn], f"tool for turn {turn} ran again after run {earlier} cached it"
            ran_in[turn].append(run)


def url_for(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'agent.db'}"
    if backend == "postgres":
        return fresh_postgres_url(request.getfixturevalue("postgres_url"))
    return fresh_redis_url(request.getfixturevalue("redis_url"))


@pytest.mark.parametrize("backend", ["sqlite", "redis", "postgres"])
def test_an_agent_killed_at_random_resumes_exactly(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url, events = url_for(backend, request, tmp_path), tmp_path / "events.log"
    rng = random.Random(f"crash-{backend}")
    for run in range(TRIALS):
        kill_at_random(start_agent(url, events, run), rng)
    final = start_agent(url, events, TRIALS)
    _, err = final.communicate(timeout=300)
    assert final.returncode == 0, err.decode()[-3000:]
    rows = read_events(events)
    assert rows[-1][1] == "done"
    assert_no_cached_call_ran_twice(rows)
    last_events = [[what for r, what, _ in rows if r == run][-1:] for run in range(TRIALS)]
    mid_turn = sum(last == ["cached"] for last in last_events)  # killed between its tool call and its save
    assert sum(last in (["cached"], ["saved"], ["tool"]) for last in last_events) >= TRIALS // 3
    assert mid_turn >= 1, f"no kill landed mid-turn: {last_events}"
    anyio.run(check_final_state, url)


async def check_final_state(url: str) -> None:
    """Every turn exactly once, in order, in the session the last checkpoint holds; working memory agrees."""
    async with Memkit(url, embedder="hashing", layer_urls={"long_term": "memory://"}) as mem:
        state = await mem.checkpoints.load("crash-thread", type=AgentState)
        assert state.turn == TURNS - 1 and state.state == {"turn": TURNS - 1, "total": 7 * TURNS * (TURNS - 1) // 2}
        assert state.session is not None and state.working is not None and state.session.folded == 0
        every = [text for t in range(TURNS) for text in (f"turn {t}: what is {t} times 7?", f"turn {t}: {t * 7}")]
        assert [m.content for m in state.session.messages] == every, "a turn is missing or repeated"
        assert {item.key: item.value for item in state.working} == {"last_turn": TURNS - 1, "turns_done": TURNS}
