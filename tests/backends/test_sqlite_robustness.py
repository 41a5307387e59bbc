"""sqlite:// robustness: a corrupt row never breaks a collection, bad input and bad URLs are refused,
and a file that cannot be written says why."""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

import msgspec
import pytest
from memkit_backends.sqlite import _connect

from memkit import open_backend
from memkit.backend import Backend, Query, Scope
from memkit.errors import (
    BackendRefusedError,
    BackendTimeoutError,
    BackendUnavailableError,
    InvalidURLError,
    ValidationError,
)
from memkit.testing import make_record
from memkit.testing._helpers import unit

pytestmark = pytest.mark.anyio
ALICE = Scope(user_id="alice")


def corrupt(path: Path, record_id: str, column: str, value: object) -> None:
    """Rewrite one column behind memkit's back, as a later change (so open caches pick it up)."""
    with sqlite3.connect(path) as conn:
        seq = conn.execute("UPDATE memkit_meta SET value = value + 1 WHERE key = 'change_seq' RETURNING value")
        conn.execute(f"UPDATE memkit_records SET {column} = ?, seq = ? WHERE id = ?",
                     (value, seq.fetchone()[0], record_id))  # fmt: skip


async def fill(backend: Backend) -> None:
    await backend.ensure_collection("c", 8)
    await backend.upsert("c", [make_record(name, text=f"{name} words", seed=i, fields={"kind": "fact"})
                               for i, name in enumerate(["good", "nan", "short-vector", "other"])])  # fmt: skip


async def test_corrupt_rows_are_skipped_remembered_and_deletable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "c.db"
    url = f"sqlite:///{path}"
    async with open_backend(url) as backend:
        await fill(backend)
    corrupt(path, "nan", "fields", b'{"kind": NaN}')  # what a version without the NaN check could write
    corrupt(path, "short-vector", "vector", b"abc")
    with caplog.at_level(logging.WARNING, logger="memkit"):
        async with open_backend(url) as backend:
            assert {r.id for r in (await backend.scan("c", ALICE)).records} == {"good", "other"}
            assert await backend.count("c", ALICE, filters={"kind": "fact"}) == 2
            hits = await backend.query("c", Query(scope=ALICE, vector=unit(1), text="words", k=10))
            assert {h.record.id for h in hits} == {"good", "other"}
            assert backend.undecodable == {"c": {"nan", "short-vector"}}  # type: ignore[attr-defined]
            assert await backend.replace("c", make_record("nan"), expected_body=None) is False
            assert await backend.delete("c", ["nan"], Scope(user_id="bob")) == 0  # scope still applies
            assert await backend.delete("c", ["nan", "short-vector", "good"]) == 3
            assert backend.undecodable == {"c": set()}  # type: ignore[attr-defined]
    assert sum("cannot be read" in r.getMessage() for r in caplog.records) == 2
    with sqlite3.connect(path) as conn:
        assert [row[0] for row in conn.execute("SELECT id FROM memkit_records")] == ["other"]


async def test_a_row_corrupted_under_an_open_cache_drops_out_and_an_upsert_repairs_it(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    async with open_backend(f"sqlite:///{path}") as backend:
        await fill(backend)
        await backend.touch("c", {"nan": 3}, 1.0)
        corrupt(path, "nan", "importance", "high")
        assert [r.id for r in await backend.get("c", ["nan", "good"])] == ["good"]
        assert backend.undecodable["c"] == {"nan"}  # type: ignore[attr-defined]
        await backend.upsert("c", [make_record("nan", seed=1)])
        [repaired] = await backend.get("c", ["nan"])
        # Its counters were readable: kept, as a rewrite keeps them (and as a process that never loaded "c" does).
        assert repaired.access_count == 3 and backend.undecodable["c"] == set()  # type: ignore[attr-defined]
    async with open_backend(f"sqlite:///{path}") as backend:
        assert [r.access_count for r in await backend.get("c", ["nan"])] == [3]  # the file agrees with the cache


async def test_nan_in_fields_is_refused_on_upsert(tmp_path: Path) -> None:
    async with open_backend(f"sqlite:///{tmp_path / 'n.db'}") as backend:
        await backend.ensure_collection("c", 8)
        for value in (float("nan"), float("-inf")):
            with pytest.raises(ValidationError):
                await backend.upsert("c", [make_record("ok", seed=1), make_record("bad", seed=2, fields={"x": value})])
            with pytest.raises(ValidationError):
                await backend.replace("c", make_record("bad", seed=2, fields={"x": value}), expected_body=None)
        assert await backend.count("c", ALICE) == 0


async def test_tags_are_json_lists_on_disk_and_tuples_in_memory(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    async with open_backend(f"sqlite:///{path}") as backend:
        await backend.upsert("c", [make_record("t", fields={"tags": ("a", "b"), "n": 2})])
    with sqlite3.connect(path) as conn:
        assert msgspec.json.decode(conn.execute("SELECT fields FROM memkit_records").fetchone()[0]) == {
            "tags": ["a", "b"], "n": 2}  # fmt: skip
    async with open_backend(f"sqlite:///{path}") as backend:
        assert (await backend.get("c", ["t"]))[0].fields == {"tags": ("a", "b"), "n": 2}
        assert await backend.count("c", ALICE, filters={"tags": "b"}) == 1


@pytest.mark.parametrize("query", ["timeout=abc", "timeout=0", "timeout=-1", "timeout=inf", "synchronus=full",
                                   "synchronous=sometimes", "dtype=float64"])  # fmt: skip
def test_url_options_are_checked(tmp_path: Path, query: str) -> None:
    with pytest.raises(InvalidURLError, match=query.split("=", maxsplit=1)[0]):
        open_backend(f"sqlite:///{tmp_path / 'o.db'}?{query}")


async def test_url_options_are_applied(tmp_path: Path) -> None:
    async with open_backend(f"sqlite:///{tmp_path / 'o.db'}?synchronous=FULL&timeout=2.5&dtype=int8") as backend:
        conn = backend._conn  # type: ignore[attr-defined]
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


async def test_a_missing_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailableError, match="does not exist"):
        async with open_backend(f"sqlite:///{tmp_path / 'nowhere' / 'x.db'}"):
            pass


def test_a_read_only_file_system_and_missing_permissions_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failure = sqlite3.OperationalError("unable to open database file")
    path = str(tmp_path / "x.db")

    class ReadOnly:
        f_flag = os.ST_RDONLY

    with monkeypatch.context() as patch:
        patch.setattr(os, "statvfs", lambda _: ReadOnly())
        error = _connect.driver_error(path, 1.0, failure)
        assert isinstance(error, BackendRefusedError) and "read-only file system" in str(error)
    with monkeypatch.context() as patch:
        patch.setattr(os, "access", lambda *_: False)
        error = _connect.driver_error(path, 1.0, sqlite3.OperationalError("attempt to write a readonly database"))
        assert isinstance(error, BackendRefusedError) and "permission denied" in str(error)


@pytest.mark.skipif(os.getuid() == 0, reason="root writes anywhere")
async def test_an_unwritable_directory_is_refused_with_the_reason(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        with pytest.raises(BackendRefusedError, match="permission denied"):
            async with open_backend(f"sqlite:///{locked / 'x.db'}"):
                pass
    finally:
        locked.chmod(0o700)


async def test_a_write_lock_held_too_long_is_a_timeout(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    async with open_backend(f"sqlite:///{path}?timeout=0.2") as backend:
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(BackendTimeoutError, match="locked"):
                await backend.upsert("c", [make_record("r")])
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        await backend.upsert("c", [make_record("r")])
