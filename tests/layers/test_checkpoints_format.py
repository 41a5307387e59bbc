"""The checkpoint format: files written by memkit 0.1 keep loading, and damaged or hostile bytes only ever
give a SerializationError (never code execution, never a partial state).

The files under tests/data/checkpoints/ were written once by memkit 0.1 (format 1), with
``python -m tests.layers.test_checkpoints_format tests/data/checkpoints``. Never regenerate them, never change
``expected_state``: they are what every later memkit must still read.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memkit import open_backend
from memkit.errors import ConfigurationError, MissingDependencyError, SerializationError
from memkit.layers.checkpoints import AgentState, CheckpointConfig, Checkpoints
from memkit.layers.checkpoints._format import HEADER_SIZE, Sealer, Serializer, decode_value, encode_value
from memkit.layers.checkpoints._layer import NAMESPACE, _thread
from memkit.layers.shortterm import Message, SessionSnapshot, ToolCall
from memkit.layers.working import WorkingItem

DATA = Path(__file__).parent.parent / "data" / "checkpoints"
KEY = bytes(range(32))
"""The fixtures' AES-256 key."""
USER, THREAD = "ada", "trip-42"
IDS = {"first": "06619000000000a1b2c3d4e5", "second": "0661900000a000f6e5d4c3b2"}
FILES: dict[str, tuple[Serializer, str | None, bool]] = {
    "agent_state.msgpack.mkcp": ("msgpack", None, False),
    "agent_state.json.mkcp": ("json", None, False),
    "agent_state.msgpack.zlib.mkcp": ("msgpack", "zlib", False),
    "agent_state.msgpack.zstd.mkcp": ("msgpack", "zstd", False),
    "agent_state.json.zstd.mkcp": ("json", "zstd", False),
    "agent_state.msgpack.zstd.aesgcm.mkcp": ("msgpack", "zstd", True),
}
"""name -> how it was written; the encrypted one is bound to checkpoint ``first`` of the fixture thread."""


def expected_state() -> AgentState:
    """What every agent_state fixture holds. Never change it: the files were written from it."""
    call = ToolCall(id="call_1", name="search_hotels", arguments='{"city": "Lisbon", "nights": 3}')
    messages = [
        Message(role="user", content="Find me a hotel in Lisbon — near the river, 日本語 OK.", seq=1, tokens=17),
        Message(role="assistant", tool_calls=(call,), seq=2, tokens=20),
        Message(role="tool", content="Hotel Avenida: 120 EUR", tool_call_id="call_1", name="search_hotels", seq=3),
        Message(role="assistant", content="Hotel Avenida costs 120 EUR a night." * 40, seq=4, tokens=12),
    ]
    session = SessionSnapshot(
        pinned=[Message(role="system", content="You are a travel agent.", seq=0)],
        messages=messages,
        summary="The user is planning a trip.",
        folded=2,
    )
    working = [
        WorkingItem(key="city", value="Lisbon", set_at=1767225600.25, importance=0.9),
        WorkingItem(key="plan", value={"steps": ["hotel", "flight"], "done": 1}, set_at=1767225601.5),
    ]
    state = {"budget": 1284.5, "found": ["Avenida", "Lumiares"], "done": False, "note": None, "page": 2}
    return AgentState(session=session, working=working, state=state, turn=7)


def sealer(compression: str | None = None, key: bytes | None = None, max_bytes: int = 1 << 26) -> Sealer:
    return Sealer(compression=compression, min_compress_bytes=0, key=key, max_bytes=max_bytes)  # type: ignore[arg-type]


def seal_raw(
    raw: bytes,
    serializer: Serializer = "msgpack",
    compression: str | None = None,
    *,
    key: bytes | None = None,
    where: bytes = b"",
    agent_state: bool = True,
) -> bytes:
    """A blob of serialized bytes ``raw``, as ``save`` writes it."""
    return sealer(compression, key=key).seal(raw, serializer, agent_state=agent_state, location=where)[1]


def seal(
    value: object,
    serializer: Serializer = "msgpack",
    compression: str | None = None,
    *,
    key: bytes | None = None,
    where: bytes = b"",
    agent_state: bool = True,
) -> bytes:
    return seal_raw(
        encode_value(value, serializer), serializer, compression, key=key, where=where, agent_state=agent_state
    )


def location(checkpoint_id: str) -> bytes:
    return _thread(THREAD, USER, None).location(checkpoint_id)


def open_value(blob: bytes, *, key: bytes | None = None, where: bytes = b"", as_type: Any = Any) -> Any:
    header, raw = sealer(key=key).open(blob, location=where)
    return decode_value(raw, header.serializer, AgentState if as_type is Any and header.agent_state else as_type)


# -- files written by this version keep loading ------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(FILES))
def test_fixture_files_load(name: str) -> None:
    serializer, compression, encrypted = FILES[name]
    blob = (DATA / name).read_bytes()
    header, _ = sealer(key=KEY).open(blob, location=location(IDS["first"]), accept_plaintext=True)
    assert (header.serializer, header.compression, header.encrypted) == (serializer, compression, encrypted)
    assert blob[:6] == b"MKCP\x01\x00"
    got = open_value(blob, key=KEY if encrypted else None, where=location(IDS["first"]))
    assert got == expected_state()


def test_a_plain_value_fixture_loads_as_it_was_saved() -> None:
    blob = (DATA / "plain_value.msgpack.mkcp").read_bytes()
    assert open_value(blob) == {"turn": 3, "tags": ["a", "b"], "raw": b"\x00\xff"}


@pytest.mark.anyio
async def test_a_stored_thread_keeps_loading_through_the_layer() -> None:
    """The index format too: a thread as memkit 0.1 stored it (index + blobs) lists and loads."""
    config = CheckpointConfig(encryption_key=KEY, accept_plaintext=True)
    async with open_backend("memory://") as backend:
        thread = _thread(THREAD, USER, None)
        await backend.kv_set(NAMESPACE, thread.index_key, (DATA / "thread_index.msgpack").read_bytes())
        for name, checkpoint_id in (
            ("agent_state.msgpack.zstd.aesgcm.mkcp", IDS["first"]),
            ("plain_value.msgpack.mkcp", IDS["second"]),
        ):
            await backend.kv_set(NAMESPACE, thread.blob_prefix + checkpoint_id, (DATA / name).read_bytes())
        cp = Checkpoints(backend, config)
        infos = await cp.list(THREAD, user_id=USER)
        assert [(i.id, i.parent_id) for i in infos] == [(IDS["second"], IDS["first"]), (IDS["first"], None)]
        assert infos[1].metadata == {"turn": 7} and infos[1].encrypted and infos[1].compression == "zstd"
        assert infos[0].created_at.year == 2026
        assert await cp.load(THREAD, IDS["first"], user_id=USER) == expected_state()
        assert (await cp.load(THREAD, user_id=USER))["turn"] == 3
        new = await cp.save(THREAD, "after an upgrade", user_id=USER)
        assert (await cp.list(THREAD, user_id=USER))[0].parent_id == IDS["second"] != new


# -- damaged and hostile bytes ------------------------------------------------------------------------------
def reseal(blob: bytes) -> bytes:
    """``blob`` with its lengths and checksum made consistent again: what an attacker who can write to
    the storage produces, so the checks past the checksum are the ones tried."""
    import hashlib

    payload = blob[HEADER_SIZE:]
    fields = bytearray(blob[:28].ljust(28, b"\x00"))
    fields[0:4] = b"MKCP"
    struct.pack_into("<Q", fields, 20, len(payload))
    digest = hashlib.blake2b(bytes(fields), digest_size=16)
    digest.update(payload)
    return bytes(fields) + digest.digest() + payload


def with_field(blob: bytes, offset: int, fmt: str, value: int) -> bytes:
    changed = bytearray(blob)
    struct.pack_into(fmt, changed, offset, value)
    return reseal(bytes(changed))


@pytest.fixture(scope="module")
def blob() -> bytes:
    return seal(expected_state(), "msgpack", "zlib")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b[:20], "not a memkit|truncated"),
        (lambda b: b[:-1], "truncated"),
        (lambda b: b + b"\x00", "truncated or padded"),
        (lambda b: b"PK\x03\x04" + b[4:], "not a memkit checkpoint"),
        (lambda b: b[:60] + bytes([b[60] ^ 1]) + b[61:], "checksum"),
        (lambda b: b[:8] + b"\x01" + b[9:], "checksum"),
        (lambda b: with_field(b, 4, "<H", 2), "format version 2"),
        (lambda b: with_field(b, 4, "<H", 0), "does not know"),
        (lambda b: with_field(b, 6, "<B", 9), "does not know"),
        (lambda b: with_field(b, 10, "<H", 1), "does not know"),
        (lambda b: with_field(b, 12, "<Q", 2**63), "limit"),
        (lambda b: with_field(b, 12, "<Q", 10), "zlib"),
        (lambda b: b"", "not a memkit"),
    ],
)
def test_damaged_checkpoints_are_refused(blob: bytes, damage: Any, message: str) -> None:
    with pytest.raises(SerializationError, match=message):
        open_value(damage(blob))


def _bomb(compression: int, stream: bytes) -> bytes:
    """A resealed checkpoint declaring 1,000 bytes whose compressed stream holds far more."""
    return reseal(
        struct.pack("<4sHBBBBHQQ", b"MKCP", 1, 1, compression, 0, 0, 0, 1000, len(stream)) + bytes(16) + stream
    )


def test_a_zip_bomb_stops_at_the_declared_length() -> None:
    """64 MiB of zeros behind a header that declares 1,000 bytes: nothing near 64 MiB is ever allocated."""
    zeros = bytes(64 << 20)
    bombs = [
        (_bomb(1, zlib.compress(zeros, 9)), "zlib stream does not hold"),
        (_bomb(2, zstandard.ZstdCompressor().compress(zeros)), "zstd frame does not hold"),  # its frame says 64 MiB
        (_bomb(2, zstandard.ZstdCompressor(write_content_size=False).compress(zeros)), "zstd"),
    ]
    del zeros
    for bomb, message in bombs:
        tracemalloc.start()
        try:
            with pytest.raises(SerializationError, match=message):
                open_value(bomb)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 4 << 20, f"decoding a bomb allocated {peak} bytes"


def test_max_bytes_is_checked_before_and_after_decompressing() -> None:
    raw = encode_value("x" * 5000, "msgpack")
    packed = seal_raw(raw, "msgpack", "zstd", agent_state=False)
    assert len(packed) < 1000
    with pytest.raises(SerializationError, match="limit is 1000"):
        sealer(max_bytes=1000).open(packed, location=b"")  # small stored, too large declared
    plain = seal_raw(raw, agent_state=False)
    with pytest.raises(SerializationError, match="limit is 1000"):
        sealer(max_bytes=1000).open(plain, location=b"")  # refused on its length alone


@pytest.mark.parametrize(
    ("raw", "serializer"),
    [
        (b"cos\nsystem\n(S'touch /tmp/memkit-pwned'\ntR.", "msgpack"),  # a pickle: just bytes here
        (b"\xdd\xff\xff\xff\xff", "msgpack"),  # an array claiming 4 billion items
        (b"\x91" * 100_000 + b"\xc0", "msgpack"),  # nested past any stack
        (b"[" * 100_000, "json"),
        (b'{"session": {"messages": [{"role": "root"}]}}', "json"),  # the wrong shape for an AgentState
        (b"\xc1", "msgpack"),  # a byte msgpack never uses
    ],
)
def test_hostile_payloads_with_a_valid_header_are_refused(raw: bytes, serializer: Serializer) -> None:
    blob = seal_raw(raw, serializer)
    with pytest.raises(SerializationError):
        open_value(blob)
    assert not Path("/tmp/memkit-pwned").exists()


def test_encryption_is_authenticated_and_bound_to_where_it_was_saved() -> None:
    raw = encode_value(expected_state(), "msgpack")
    blob = seal_raw(raw, "msgpack", "zstd", key=KEY, where=b"thread-a/1")
    assert open_value(blob, key=KEY, where=b"thread-a/1") == expected_state()
    for key, where in ((b"\x00" * 32, b"thread-a/1"), (KEY[:16], b"thread-a/1"), (KEY, b"thread-b/1")):
        with pytest.raises(SerializationError, match="does not decrypt"):
            open_value(blob, key=key, where=where)
    with pytest.raises(SerializationError, match="set CheckpointConfig"):
        open_value(blob)
    flipped = bytearray(blob)
    flipped[-1] ^= 1
    with pytest.raises(SerializationError, match="does not decrypt"):
        open_value(reseal(bytes(flipped)), key=KEY, where=b"thread-a/1")
    plain = seal_raw(raw)
    with pytest.raises(SerializationError, match="not encrypted"):
        sealer(key=KEY).open(plain, location=b"")  # a planted plaintext checkpoint


def test_the_config_is_checked() -> None:
    for bad in (
        {"keep_last": 0},
        {"keep_last": True},
        {"serializer": "pickle"},
        {"compression": "lz4"},
        {"max_bytes": 0},
        {"orphan_grace_s": -1},
        {"encryption_key": b"short"},
        {"encryption_key": "x" * 32},
        {"accept_plaintext": 1},
    ):
        with pytest.raises(ConfigurationError):
            CheckpointConfig(**bad)
    assert CheckpointConfig().resolved_compression == "zstd"


def test_the_key_never_shows_in_a_repr() -> None:
    config = CheckpointConfig(encryption_key=b"s3cr3t-k3y-0123456789abcdefghijk")
    for shown in (repr(config), str(config), repr(dict(config.__rich_repr__()))):
        assert "s3cr3t" not in shown and "<hidden>" in shown
    assert "keep_last=50" in repr(config)
    assert "encryption_key=None" in repr(CheckpointConfig())


def test_import_memkit_loads_neither_extra() -> None:
    code = (
        "import sys, memkit; from memkit.layers.checkpoints import CheckpointConfig, Checkpoints; "
        "CheckpointConfig(encryption_key=bytes(32), compression='zstd').resolved_compression; "
        "print(sorted(m for m in ('zstandard', 'cryptography') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_missing_extras_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from memkit.layers.checkpoints import _config

    monkeypatch.setattr(_config, "has_module", lambda name: False)
    assert CheckpointConfig().resolved_compression == "zlib"
    with pytest.raises(MissingDependencyError, match=r"memkit-sdk\[zstd\]"):
        CheckpointConfig(compression="zstd")
    with pytest.raises(MissingDependencyError, match=r"memkit-sdk\[crypto\]"):
        CheckpointConfig(encryption_key=KEY)


# -- fuzzing -----------------------------------------------------------------------------------------------
_BLOBS: list[tuple[bytes, bytes | None]] = [
    (seal(expected_state(), serializer, compression, key=key, where=b"here"), key)  # type: ignore[arg-type]
    for serializer, compression, key in (
        ("msgpack", None, None),
        ("json", "zlib", None),
        ("msgpack", "zstd", None),
        ("msgpack", "zstd", KEY),
        ("json", None, KEY),
    )
]
"""Real checkpoints (with the key that opens them) for the fuzzer to damage."""

_mutation = st.one_of(
    st.tuples(st.just("truncate"), st.integers(0, 10**6), st.just(0)),
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(1, 255)),
    st.tuples(st.just("set"), st.integers(0, 10**6), st.integers(0, 255)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.integers(0, 255)),
    st.tuples(st.just("drop"), st.integers(0, 10**6), st.integers(1, 64)),
)


def _mutate(blob: bytes, mutations: list[tuple[str, int, int]]) -> bytes:
    data = bytearray(blob)
    for kind, where, value in mutations:
        at = where % (len(data) + 1)
        if kind == "truncate":
            del data[at:]
        elif kind == "insert":
            data[at:at] = bytes([value])
        elif kind == "drop":
            del data[at : at + value]
        elif at < len(data):
            data[at] = data[at] ^ value if kind == "flip" else value
    return bytes(data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.integers(0, len(_BLOBS) - 1),
    mutations=st.lists(_mutation, min_size=1, max_size=4),
    resealed=st.booleans(),
    typed=st.booleans(),
)
def test_fuzzed_checkpoints_give_serialization_errors_or_the_identical_state(
    which: int, mutations: list[tuple[str, int, int]], resealed: bool, typed: bool
) -> None:
    blob, key = _BLOBS[which]
    damaged = _mutate(blob, mutations)
    if resealed and len(damaged) >= HEADER_SIZE:
        damaged = reseal(damaged)
    try:
        got = open_value(damaged, key=key, where=b"here", as_type=AgentState if typed else Any)
    except SerializationError:
        return
    if damaged == blob or key is not None or not resealed:  # damage, or an authenticated blob: all or nothing
        assert got == expected_state()
    else:  # someone who rewrote the checksum can write any checkpoint; it must still be a whole, valid one
        assert isinstance(got, AgentState)
        assert msgspec.convert(msgspec.to_builtins(got), AgentState) == got


# -- writing the fixture files (once, by memkit 0.1) --------------------------------------------------------
def write_fixtures(folder: Path) -> None:
    """Write the files of tests/data/checkpoints/ into ``folder`` (refusing to overwrite any)."""
    folder.mkdir(parents=True, exist_ok=True)
    blobs = {
        name: seal(
            expected_state(), serializer, compression, key=KEY if encrypted else None, where=location(IDS["first"])
        )
        for name, (serializer, compression, encrypted) in FILES.items()
    }
    blobs["plain_value.msgpack.mkcp"] = seal({"turn": 3, "tags": ["a", "b"], "raw": b"\x00\xff"}, agent_state=False)
    for name, blob in blobs.items():
        with (folder / name).open("xb") as file:
            file.write(blob)
    sizes = {name: len(blob) for name, blob in blobs.items()}
    index = {
        "version": 1,
        "entries": [
            {
                "id": IDS["first"],
                "created_at": 1767225600.5,
                "size_bytes": sizes["agent_state.msgpack.zstd.aesgcm.mkcp"],
                "serializer": "msgpack",
                "compression": "zstd",
                "encrypted": True,
                "metadata": {"turn": 7},
            },
            {
                "id": IDS["second"],
                "created_at": 1767225660.0,
                "size_bytes": sizes["plain_value.msgpack.mkcp"],
                "serializer": "msgpack",
                "parent_id": IDS["first"],
            },
        ],
    }
    with (folder / "thread_index.msgpack").open("xb") as file:
        file.write(msgspec.msgpack.encode(index))


if __name__ == "__main__":
    write_fixtures(Path(sys.argv[1]))
