"""Conformance of the key-value face (what plain Redis offers)."""

from __future__ import annotations

import time
import uuid

import anyio
import anyio.lowlevel
import pytest

from memkit.backend import Backend
from memkit.errors import ValidationError
from memkit.testing._helpers import require

__all__ = ["KeyValueConformance"]


class KeyValueConformance:
    """The key-value face alone (what plain Redis offers). Provide an async ``backend`` fixture."""

    pytestmark = pytest.mark.anyio

    # -- key-value ------------------------------------------------------------------------------
    async def test_kv(self, backend: Backend) -> None:
        require(backend, "kv")  # records-only backends (Pinecone, Weaviate) skip the key-value face
        assert await backend.kv_get("ns", "k") is None
        await backend.kv_set("ns", "k", b"v1")
        await backend.kv_set("other", "k", b"v2")
        assert await backend.kv_get("ns", "k") == b"v1"
        assert await backend.kv_get("other", "k") == b"v2"
        assert await backend.kv_delete("ns", "k") is True
        assert await backend.kv_delete("ns", "k") is False
        assert await backend.kv_get("ns", "k") is None

    async def test_kv_replace_is_compare_and_set(self, backend: Backend) -> None:
        require(backend, "kv")
        assert await backend.kv_replace("ns", "c", b"1", expected=b"0") is False
        assert await backend.kv_replace("ns", "c", b"1", expected=None) is True
        assert await backend.kv_replace("ns", "c", b"2", expected=None) is False
        assert await backend.kv_replace("ns", "c", b"2", expected=b"1") is True
        assert await backend.kv_get("ns", "c") == b"2"

        async def increment() -> None:
            while True:
                current = await backend.kv_get("ns", "n")
                # A nonce: a repeated compare-and-set reports success (idempotent), so two writers computing
                # the same value from the same state must not both count as having incremented.
                bumped = f"{int((current or b'0').split(b':')[0]) + 1}:{uuid.uuid4().hex}".encode()
                if await backend.kv_replace("ns", "n", bumped, expected=current):
                    return
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as group:
            for _ in range(20):
                group.start_soon(increment)
        assert (await backend.kv_get("ns", "n") or b"").split(b":")[0] == b"20"

    async def test_kv_replace_create_if_absent_is_idempotent(self, backend: Backend) -> None:
        require(backend, "kv")
        assert await backend.kv_replace("ns", "lease", b"worker-1", expected=None) is True
        # A retried call whose first attempt succeeded (its reply lost) reports success, not a conflict.
        assert await backend.kv_replace("ns", "lease", b"worker-1", expected=None) is True
        assert await backend.kv_replace("ns", "lease", b"worker-2", expected=None) is False
        assert await backend.kv_replace("ns", "lease", b"worker-3", expected=b"worker-1") is True
        assert await backend.kv_replace("ns", "lease", b"worker-3", expected=b"worker-1") is True
        assert await backend.kv_replace("ns", "lease", b"worker-4", expected=b"worker-1") is False
        assert await backend.kv_get("ns", "lease") == b"worker-3"

    async def test_kv_ttl_uses_the_callers_clock(self, backend: Backend) -> None:
        require(backend, "kv")
        require(backend, "ttl")
        now = time.time()
        await backend.kv_set("ns", "short", b"x", ttl_s=10, now=now)
        await backend.kv_set("ns", "long", b"y", ttl_s=3600, now=now)
        assert await backend.kv_get("ns", "short", now=now + 9) == b"x"
        assert await backend.kv_get("ns", "short", now=now + 11) is None
        assert await backend.kv_get("ns", "long", now=now + 11) == b"y"
        assert await backend.kv_delete("ns", "short", now=now + 11) is False  # expired: nothing live deleted
        # An expired key counts as absent for compare-and-set, and its TTL is the caller's too.
        await backend.kv_set("ns", "lease", b"a", ttl_s=5, now=now)
        assert await backend.kv_replace("ns", "lease", b"b", expected=None, ttl_s=5, now=now + 1) is False
        assert await backend.kv_replace("ns", "lease", b"b", expected=None, ttl_s=5, now=now + 6) is True
        assert await backend.kv_get("ns", "lease", now=now + 10) == b"b"
        assert await backend.kv_get("ns", "lease", now=now + 12) is None
        page = await backend.kv_scan("ns", now=now + 10.5)  # short expired at +10, lease lives until +11
        assert [key for key, _ in page.items] == ["lease", "long"]

    async def test_kv_ttl_in_real_time(self, backend: Backend) -> None:
        require(backend, "kv")
        require(backend, "ttl")
        await backend.kv_set("ns", "short", b"x", ttl_s=0.2)
        assert await backend.kv_get("ns", "short") == b"x"
        await anyio.sleep(0.4)
        assert await backend.kv_get("ns", "short") is None

    async def test_kv_scan_by_prefix_with_a_cursor(self, backend: Backend) -> None:
        require(backend, "kv")
        keys = [f"a{i:02d}" for i in range(25)] + ["a%", "a_", "a*", "a?", "a[x]", "a\\", "b01", "é"]
        for key in keys:
            await backend.kv_set("ns", key, key.encode())
        await backend.kv_set("other", "a00", b"elsewhere")
        seen: list[tuple[str, bytes]] = []
        cursor = None
        while True:
            page = await backend.kv_scan("ns", prefix="a", limit=7, cursor=cursor)
            assert len(page.items) <= 7
            seen += page.items
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        wanted = sorted(k for k in keys if k.startswith("a"))
        assert [k for k, _ in seen] == wanted and all(v == k.encode() for k, v in seen)
        # Pattern characters in a prefix are literal, never wildcards.
        for literal in ("a%", "a_", "a*", "a?", "a[", "a\\"):
            page = await backend.kv_scan("ns", prefix=literal)
            assert [k for k, _ in page.items] == [k for k in wanted if k.startswith(literal)], literal
        everything = await backend.kv_scan("ns", limit=1000)
        assert [k for k, _ in everything.items] == sorted(keys) and everything.next_cursor is None

    async def test_kv_delete_prefix(self, backend: Backend) -> None:
        require(backend, "kv")
        for key in ("tool:a:1", "tool:a:2", "tool:ab", "tool:b:1", "tool%:x"):
            await backend.kv_set("cache", key, b"v")
        await backend.kv_set("other", "tool:a:1", b"v")
        assert await backend.kv_delete_prefix("cache", "tool:a:") == 2
        assert await backend.kv_delete_prefix("cache", "tool%") == 1  # literal %, not a wildcard
        assert [k for k, _ in (await backend.kv_scan("cache")).items] == ["tool:ab", "tool:b:1"]
        assert await backend.kv_get("other", "tool:a:1") == b"v"
        assert await backend.kv_delete_prefix("cache") == 2
        assert (await backend.kv_scan("cache")).items == []

    async def test_kv_namespaces_and_keys_never_collide(self, backend: Backend) -> None:
        require(backend, "kv")
        """Keys are built from ids users choose: no separator may make two (namespace, key) pairs one."""
        pairs = [("a", "b\x01c"), ("a\x01b", "c"), ("a:b", "c"), ("a", "b:c"), ("a\x1fb", "c"), ("a", "b\x1fc")]
        for i, (namespace, key) in enumerate(pairs):
            await backend.kv_set(namespace, key, str(i).encode())
        for i, (namespace, key) in enumerate(pairs):
            assert await backend.kv_get(namespace, key) == str(i).encode(), (namespace, key)
        assert [k for k, _ in (await backend.kv_scan("a")).items] == sorted(["b\x01c", "b:c", "b\x1fc"])

    async def test_kv_refuses_nul_in_names(self, backend: Backend) -> None:
        require(backend, "kv")
        """One rule on every backend (Postgres text cannot hold NUL; a lone surrogate is not text):
        refused before anything is written."""
        for namespace, key in (("a\x00b", "c"), ("a", "b\x00c"), ("a", "b\ud800"), ("a\udfff", "c")):
            with pytest.raises(ValidationError):
                await backend.kv_set(namespace, key, b"v")
        assert (await backend.kv_scan("a")).items == []
