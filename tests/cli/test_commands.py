"""The memory commands through real subprocesses: output for people and for scripts, and exit codes."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli._run import memkit, ok_json, sqlite_url

pytestmark = pytest.mark.slow
COMMANDS = ["store", "recall", "list", "get", "forget", "forget-all", "sweep", "stats", "export", "import", "mcp",
            "demo", "bench"]  # fmt: skip


def test_help_shows_every_command_and_no_placeholder() -> None:
    main = memkit("--help")
    assert main.returncode == 0
    for command in COMMANDS:
        assert f"\n    {command} " in main.stdout, command
    assert "demo-step" not in main.stdout
    for command in COMMANDS:
        result = memkit(command, "--help")
        assert result.returncode == 0, command
        assert "SUPPRESS" not in result.stdout and "usage: memkit " + command in result.stdout, command
    assert "SUPPRESS" not in main.stdout


def test_version_from_the_script_and_from_python_m() -> None:
    from memkit import __version__

    assert memkit("--version").stdout.strip() == f"memkit {__version__}"
    script = shutil.which("memkit", path=str(Path(sys.executable).parent))
    if script:  # installed with its console script
        out = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=60, check=True)
        assert out.stdout.strip() == f"memkit {__version__}"


def test_store_recall_list_get_forget(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "m.db")
    stored = ok_json("store", "I am allergic to peanuts.", "--user-id", "ada", "--importance", "0.9", "--url", url,
                     "--embedder", "hashing", "--metadata", '{"topic": "food"}')  # fmt: skip
    assert stored["status"] == "stored" and stored["memory"]["metadata"] == {"topic": "food"}
    ok_json("store", "I prefer window seats.", "--user-id", "ada", "--kind", "preference", "--url", url)
    bob = ok_json("store", "Bob is allergic to peanuts too.", "--user-id", "bob", "--url", url)
    hits = ok_json("recall", "peanuts allergy", "--user-id", "ada", "--url", url)["hits"]
    assert hits[0]["memory"]["id"] == stored["memory"]["id"]
    assert {h["memory"]["scope"]["user_id"] for h in hits} == {"ada"}  # never another user's
    table = memkit("recall", "peanuts allergy", "--user-id", "ada", "--url", url)
    assert table.returncode == 0 and table.stdout.splitlines()[0].split()[:2] == ["score", "sim"]
    assert "allergic to peanuts" in table.stdout.splitlines()[1]
    everyone = ok_json("list", "--url", url)["memories"]
    assert len(everyone) == 3
    only_bob = ok_json("list", "--user-id", "bob", "--url", url)["memories"]
    assert [m["id"] for m in only_bob] == [bob["memory"]["id"]]
    preferences = ok_json("list", "--kind", "preference", "--url", url)["memories"]
    assert [m["content"] for m in preferences] == ["I prefer window seats."]
    got = ok_json("get", bob["memory"]["id"], "--url", url)
    assert got["content"] == "Bob is allergic to peanuts too."
    wrong_user = memkit("get", bob["memory"]["id"], "--user-id", "ada", "--url", url)
    assert wrong_user.returncode == 5  # bob's memory is not found in ada's scope
    assert ok_json("forget", bob["memory"]["id"], "--url", url) == {"id": bob["memory"]["id"], "forgotten": True}
    gone = memkit("get", bob["memory"]["id"], "--url", url)
    assert gone.returncode == 5 and "no memory" in gone.stderr


def test_list_pages_with_a_cursor(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "m.db")
    for text in ("one", "two", "three"):
        ok_json("store", f"memory number {text}", "--user-id", "ada", "--url", url, "--embedder", "hashing")
    first = ok_json("list", "--limit", "2", "--url", url)
    second = ok_json("list", "--limit", "2", "--cursor", first["next_cursor"], "--url", url)
    contents = [m["content"] for m in first["memories"] + second["memories"]]
    assert contents == ["memory number one", "memory number two", "memory number three"]
    assert second["next_cursor"] is None


def _short_error(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert 1 <= len(lines) <= 2, result.stderr
    return result.stderr


def test_exit_codes_tell_usage_bad_input_and_unreachable_apart(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "m.db")
    usage = memkit("store", "text without a user", "--url", url)
    assert usage.returncode == 2 and "--user-id" in usage.stderr
    bad = memkit("store", "x", "--user-id", "ada", "--importance", "2", "--url", url, "--embedder", "hashing")
    assert bad.returncode == 3 and "importance" in _short_error(bad)
    bad_json = memkit("store", "x", "--user-id", "ada", "--metadata", "{oops", "--url", url)
    assert bad_json.returncode == 3 and "--metadata" in _short_error(bad_json)
    missing = memkit("list", "--url", sqlite_url(tmp_path / "typo.db"))
    assert missing.returncode == 4 and "does not exist" in _short_error(missing)
    assert not (tmp_path / "typo.db").exists()  # a mistyped path is not created
    unwritable = memkit("store", "x", "--user-id", "ada", "--url", "sqlite:////proc/memkit-nope/x.db")
    assert unwritable.returncode == 4 and "cannot open SQLite file" in _short_error(unwritable)
    unknown = memkit("list", "--url", "nosuch://x")
    assert unknown.returncode == 6 and "nosuch" in _short_error(unknown)
    debug = memkit("store", "x", "--user-id", "ada", "--url", "sqlite:////proc/memkit-nope/x.db", "--debug")
    assert debug.returncode == 4 and "Traceback" in debug.stderr


def test_an_unreachable_server_is_exit_code_4() -> None:
    pytest.importorskip("redis")
    result = memkit("list", "--url", "redis://127.0.0.1:9/0?connect_timeout=1&retries=0", timeout=60)
    assert result.returncode == 4, result.stderr
    _short_error(result)


def _graph_edge(url: str, user_id: str) -> None:
    """Ada works at Acme: two nodes and an edge in the user's graph, written through the library."""
    import anyio

    from memkit import Memkit

    async def write() -> None:
        async with Memkit(url, embedder="hashing") as mem:
            await mem.graph.upsert_edge("Ada", "works_at", "Acme", user_id=user_id)

    anyio.run(write)


def test_forget_all_asks_first(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "m.db")
    for text in ("likes tea", "likes jazz"):
        ok_json("store", text, "--user-id", "ada", "--url", url, "--embedder", "hashing")
    ok_json("store", "likes rock", "--user-id", "bob", "--url", url)
    _graph_edge(url, "ada")
    refused = memkit("forget-all", "--user-id", "ada", "--url", url)  # stdin is not a terminal
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert len(ok_json("list", "--url", url)["memories"]) == 3
    assert ok_json("forget-all", "--user-id", "ada", "--yes", "--url", url) == {
        "user_id": "ada", "memories": 2, "episodes": 0, "graph_items": 3, "working_items": 0, "checkpoint_keys": 0,
        "sessions": 0,
    }  # fmt: skip
    assert [m["scope"]["user_id"] for m in ok_json("list", "--url", url)["memories"]] == ["bob"]


def test_stats_counts_kinds_and_users(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "m.db")
    ok_json("store", "likes tea", "--user-id", "ada", "--kind", "preference", "--url", url, "--embedder", "hashing")
    ok_json("store", "lives in Lisbon", "--user-id", "ada", "--url", url)
    ok_json("store", "lives in Porto", "--user-id", "bob", "--url", url)
    report = ok_json("stats", "--url", url)
    long_term = report["collections"]["long_term"]
    assert long_term["total"] == 3
    assert long_term["by_kind"] == {"fact": 2, "preference": 1}
    assert long_term["by_user"] == {"ada": 2, "bob": 1}
    assert long_term["embedder"] == {"model_id": "hashing-v1-384", "dim": 384}
    assert report["size_bytes"] > 0
    human = memkit("stats", "--url", url)
    assert human.returncode == 0 and "hashing-v1-384" in human.stdout and "MB on disk" in human.stdout


def test_stats_counts_the_graph_too(tmp_path: Path) -> None:
    import anyio

    from memkit import Memkit

    async def write() -> None:
        async with Memkit(sqlite_url(tmp_path / "m.db"), embedder="hashing", config=False) as mem:
            await mem.graph.upsert_edge("Ada", "works_at", "Acme", user_id="ada")
            await mem.graph.upsert_edge("Ada", "lives_in", "Lisbon", user_id="ada")
            await mem.graph.upsert_edge("Bob", "works_at", "Acme", user_id="bob")

    anyio.run(write)
    report = ok_json("stats", "--url", sqlite_url(tmp_path / "m.db"))
    nodes, edges = report["collections"]["graph_nodes"], report["collections"]["graph_edges"]
    assert nodes["total"] == 5 and nodes["by_user"] == {"ada": 3, "bob": 2}  # each user's graph is their own
    assert edges["total"] == 3 and edges["by_rel"] == {"works_at": 2, "lives_in": 1}
    human = memkit("stats", "--url", sqlite_url(tmp_path / "m.db"))
    assert "graph_edges: 3 live records" in human.stdout and "works_at" in human.stdout


def test_sweep_deletes_what_expired(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "m.db")
    ok_json("store", "door code 4411", "--user-id", "ada", "--ttl", "0.5", "--url", url, "--embedder", "hashing")
    ok_json("store", "likes tea", "--user-id", "ada", "--url", url)
    time.sleep(1.0)
    assert ok_json("sweep", "--url", url) == {"memories": 1, "episodes": 0}
    assert [m["content"] for m in ok_json("list", "--url", url)["memories"]] == ["likes tea"]


def test_options_go_before_or_after_the_command(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "m.db")
    ok_json("--url", url, "--embedder", "hashing", "store", "likes tea", "--user-id", "ada")
    assert len(ok_json("--url", url, "list")["memories"]) == 1


def test_memkit_url_from_the_environment(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "env.db")
    ok_json("store", "likes tea", "--user-id", "ada", "--embedder", "hashing", env={"MEMKIT_URL": url})
    assert (tmp_path / "env.db").exists()


def test_the_config_files_url_and_embedder_as_the_library_reads_them(tmp_path: Path) -> None:
    (tmp_path / "memkit.toml").write_text('url = "sqlite:///fromconfig.db"\nembedder = "hashing"\n')
    ok_json("store", "likes tea", "--user-id", "ada", cwd=tmp_path)  # no --url, no --embedder
    assert (tmp_path / "fromconfig.db").exists() and not (tmp_path / "memkit.db").exists()
    report = ok_json("stats", cwd=tmp_path)
    assert report["collections"]["long_term"]["embedder"] == {"model_id": "hashing-v1-384", "dim": 384}
    assert ok_json("list", cwd=tmp_path, env={"MEMKIT_URL": sqlite_url(tmp_path / "fromconfig.db")})["memories"]
    (tmp_path / "memkit.toml").write_text('url = "sqlite:///fromconfig.db"\n[long_term]\ncollection = "notes"\n')
    ok_json("store", "likes jazz", "--user-id", "ada", "--embedder", "hashing", cwd=tmp_path)
    notes = ok_json("stats", cwd=tmp_path)["collections"]["long_term"]  # the configured collection, its embedder
    assert notes["total"] == 1 and notes["embedder"] == {"model_id": "hashing-v1-384", "dim": 384}
    (tmp_path / "memkit.toml").write_text('url = "nosuchscheme://x"\n')
    broken = memkit("list", cwd=tmp_path)
    assert broken.returncode == 6 and "memkit.toml" in broken.stderr and "Traceback" not in broken.stderr


def test_bench_lists_the_benchmarks_for_an_unknown_name() -> None:
    result = memkit("bench", "no-such-benchmark")
    assert result.returncode == 2
    assert "mcp" in result.stderr and "transfer" in result.stderr and "scoring" in result.stderr


def test_demo_on_a_path_it_cannot_write_says_so_in_two_lines(tmp_path: Path) -> None:
    result = memkit("demo", "--db", str(tmp_path / "no-such-folder" / "demo.db"))
    assert result.returncode == 4, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 2
    assert "no-such-folder" in result.stderr and "--db" in result.stderr
