"""weaviate:// translation layers, exhaustively: collection names, UUIDs, records as properties, filters, scan
pages, batches, errors, URL options. Filters are checked end to end: memkit's filter tree, turned into the
client's ``Filter`` and then into the gRPC message the client sends, evaluated by the loopback double's
filter semantics, must match exactly what memkit's contract means, over hostile ids, names and values."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("weaviate", reason="the weaviate extra is not installed: pip install 'memkit-sdk[weaviate]'")

from memkit_backends.weaviate._connect import collection_schema, stored_dim
from memkit_backends.weaviate._errors import classify
from memkit_backends.weaviate._filters import (
    NOTHING,
    And,
    Cond,
    Or,
    expired_where,
    ids_where,
    query_where,
    scope_digest,
    to_weaviate,
)
from memkit_backends.weaviate._io import MAX_BATCH_BYTES, batches_by_size, chunks
from memkit_backends.weaviate._layout import class_name, decode_record, encode_properties, object_uuid
from memkit_backends.weaviate._options import settings_of
from memkit_backends.weaviate._scan import next_rows
from memkit_backends.weaviate._search import bm25_words
from weaviate.collections.filters import _FilterToGRPC

from memkit import StorageURL
from memkit.backend import Record, Scope, scope_matches
from memkit.errors import (
    BackendError,
    BackendRefusedError,
    BackendTimeoutError,
    BackendUnavailableError,
    InvalidURLError,
    ValidationError,
)
from memkit.testing.weaviate_double_grpc import matches
from memkit.testing.weaviate_double_schema import full_schema
from memkit.testing.weaviate_double_store import Collection, Obj

HOSTILE = ["'", '"', "{", "}", "|", "@", "*", "?", "\\", "%", "~", "_", "-", ".", "/", ":", " ", " alice", "alice ",
           "ALICE", "$or", "_id", "id", "u", "flt", "' OR '1'='1", "@u:{bob}", "\n", "\t", "\u202e", "é", "日本",
           "🙂", "\uffff", "\U0010ffff", "a" * 600]  # fmt: skip
characters = st.characters(codec="utf-8", exclude_characters="\x00")  # no lone surrogates, no NUL
texts = st.one_of(st.sampled_from(HOSTILE), st.text(characters, max_size=12))
ids = texts.filter(bool)
twins = st.sampled_from([0, 1, 1.0, 0.0, -0.0, 2**53, 2**53 + 1])
scalars = st.one_of(texts, st.integers(-(2**63) + 1, 2**63 - 1), st.booleans(),
                    st.floats(allow_nan=False, allow_infinity=False), twins)  # fmt: skip
field_values = st.one_of(scalars, st.lists(texts, max_size=3).map(tuple))
field_names = st.sampled_from(["kind", "tags", "$or", "u", "flt", "_id", "n", "é", " kind"])
fields = st.dictionaries(field_names, field_values, max_size=3)
scopes = st.builds(Scope, user_id=st.none() | texts, agent_id=st.none() | texts, session_id=st.none() | texts)
COLLECTION = Collection(schema=full_schema(collection_schema("Memkit_t", "t", 4, "flat")))


def record(rid: str, scope: Scope, flds: dict[str, Any], **extra: Any) -> Record:
    return Record(id=rid, scope=scope, body=extra.pop("body", b"b"), fields=flds,
                  importance=extra.pop("importance", 0.5), timestamp=extra.pop("timestamp", 1000.0),
                  **extra)  # fmt: skip


def stored(rec: Record) -> Obj:
    """``rec`` as the double holds it after a batch write (properties checked against the schema)."""
    from memkit.testing.weaviate_double_store import check_value

    props = {k: check_value(COLLECTION, k, v) for k, v in encode_properties(rec).items()}
    vector = None if rec.vector is None else np.asarray(rec.vector, np.float32)
    return Obj(object_uuid(rec.id), props, vector, 1, 1)


def admits(where: Any, rec: Record) -> bool:
    """The double's verdict on ``where`` for ``rec``, through the exact gRPC message the client would send."""
    return matches(stored(rec), _FilterToGRPC.convert(to_weaviate(where)), COLLECTION)


# -- names and ids ----------------------------------------------------------------------------------------
@given(st.lists(texts, min_size=2, max_size=20, unique=True))
def test_class_names_are_legal_and_injective(collections: list[str]) -> None:
    names = [class_name("Memkit", c) for c in collections]
    assert len({n.lower() for n in names}) == len(names)  # Weaviate may compare class names case-blind
    for name in names:
        assert name.isascii() and name.replace("_", "").isalnum() and name[0].isupper() and len(name) <= 255


def test_class_names_readable_when_plain() -> None:
    assert class_name("Memkit", "long_term") == "Memkit_long_term"
    assert class_name("Memkit", "Long").startswith("Memkit__")  # capitals: digest (case-blind names)
    assert class_name("Memkit", "_x").startswith("Memkit__") and class_name("Memkit", "a-b").startswith("Memkit__")
    with pytest.raises(ValidationError):
        class_name("Memkit", "a\x00")


@given(st.lists(ids, min_size=2, max_size=30, unique=True))
def test_uuids_are_injective_and_deterministic(record_ids: list[str]) -> None:
    uuids = [object_uuid(i) for i in record_ids]
    assert len(set(uuids)) == len(uuids) and uuids == [object_uuid(i) for i in record_ids]
    for bad in ["", "a\x00b", "\ud800"]:
        with pytest.raises(ValidationError):
            object_uuid(bad)


# -- records as properties ---------------------------------------------------------------------------------
@settings(max_examples=200)
@given(rid=ids, scope=scopes, flds=fields, body=st.binary(max_size=64), text=st.none() | texts,
       expires=st.none() | st.floats(0, 1e12), vector=st.booleans())  # fmt: skip
def test_records_round_trip_through_properties(
    rid: str, scope: Scope, flds: dict[str, Any], body: bytes, text: str | None, expires: float | None, vector: bool
) -> None:
    original = record(rid, scope, flds, body=body, text=text, expires_at=expires,
                      vector=np.ones(4, np.float32) if vector else None)  # fmt: skip
    obj = stored(original)  # the double refuses any property not in the schema or of another type
    assert set(obj.properties) <= {p["name"] for p in COLLECTION.schema["properties"]}
    back = decode_record(obj.properties, [1.0] * 4)
    assert (back.id, back.scope, back.body, back.text, back.expires_at) == (rid, scope, body, text, expires)
    assert back.fields == {k: tuple(v) if isinstance(v, list) else v for k, v in flds.items()}
    assert [type(v) for v in back.fields.values()] == [type(v) for v in flds.values()]
    assert (back.vector is None) == (not vector)


def test_scope_ids_reach_weaviate_only_as_digests() -> None:
    props = encode_properties(record("r", Scope(user_id=" alice", agent_id="bot"), {"kind": "x"}, text="Hiking boots"))
    assert props["u"] == scope_digest("u", " alice") != scope_digest("u", "alice")
    assert props["a"] == scope_digest("a", "bot") != scope_digest("u", "bot") and "s" not in props
    assert props["tokens"] == "hike boot" and props["nov"] is True and props["exp"] == 1e300
    assert all(len(t) == 32 for t in props["flt"])


def test_counters_are_kept_and_bad_contents_refused() -> None:
    base = record("r", Scope(user_id="u"), {})
    kept = encode_properties(base, {"n": 3, "la": 5.0, "u": "someone else"})
    assert kept["n"] == 3 and kept["la"] == 5.0 and kept["u"] == scope_digest("u", "u")
    assert decode_record(kept).access_count == 3 and decode_record(kept).last_accessed == 5.0
    bad_records = [
        record("r", Scope(user_id="a\x00"), {}),
        record("r", Scope(user_id="u"), {"a\x00": 1}),
        record("r", Scope(user_id="u"), {}, text="\ud800"),
        record("r", Scope(user_id="u"), {}, importance=math.nan),
    ]
    for bad in bad_records:
        with pytest.raises(ValidationError):
            encode_properties(bad)


# -- filters ---------------------------------------------------------------------------------------------------
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
@given(data=st.data(), held=st.lists(st.tuples(scopes, fields), min_size=1, max_size=6),
       wanted=st.dictionaries(field_names, scalars | st.lists(scalars, max_size=3) | st.tuples(scalars), max_size=2),
       now=st.none() | st.just(2000.0), min_importance=st.sampled_from([0.0, 0.5, 0.7]))  # fmt: skip
def test_filters_match_exactly_what_memkit_means(data: st.DataObject, held: list[tuple[Scope, dict[str, Any]]],
                                                 wanted: dict[str, Any], now: float | None,
                                                 min_importance: float) -> None:  # fmt: skip
    records = [record(f"r{i}", scope, flds, expires_at=data.draw(st.sampled_from([None, 1500.0, 2000.0, 2500.0])),
                      importance=data.draw(st.sampled_from([0.1, 0.5, 0.9])))
               for i, (scope, flds) in enumerate(held)]  # fmt: skip
    scope = data.draw(st.sampled_from([r.scope for r in records] + [Scope(), Scope(user_id=" "), Scope(user_id="*")]))
    where = query_where(scope, wanted, now=now, min_importance=min_importance)
    for rec in records:
        assert admits(where, rec) == reference(rec, scope, wanted, now, min_importance)


def test_every_filter_form_the_core_emits() -> None:
    where = query_where(Scope(user_id="a'\"}", session_id="s"), {"kind": ["x", 1], "tags": [], "t": ("a",)},
                        now=5.0, min_importance=0.2)  # fmt: skip
    parts = where.parts
    assert parts[0] == Cond("v", "eq", 1)
    assert Cond("u", "eq", scope_digest("u", "a'\"}")) in parts and Cond("s", "eq", scope_digest("s", "s")) in parts
    assert Cond("exp", "gt", 5.0) in parts and Cond("imp", "gte", 0.2) in parts
    assert [p for p in parts if isinstance(p, Cond) and p.prop == "flt"][1] == Cond("flt", "any", (NOTHING,))
    assert query_where(Scope(), None) == And((Cond("v", "eq", 1),))
    only_scope = And((Cond("v", "eq", 1), Cond("u", "eq", scope_digest("u", "u"))))
    assert query_where(Scope(user_id="u"), {}, min_importance=0.0) == only_scope
    gone, kept = record("g", Scope(user_id="u"), {}, expires_at=3.0), record("k", Scope(user_id="u"), {})
    assert admits(expired_where(3.0), gone) and not admits(expired_where(3.0), kept)
    assert admits(ids_where([object_uuid("g")]), gone) and not admits(ids_where([object_uuid("g")]), kept)
    either = Or((Cond("ts", "lt", 999.0), Cond("ts", "eq", 1000.0)))
    assert admits(either, kept) and not admits(Or((Cond("ts", "gt", 1000.0), Cond("ts", "lte", 999.0))), kept)
    assert admits(And((Cond("ts", "gte", 1000.0),)), kept)  # one part: sent as the part itself


def test_values_are_never_text_from_the_user() -> None:
    """Every value a filter compares is a number, a boolean, a UUID or a hex digest."""
    where = query_where(Scope(user_id="' OR 1=1", agent_id="*", session_id="alice "), {"$or": ["*", "?"], "x": 1},
                        now=1.0, min_importance=0.5)  # fmt: skip
    for part in where.parts:
        assert isinstance(part, Cond)
        values = part.value if isinstance(part.value, tuple) else (part.value,)
        for value in values:
            assert isinstance(value, int | float) or (isinstance(value, str) and len(value) == 32
                                                      and all(c in "0123456789abcdef" for c in value))  # fmt: skip


def test_whitespace_trimming_never_merges_scopes() -> None:
    """Weaviate trims field-tokenized text before comparing: raw ids " alice" and "alice" would meet."""
    alice, spaced = record("a", Scope(user_id="alice"), {"k": "v"}), record("b", Scope(user_id=" alice"), {"k": " v"})
    assert admits(query_where(Scope(user_id="alice")), alice) and not admits(
        query_where(Scope(user_id="alice")), spaced
    )
    assert not admits(query_where(Scope(user_id="alice"), {"k": "v "}), alice)


def test_numbers_keep_the_contracts_equality() -> None:
    rec = record("r", Scope(user_id="u"), {"n": 2**53 + 1, "f": 1.0, "b": True, "s": "1"})
    u = Scope(user_id="u")
    assert admits(query_where(u, {"n": 2**53 + 1}), rec) and not admits(query_where(u, {"n": 2**53}), rec)
    assert admits(query_where(u, {"f": 1}), rec)
    assert not admits(query_where(u, {"b": 1}), rec) and not admits(query_where(u, {"s": 1}), rec)


# -- scan pages ------------------------------------------------------------------------------------------------
@settings(max_examples=100, suppress_health_check=list(HealthCheck))
@given(stamps=st.lists(st.sampled_from([1.0, 2.0, 2.0, 3.0, 5.0]), min_size=0, max_size=25),
       limit=st.integers(1, 6), newest_first=st.booleans())  # fmt: skip
def test_scan_pages_visit_every_row_once_in_order(stamps: list[float], limit: int, newest_first: bool) -> None:
    """``next_rows`` over a fake fetch with Weaviate's behaviour (sorted by ts only, ties in any order)."""
    import anyio

    rows = [(ts, f"r{i:02d}", None) for i, ts in enumerate(stamps)]

    async def fetch(where: Any, most: int, sort: Any) -> list[Any]:
        found = [r for r in rows if all(_holds(c, r) for c in where.parts)]
        found.sort(key=lambda r: (r[0], -int(r[1][1:])), reverse=bool(sort and not sort[1]))  # ties: worst order
        return found[:most]

    async def scan_all() -> list[str]:
        seen: list[str] = []
        after = None
        while True:
            page, more = await next_rows(fetch, And((Cond("v", "eq", 1),)), after, limit=limit,
                                         newest_first=newest_first)  # fmt: skip
            assert len(page) <= limit
            seen += [r[1] for r in page]
            if not more:
                return seen
            after = page[-1][0], page[-1][1]

    expected = sorted(rows, key=lambda r: (r[0], r[1]), reverse=newest_first)
    assert anyio.run(scan_all) == [r[1] for r in expected]


def _holds(cond: Cond, row: tuple[float, str, Any]) -> bool:
    if cond.prop == "v":
        return True
    ops = {"eq": row[0] == cond.value, "gt": row[0] > cond.value, "lt": row[0] < cond.value}
    return bool(ops[cond.op])


# -- batches ----------------------------------------------------------------------------------------------------
def test_batches_stay_within_count_and_bytes() -> None:
    small = [(f"s{i}", {"rid": f"s{i}", "body": "x"}, [0.5] * 8) for i in range(450)]
    big = [(f"b{i}", {"rid": f"b{i}", "body": "y" * 300_000}, [0.1] * 384) for i in range(60)]
    for items in (small, big, small[:3] + big[:40] + small[3:300]):
        batches = batches_by_size(items, 200)
        assert [item for batch in batches for item in batch] == items
        assert all(0 < len(b) <= 200 for b in batches)
        assert all(sum(len(str(i[1])) for i in b) <= MAX_BATCH_BYTES for b in batches)
    assert [len(b) for b in batches_by_size(small, 200)] == [200, 200, 50]
    assert batches_by_size([], 10) == [] and chunks([1, 2, 3], 2) == [[1, 2], [3]]


def test_bm25_words_repeat_what_the_query_repeats() -> None:
    assert bm25_words("apple apple apple banana") == "appl appl appl banana"
    assert bm25_words("the and of") == "" and bm25_words('" OR 1=1 -- @user_id:{bob} *') == "1 1 bob id user"


# -- errors -----------------------------------------------------------------------------------------------------
class AioRpcError(Exception):
    """Named as grpc's: ``classify`` reads the gRPC status code of the error the client chained."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self._code = code

    def code(self) -> Any:
        return type("Code", (), {"name": self._code})()


def _chained(outer: Exception, inner: BaseException) -> Exception:
    outer.__context__ = inner
    return outer


@pytest.mark.parametrize(
    ("make", "expected", "retried"),
    [
        (lambda: AioRpcError("UNAVAILABLE"), BackendUnavailableError, True),
        (lambda: AioRpcError("RESOURCE_EXHAUSTED"), BackendUnavailableError, True),
        (lambda: AioRpcError("UNAUTHENTICATED"), BackendRefusedError, False),
        (lambda: AioRpcError("DEADLINE_EXCEEDED"), BackendTimeoutError, False),
        (lambda: AioRpcError("INVALID_ARGUMENT"), BackendError, False),
        (lambda: _chained(RuntimeError("query failed"), AioRpcError("UNAVAILABLE")), BackendUnavailableError, True),
        (lambda: ConnectionRefusedError("refused"), BackendUnavailableError, True),
        (lambda: ValueError("x"), BackendError, False),
    ],
)  # fmt: skip
def test_client_errors_are_classified_by_code(make: Any, expected: type[Exception], retried: bool) -> None:
    error, transient, _ = classify(make())
    assert error is expected and transient is retried


def test_the_clients_own_retries_are_not_multiplied() -> None:
    from weaviate.exceptions import WeaviateQueryError, WeaviateRetryError

    exhausted = _chained(WeaviateQueryError("gave up", "GRPC search"), WeaviateRetryError("x", 5))
    exhausted.__context__.__context__ = AioRpcError("UNAVAILABLE")  # type: ignore[union-attr]
    assert classify(exhausted)[:2] == (BackendUnavailableError, False)


def test_http_statuses_are_classified() -> None:
    import httpx
    from weaviate.exceptions import UnexpectedStatusCodeError

    for status, expected, retried in [(429, BackendUnavailableError, True), (503, BackendUnavailableError, True),
                                      (401, BackendRefusedError, False), (422, BackendError, False)]:  # fmt: skip
        response = httpx.Response(status, json={"error": []}, request=httpx.Request("GET", "http://x/v1/meta"))
        assert classify(UnexpectedStatusCodeError("x", response))[:2] == (expected, retried)


# -- URL options and schema ---------------------------------------------------------------------------------------
def test_url_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WEAVIATE_API_KEY", raising=False)
    plain = settings_of(StorageURL("weaviate://db.local:8080"))
    assert (plain.host, plain.port, plain.secure, plain.grpc_host, plain.grpc_port, plain.api_key) == (
        "db.local",
        8080,
        False,
        "db.local",
        50051,
        None,
    )
    assert (plain.prefix, plain.index, plain.retries, plain.batch) == ("Memkit", "flat", 4, 200)
    tls = settings_of(StorageURL("weaviates://x.weaviate.cloud?api_key=sekrit&grpc_host=grpc-x.weaviate.cloud"))
    got = (tls.port, tls.secure, tls.grpc_port, tls.grpc_host, tls.api_key)
    assert got == (443, True, 443, "grpc-x.weaviate.cloud", "sekrit")
    assert "sekrit" not in repr(tls) and "sekrit" not in str(StorageURL("weaviates://x?api_key=sekrit"))
    monkeypatch.setenv("WEAVIATE_API_KEY", "from-env")
    assert settings_of(StorageURL("weaviate://h")).api_key == "from-env"
    for bad in ["weaviate://h?grcp_port=1", "weaviate://h?grpc_port=x", "weaviate://h?grpc_port=70000", "weaviate://h?prefix=memkit",
                "weaviate://h?prefix=A-b", "weaviate://h?index=ivf", "weaviate://h?batch=5000", "weaviate://h?retries=-1",
                "weaviate://h/path", "weaviate://"]:  # fmt: skip
        with pytest.raises(InvalidURLError):
            settings_of(StorageURL(bad))


def test_schema_is_explicit() -> None:
    schema = collection_schema("Memkit_t", "t", 8, "flat")
    assert schema["vectorizer"] == "none" and schema["vectorIndexConfig"] == {"distance": "cosine"}
    assert schema["invertedIndexConfig"]["stopwords"] == {"preset": "none"}
    assert schema["multiTenancyConfig"] == {"enabled": False}
    props = {p["name"]: p for p in schema["properties"]}
    assert props["tokens"]["tokenization"] == "whitespace" and props["tokens"]["indexSearchable"]
    assert not props["doc"]["indexFilterable"] and not props["body"]["indexSearchable"]
    assert props["u"]["tokenization"] == "field" and props["ts"]["indexRangeFilters"]
    assert stored_dim(schema["description"]) == (True, 8)
    assert stored_dim("someone's collection") == (False, None)
