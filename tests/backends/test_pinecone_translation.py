"""pinecone:// translation layers, exhaustively: ids, namespaces, records as metadata, filters, batches, errors,
URL options. Filters are checked by evaluating them with the loopback double's filter semantics against
memkit's own definition of a match, over hostile ids, names and values."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("pinecone", reason="the pinecone extra is not installed: pip install 'memkit-sdk[pinecone]'")

from memkit_backends.pinecone._connect import settings_of
from memkit_backends.pinecone._errors import pinecone_error
from memkit_backends.pinecone._filters import expired_filter, query_filter
from memkit_backends.pinecone._io import MAX_UPSERT_BYTES, batches_by_size, fetch_batches
from memkit_backends.pinecone._layout import (
    MAX_METADATA_BYTES,
    decode_record,
    encode_metadata,
    namespace_of,
    vector_id,
)
from pinecone.errors.exceptions import (
    ApiError,
    PineconeConnectionError,
    PineconeTimeoutError,
    RateLimitError,
    ServiceError,
    UnauthorizedError,
)

from memkit import StorageURL
from memkit.backend import Record, Scope, scope_matches
from memkit.errors import (
    BackendError,
    BackendRefusedError,
    BackendTimeoutError,
    BackendUnavailableError,
    ConfigurationError,
    ContentError,
    InvalidURLError,
    ValidationError,
)
from memkit.testing.pinecone_double import _check_metadata, matches

HOSTILE = ["'", '"', "{", "}", "|", "@", "*", "\\", "%", "%25", "%2F", "~", "_", "-", ".", "..", "/", ":", " ",
           "$or", "$and", "$eq", "_u", "_v", "_flt", "' OR '1'='1", "@u:{bob}", "\n", "\t", "\u202e", "é", "日本",
           "🙂", "\uffff", "\U0010ffff", "a" * 600, "x" * 511]  # fmt: skip
characters = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
texts = st.one_of(st.sampled_from(HOSTILE), st.text(characters, max_size=12))
ids = texts.filter(bool)
twins = st.sampled_from([0, 1, 1.0, 0.0, -0.0, 2**53])
scalars = st.one_of(texts, st.integers(-(2**63) + 1, 2**63 - 1), st.booleans(),
                    st.floats(allow_nan=False, allow_infinity=False), twins)  # fmt: skip
field_values = st.one_of(scalars, st.lists(texts, max_size=3).map(tuple))
fields = st.dictionaries(st.sampled_from(["kind", "tags", "$or", "_u", "n", "é"]), field_values, max_size=3)
scopes = st.builds(Scope, user_id=st.none() | texts, agent_id=st.none() | texts, session_id=st.none() | texts)


def record(rid: str, scope: Scope, flds: dict[str, Any], **extra: Any) -> Record:
    return Record(id=rid, scope=scope, body=extra.pop("body", b"b"), fields=flds, importance=0.5,
                  timestamp=extra.pop("timestamp", 1000.0), **extra)  # fmt: skip


# -- ids and namespaces ---------------------------------------------------------------------------------------
@given(st.lists(ids, min_size=2, max_size=30, unique=True))
def test_vector_ids_are_legal_and_injective(record_ids: list[str]) -> None:
    encoded = [vector_id(i) for i in record_ids]
    assert len(set(encoded)) == len(encoded)
    for vid in encoded:
        assert vid.isascii() and "\x00" not in vid and 0 < len(vid) <= 512


def test_vector_ids_readable_when_plain_digest_when_long() -> None:
    assert vector_id("m-0001_a.b:c") == "m-0001_a.b:c"
    assert vector_id("a b/é") == "a%20b%2F%C3%A9"
    assert vector_id("~x") == "%7Ex"  # so no encoded id starts with "~", the digest form's mark
    assert vector_id("a" * 600).startswith("~") and len(vector_id("a" * 600)) == 65
    for bad in ["", "a\x00b", "\ud800"]:
        with pytest.raises(ValidationError):
            vector_id(bad)


@given(st.lists(texts, min_size=2, max_size=20, unique=True))
def test_namespaces_are_legal_and_injective(collections: list[str]) -> None:
    names = [namespace_of("memkit", c) for c in collections]
    assert len(set(names)) == len(names)
    assert all(n.isascii() and len(n) <= 512 and n.startswith("memkit") for n in names)


def test_namespaces_readable_when_plain() -> None:
    assert namespace_of("memkit", "long_term") == "memkit.long_term"
    assert namespace_of("memkit", "a.b").startswith("memkit~")  # "." is the plain form's separator
    with pytest.raises(ValidationError):
        namespace_of("memkit", "a\x00")


# -- records as metadata --------------------------------------------------------------------------------------
@settings(max_examples=200)
@given(rid=ids, scope=scopes, flds=fields, body=st.binary(max_size=64) | st.text(max_size=20).map(str.encode),
       text=st.none() | texts, expires=st.none() | st.floats(0, 1e12), vector=st.booleans())  # fmt: skip
def test_records_round_trip_through_metadata(
    rid: str, scope: Scope, flds: dict[str, Any], body: bytes, text: str | None, expires: float | None, vector: bool
) -> None:
    original = record(rid, scope, flds, body=body, text=text, expires_at=expires,
                      vector=np.ones(4, np.float32) if vector else None)  # fmt: skip
    metadata = encode_metadata(original)
    _check_metadata(metadata)  # only what Pinecone stores: flat strings, numbers, booleans, lists of strings
    back = decode_record(metadata, [1.0, 1.0, 1.0, 1.0])
    assert (back.id, back.scope, back.body, back.text, back.expires_at) == (rid, scope, body, text, expires)
    assert back.fields == {k: tuple(v) if isinstance(v, list) else v for k, v in flds.items()}
    assert [type(v) for v in back.fields.values()] == [type(v) for v in flds.values()]
    assert (back.vector is None) == (not vector)


def test_counters_are_kept_and_the_metadata_limit_is_named() -> None:
    base = record("r", Scope(user_id="u"), {})
    kept = encode_metadata(base, {"_n": 3, "_la": 5.0, "_u": "someone else"})
    assert kept["_n"] == 3 and kept["_la"] == 5.0 and kept["_u"] == "u"
    assert decode_record(kept, None).access_count == 3
    big = record("big", Scope(user_id="u"), {}, body=b"x" * MAX_METADATA_BYTES)
    with pytest.raises(ContentError, match=r"'big'.*40,960 bytes \(40 KB\)"):
        encode_metadata(big)
    for bad in [record("r", Scope(user_id="a\x00"), {}), record("r", Scope(user_id="u"), {"a\x00": 1}),
                record("r", Scope(user_id="u"), {}, text="\ud800")]:  # fmt: skip
        with pytest.raises(ValidationError):
            encode_metadata(bad)


# -- filters --------------------------------------------------------------------------------------------------
def _equal(a: Any, b: Any) -> bool:
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def reference(rec: Record, scope: Scope, filters: dict[str, Any], now: float | None, min_importance: float) -> bool:
    """memkit's definition of a match, as memory:// implements it."""
    if not scope_matches(rec.scope, scope) or (now is not None and rec.is_expired(now)):
        return False
    if rec.importance < min_importance:
        return False
    for name, wanted in filters.items():
        have = rec.fields.get(name, ())
        haves = have if isinstance(have, tuple) else (have,)
        options = wanted if isinstance(wanted, list | tuple) else (wanted,)
        if not any(_equal(h, w) for h in haves for w in options):
            return False
    return True


@settings(max_examples=300, suppress_health_check=list(HealthCheck))
@given(data=st.data(), stored=st.lists(st.tuples(scopes, fields), min_size=1, max_size=6),
       wanted=st.dictionaries(st.sampled_from(["kind", "tags", "$or", "_u", "n", "é"]),
                              scalars | st.lists(scalars, max_size=3), max_size=2),
       now=st.none() | st.just(2000.0), min_importance=st.sampled_from([0.0, 0.5, 0.7]))  # fmt: skip
def test_filters_match_exactly_what_memkit_means(data: st.DataObject, stored: list[tuple[Scope, dict[str, Any]]],
                                                 wanted: dict[str, Any], now: float | None,
                                                 min_importance: float) -> None:  # fmt: skip
    records = [record(f"r{i}", scope, flds, expires_at=data.draw(st.sampled_from([None, 1500.0, 2500.0])))
               for i, (scope, flds) in enumerate(stored)]  # fmt: skip
    scope = data.draw(st.sampled_from([r.scope for r in records] + [Scope()]))
    where = query_filter(scope, wanted, now=now, min_importance=min_importance)
    for rec in records:
        assert matches(encode_metadata(rec), where) == reference(rec, scope, wanted, now, min_importance)


def test_filter_forms() -> None:
    where = query_filter(Scope(user_id="a'\"}", session_id="s"), {"kind": ["x", 1], "tags": []}, now=5.0,
                         min_importance=0.2, timestamp_from=("$gte", 7.0))  # fmt: skip
    conditions = where["$and"]
    assert conditions[0] == {"_v": {"$eq": 1}}
    assert {"_u": {"$eq": "a'\"}"}} in conditions and {"_s": {"$eq": "s"}} in conditions
    assert {"_exp": {"$gt": 5.0}} in conditions and {"_imp": {"$gte": 0.2}} in conditions
    assert {"_ts": {"$gte": 7.0}} in conditions
    assert [c for c in conditions if "_flt" in c][1] == {"_flt": {"$in": ["0" * 32]}}  # empty any-of: nothing
    assert query_filter(Scope(), None) == {"$and": [{"_v": {"$eq": 1}}]}
    gone, kept = record("g", Scope(user_id="u"), {}, expires_at=3.0), record("k", Scope(user_id="u"), {})
    assert matches(encode_metadata(gone), expired_filter(3.0))
    assert not matches(encode_metadata(kept), expired_filter(3.0))


def test_a_field_named_like_memkits_keys_never_widens_the_scope() -> None:
    bob = record("b", Scope(user_id="bob"), {"_u": "alice", "$or": "x"})
    for filters in ({"_u": "alice"}, {"$or": "x"}, {}):
        assert not matches(encode_metadata(bob), query_filter(Scope(user_id="alice"), filters))
    assert matches(encode_metadata(bob), query_filter(Scope(user_id="bob"), {"_u": "alice", "$or": ["x"]}))


def test_numbers_keep_the_contracts_equality() -> None:
    stored = encode_metadata(record("r", Scope(user_id="u"), {"n": 2**53 + 1, "f": 1.0, "b": True, "s": "1"}))
    assert matches(stored, query_filter(Scope(user_id="u"), {"n": 2**53 + 1}))
    assert not matches(stored, query_filter(Scope(user_id="u"), {"n": 2**53}))  # float64 would equate them
    assert matches(stored, query_filter(Scope(user_id="u"), {"f": 1}))
    assert not matches(stored, query_filter(Scope(user_id="u"), {"b": 1}))
    assert not matches(stored, query_filter(Scope(user_id="u"), {"s": 1}))


# -- batches --------------------------------------------------------------------------------------------------
def test_upsert_batches_stay_within_count_and_bytes() -> None:
    small = [{"id": f"s{i}", "values": [0.5] * 8, "metadata": {"_b": "x"}} for i in range(2_500)]
    big = [{"id": f"b{i}", "values": [0.123456789] * 384, "metadata": {"_b": "y" * 30_000}} for i in range(100)]
    for items in (small, big, small[:3] + big[:70] + small[3:1500]):
        batches = batches_by_size(items)
        assert [item for batch in batches for item in batch] == items
        assert all(0 < len(b) <= 1_000 for b in batches)
        import msgspec

        assert all(len(msgspec.json.encode({"vectors": b})) <= MAX_UPSERT_BYTES + 100 for b in batches)
    assert [len(b) for b in batches_by_size(small)] == [1_000, 1_000, 500]


def test_fetch_batches_keep_urls_short() -> None:
    ids = [vector_id(f"{'é' * 80}{i}") for i in range(300)]
    batches = fetch_batches(ids)
    assert [i for b in batches for i in b] == ids
    assert all(len(b) <= 100 and sum(len(i) * 3 for i in b) <= 20_000 for b in batches)
    assert fetch_batches([]) == []


# -- errors ---------------------------------------------------------------------------------------------------
def api(cls: type[ApiError], status: int) -> ApiError:
    return cls(message="nope", status_code=status, body=None, reason="r", headers={})


@pytest.mark.parametrize(
    ("error", "mapped"),
    [
        (api(UnauthorizedError, 401), BackendRefusedError),
        (RateLimitError(message="slow down", status_code=429, body=None, reason="r", headers={}),
         BackendUnavailableError),
        (api(ServiceError, 503), BackendUnavailableError),
        (PineconeConnectionError("reset"), BackendUnavailableError),
        (PineconeTimeoutError("late"), BackendTimeoutError),
        (api(ApiError, 400), BackendError),
    ],
)  # fmt: skip
def test_sdk_errors_map_to_memkit_errors(error: Exception, mapped: type[Exception]) -> None:
    got = pinecone_error(error, "pinecone://i")
    assert type(got) is mapped and "pinecone://i" in str(got)
    assert pinecone_error(ValueError("x"), "w") is None


# -- URL options ----------------------------------------------------------------------------------------------
def test_url_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PINECONE_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="PINECONE_API_KEY"):
        settings_of(StorageURL("pinecone://idx"))
    monkeypatch.setenv("PINECONE_API_KEY", "from-env")
    assert settings_of(StorageURL("pinecone://idx")).api_key == "from-env"
    url = StorageURL("pinecone://idx?api_key=sekrit&namespace=app-1&timeout=2.5&concurrency=3")
    got = settings_of(url)
    assert (got.api_key, got.prefix, got.timeout, got.concurrency, got.index_name) == ("sekrit", "app-1", 2.5, 3, "idx")
    assert "sekrit" not in str(url) and "sekrit" not in repr(url)
    for bad in ["pinecone://idx?namspace=x", "pinecone://idx?namespace=a.b", "pinecone://idx?namespace=%C3%A9",
                "pinecone://idx?concurrency=0", "pinecone://idx?timeout=soon"]:  # fmt: skip
        with pytest.raises(InvalidURLError):
            settings_of(StorageURL(bad))
    with pytest.raises(ConfigurationError, match="name the index"):
        settings_of(StorageURL("pinecone://"))


def test_expiry_sentinel_is_not_a_real_expiry() -> None:
    stored = encode_metadata(record("r", Scope(user_id="u"), {}, timestamp=time.time()))
    assert math.isfinite(stored["_exp"]) and decode_record(stored, None).expires_at is None
