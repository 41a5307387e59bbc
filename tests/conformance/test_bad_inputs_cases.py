"""The table of the bad-input catalogue (run by ``test_bad_inputs.py``): (entry point, argument, value, outcome).

The outcome is the memkit error the call must raise, or ``OK`` (it must succeed, identically on every
backend). Each value goes alone into an otherwise valid call (``DEFAULTS`` in the runner).
"""

from __future__ import annotations

import base64
import reprlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from typing import Any

from memkit import (
    ConfigurationError,
    ContentError,
    EmbeddingError,
    ImportanceError,
    InvalidURLError,
    LongTermConfig,
    MemkitError,
    NotFoundError,
    ScopeError,
    UnknownSchemeError,
    ValidationError,
    Weights,
)
from memkit.embedders import HashingEmbedder
from memkit.layers.checkpoints import CheckpointConfig
from memkit.layers.longterm import NewMemory
from memkit.layers.shortterm import ShortTermConfig
from memkit.layers.toolcache import ToolCacheConfig

ADA, MALLORY = "ada", "mallory"
OK = None
WRITES = frozenset(
    {"store", "store_many", "NewMemory", "add_turns", "Turn", "update", "forget", "forget_all", "sweep_expired"}
)
"""Entry points that may change the store when they succeed (never ada's data: see the runner)."""


@dataclass(frozen=True)
class Ref:
    """A value known only at run time: a seeded id, a cursor, the store's URL, or a fresh object."""

    name: str
    make: Callable[..., Any] | None = field(default=None, compare=False)

    def build(self, refs: dict[str, Any], url: str) -> Any:
        if self.make is not None:
            return self.make()
        return url if self.name == "url" else refs[self.name]

    def __repr__(self) -> str:
        return f"<{self.name}>"


@dataclass(frozen=True)
class Case:
    entry: str
    arg: str
    value: object
    expect: type[MemkitError] | None
    at: int = 0
    known: frozenset[str] = frozenset()
    """Backends where this case still fails for a reason outside the layer (see ``KNOWN``): expected to
    fail there, and reported when it stops failing."""

    @property
    def label(self) -> str:
        return f"#{self.at} {self.entry}({self.arg}={reprlib.repr(self.value)})"


class NoOffset(tzinfo):
    """A tzinfo that knows no offset: such a datetime is naive, whatever its tzinfo says."""

    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return None

    def dst(self, dt: datetime | None) -> timedelta | None:
        return None

    def tzname(self, dt: datetime | None) -> str | None:
        return None


class BrokenEmbedder(HashingEmbedder):
    def __init__(self, dim: object = 384, model_id: object = "broken") -> None:
        super().__init__()
        self._bad_dim, self._bad_id = dim, model_id

    @property
    def dim(self) -> int:
        return self._bad_dim  # type: ignore[return-value]

    @property
    def model_id(self) -> str:
        return self._bad_id  # type: ignore[return-value]


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


# fmt: off
NOT_TEXT = (5, 2.5, True, b"text", ["text"], {"text": 1}, object())
BAD_TEXT = ("", "\x00", "a\x00b", "\ud800", "a\udfffb", "x" * 513)
INJECT = ("' OR '1'='1", "'); DROP TABLE memkit_records; --", "@user_id:{ada}", "*", "ada*", "%", "_", "\\",
          '{"$ne": null}', "a OR b", "NEAR(a b)", 'a" OR "b', "content:ada", "[a-z]*", "?", "ada|*", "3:ada|-|-",
          "${x}", "\u202eada", "ada ", "ADA", "-ada", "ada)", "~ada", "@kind:{fact}", "x" * 512)
QUERY_INJECT = (*INJECT[:20], "door* OR code^2", "NEAR(door code, 2)", '"door', "door AND", "-door", "@text:door",
                "code:door", "(door", "door*=>[KNN 10 @v $v]", "é" * 8000)
IMPORTANCE_BAD = (float("nan"), float("inf"), float("-inf"), -1e-9, 1.0000001, 10**400, "0.5", True, None, [0.5])
TTL_BAD = (0, -1, 0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1e308, 10**400, timedelta.max,
           timedelta(0), timedelta(seconds=-1), timedelta.min, "60", True, b"60", [60], datetime.now(UTC))
TTL_OK = (3600, 86400.5, 10**10, timedelta(days=1), timedelta(days=365 * 5000))
NAIVE = datetime(2024, 1, 1)
MOMENT_BAD = ("2024-01-01T00:00:00Z", 1.7e9, 1700000000, NAIVE, NAIVE.replace(tzinfo=NoOffset()),
              date(2024, 1, 1), True, b"2024", [datetime.now(UTC)])
MOMENT_OK = (datetime(1, 1, 1, tzinfo=UTC), datetime.max.replace(tzinfo=UTC),
             datetime(2024, 1, 1, tzinfo=timezone(timedelta(hours=14))))
METADATA_BAD = ("x", ["a"], 5, b"{}", {1: "a"}, {None: 1}, {("t",): 1}, {"a": float("nan")}, {"a": float("inf")},
                {"a": 2**63}, {"a": -(2**63) - 1}, {"a": b"x"}, {"a": object()}, {"a": {1, 2}}, {"a": "\x00"},
                {"\x00": 1}, {"a": "\ud800"}, {"\ud800": 1}, nested(17), nested(3000), {"a": "x" * 70_000},
                {"a": datetime.now(UTC)}, {f"k{i}": "v" * 40 for i in range(2000)})
METADATA_OK: tuple[Any, ...] = ({}, None, {"a": None}, {"' OR 1=1 --": "x"}, {"@user_id": "{ada}"},
               {"a b": "c d"}, {"meta.x": 1}, {"": 1}, nested(16), {"a": [1, "b", None, {"c": 2.5}]},
               {"a": 2**63 - 1}, {"a": -0.0},
               {"a": (1, 2)}, {"a": "x" * 60_000}, {f"k{i}": i for i in range(300)}, {"topic": "*"})
FILTER_BAD: tuple[Any, ...] = ("topic", ["topic"], 5, {"topic": {"$ne": None}}, {"topic": {}}, {"topic": None},
              {"topic": ["home", ["x"]]}, {"topic": [{"a": 1}]}, {"topic": {"home"}}, {"topic": b"home"},
              {"topic": float("nan")}, {"n": float("inf")}, {"n": 10**30}, {1: "home"}, {"\x00": "a"},
              {"topic": "\x00"}, {"topic": "\ud800"}, {"topic": object()}, {"topic": [None]},
              {"topic": ["home", float("nan")]})
FILTER_OK: tuple[Any, ...] = ({"topic": "home"}, {"topic": ["home", "x"]}, {"topic": ("home",)},
             {"topic": "' OR '1'='1"}, {"to'pic": "home"}, {"topic": "*"}, {"topic": "ho*"}, {"topic": "%"},
             {"topic": "_ome"},
             {"topic": "{home}"}, {"topic": "HOME"}, {"topic": "home "}, {"topic": "home|x"}, {"n": 1}, {"n": 1.0},
             {"n": "1"}, {"flag": True}, {"ratio": 0.5}, {"meta.topic": "home"}, {"": "x"}, {"topic": []},
             {"n": 2**62})
KINDS_BAD = (5, [5], [None], [["fact"]], b"fact", ["\x00"], ["\ud800"], object(), [b"fact"], {"fact": 1})
KINDS_OK: tuple[Any, ...] = ("fact", ["fact"], ("fact", "turn"), [], ["' OR 1=1"], ["*"], ["fac%"], {"turn"}, ["FACT"])
CURSOR_BAD = ("garbage", "", "====", "\x00", "\ud800", "é", "x" * 10_000, 5, b"abc", ["x"], b64("[1, 2, 3]"),
              b64('["x", "y"]'), b64('{"a": 1}'), b64("null"), b64("[1e999, \"x\"]"), b64("[true, \"x\"]"),
              b64('[0, "\\u0000"]'), b64('[0, "\\ud800"]'))
URL_BAD = (5, 2.5, True, False, 0, b"memory://", ["memory://"], {"a": 1}, object(), "", "memory", "memory:/", "://",
           "\x00", "memory://\x00", "sqlite:///\ud800.db", "sqlite:///a\nb.db", "sqlite:///a\x00b.db",
           "redis://h:99999/0", "redis://h:-1/0", "redis://h:port/0", "redis://[::1/0", "memory://?a=1&a=2",
           "memory://?x=%00", "x" * 100_000)
OPTION_BAD = ("bogus=1", "bogus=", "dtype=float64", "dtype=", "timeout=nan", "timeout=inf", "timeout=abc", "timeout=",
              "timeout=1_0", "timeout=-1", "connect_timeout=nan", "connect_timeout=inf", "connect_timeout=1e999",
              "connect_timeout=", "retries=-1", "retries=1.5", "retries=1_0", "retries=" + "9" * 5000, "%00=1",
              "x=%00", "dtype=float32&dtype=int8", "synchronous=full&synchronous=normal", "schema=a;drop",
              "schema=x&schema=y", "pool_max=0", "index=HNSW%00", "socket_timeout=nan", "retries= 1")
OPEN_BAD = ("nope://x", "sqlite://", "redis://h/abc", "memory://?dtype=float64", "sqlite:///x.db?timeout=nan",
            "sqlite:///x.db?synchronus=full", "redis://h/0?connect_timeout=nan", "redis://h/0?connect_timeout=inf",
            "postgresql://h/db?pool_max=0", "postgresql://h/db?retries=1.5", "postgresql://h/db?connect_timeout=nan",
            "postgresql://h/db?sslmode=bogus", "postgresql://h/db?schema=a;drop",
            "postgresql://h/db?port=0")
NOT_NUMBER = ("5", True, None, [5], b"5", float("nan"))
# fmt: on


def cases(entry: str, arg: str, expect: type[MemkitError] | None, *values: object) -> list[Case]:
    return [Case(entry, arg, value, expect) for value in values]


def scope_cases(entry: str, *, ok: tuple[object, ...] = INJECT) -> list[Case]:
    return [
        *cases(entry, "user_id", ScopeError, *NOT_TEXT, *BAD_TEXT),
        *cases(entry, "user_id", OK, *ok),
        *cases(entry, "session_id", ScopeError, *NOT_TEXT, *BAD_TEXT),
        *cases(entry, "agent_id", OK, *ok[:6]),
    ]


def memory_fields(entry: str) -> list[Case]:
    """The arguments ``store`` and ``NewMemory`` share."""
    return [
        *cases(entry, "content", ContentError, *NOT_TEXT, None, "", " \n\t ", "\x00", "a\x00b", "\ud800", "x" * 8001),
        *cases(entry, "content", OK, *INJECT, "x" * 8000, "é" * 8000, "\U0001f642" * 4000),
        *cases(entry, "kind", ValidationError, *NOT_TEXT, None, *BAD_TEXT, "turn"),
        *cases(entry, "kind", OK, "preference", "' OR 1=1", "*", "x" * 512),
        *cases(entry, "importance", ImportanceError, *IMPORTANCE_BAD),
        *cases(entry, "importance", OK, 0, 1, -0.0, 5e-324),
        *cases(entry, "source", ValidationError, *NOT_TEXT, *BAD_TEXT),
        *cases(entry, "source", OK, *INJECT[:8]),
        *cases(entry, "metadata", ValidationError, *METADATA_BAD),
        *cases(entry, "metadata", OK, *METADATA_OK),
        *cases(entry, "ttl", ValidationError, *TTL_BAD),
        *cases(entry, "ttl", OK, *TTL_OK),
        *cases(entry, "created_at", ValidationError, *MOMENT_BAD),
        *cases(entry, "created_at", OK, *MOMENT_OK),
        *cases(entry, "context", ContentError, *NOT_TEXT, "", "\x00", "\ud800", "x" * 8001),
    ]


def _fresh_generator() -> Any:
    return (item for item in ["probe one"])


# fmt: off
LAYER_CASES = [
    *memory_fields("store"),
    *scope_cases("store"),
    *memory_fields("NewMemory"),
    *cases("NewMemory", "user_id", ScopeError, *NOT_TEXT, *BAD_TEXT),
    *cases("store_many", "items", ValidationError, "abc", None, 5, {"a"}, Ref("generator", _fresh_generator), [5],
           [None], [b"x"], [{"content": "x"}], ["ok", NewMemory(content="y", ttl=1e308)]),
    *cases("store_many", "items", ContentError, [""], ["fine", ""]),
    *cases("store_many", "items", ScopeError, ["fine", NewMemory(content="y", user_id=5)]),  # type: ignore[arg-type]
    *cases("store_many", "items", OK, [], ["a probe", "a probe"], ("tuple probe",)),
    *scope_cases("store_many"),
    *cases("add_turns", "turns", ValidationError, "hi", None, 5, [("Sam", "hi")], [{"speaker": "Sam", "text": "hi"}],
           [None], {"a"}),
    *cases("add_turns", "turns", OK, []),
    *cases("add_turns", "thread", ValidationError, *NOT_TEXT, *BAD_TEXT),
    *cases("add_turns", "thread", OK, *INJECT[:10], "3:ada|-|-|8:chat-42"),
    *cases("add_turns", "importance", ImportanceError, *IMPORTANCE_BAD),
    *scope_cases("add_turns", ok=INJECT[:8]),
    *cases("Turn", "speaker", ValidationError, *NOT_TEXT, None, *BAD_TEXT),
    *cases("Turn", "speaker", OK, "Sam: x", "' OR 1=1", "*"),
    # A turn is "Sam: " + text; past max_content_chars it is stored whole and indexed as passages, past
    # add_turns' own limit (1,000,000 characters) refused:
    *cases("Turn", "text", ContentError, *NOT_TEXT, None, "", "  ", "\x00", "\ud800", "x" * 999_996),
    *cases("Turn", "text", OK, "x" * 7995, "x" * 7996, *INJECT[:6]),
    *cases("Turn", "at", ValidationError, *MOMENT_BAD),
    *cases("Turn", "at", OK, *MOMENT_OK),
    *cases("Turn", "metadata", ValidationError, *METADATA_BAD[:12]),
    *cases("Turn", "metadata", OK, None, {"thread": "other", "position": -1}),
    *cases("update", "memory_id", ValidationError, *NOT_TEXT, None, *BAD_TEXT),
    *cases("update", "memory_id", NotFoundError, Ref("ada_id"), *INJECT[:8]),
    *cases("update", "user_id", NotFoundError, ADA, "MALLORY", "mallory "),
    *cases("update", "user_id", ScopeError, *NOT_TEXT, *BAD_TEXT),
    *cases("update", "content", ContentError, *NOT_TEXT, "", "\x00", "\ud800", "x" * 8001),
    *cases("update", "content", OK, *INJECT[:6]),
    *cases("update", "importance", ImportanceError, *[v for v in IMPORTANCE_BAD if v is not None]),
    *cases("update", "kind", ValidationError, *NOT_TEXT, *BAD_TEXT, "turn"),
    *cases("update", "metadata", ValidationError, *METADATA_BAD[:16]),
    *cases("update", "ttl", ValidationError, *TTL_BAD),
    *cases("update", "ttl", OK, *TTL_OK[:3]),
    *cases("forget", "memory_id", ValidationError, *NOT_TEXT, None, *BAD_TEXT),
    *cases("forget", "memory_id", OK, Ref("ada_id"), *INJECT),
    *scope_cases("forget"),
    *scope_cases("forget_all"),
    *cases("forget_all", "user_id", ScopeError, None),
    *cases("get", "memory_id", ValidationError, *NOT_TEXT, None, *BAD_TEXT),
    *cases("get", "memory_id", NotFoundError, Ref("mallory_id"), *INJECT),
    *cases("get", "user_id", NotFoundError, MALLORY, *INJECT),
    *cases("get", "user_id", ScopeError, *NOT_TEXT, *BAD_TEXT),
    *cases("get", "session_id", NotFoundError, "s1", *INJECT[:6]),
    *scope_cases("list"),
    *cases("list", "kinds", ValidationError, *KINDS_BAD),
    *cases("list", "kinds", OK, *KINDS_OK),
    *cases("list", "metadata", ValidationError, *FILTER_BAD),
    *cases("list", "metadata", OK, *FILTER_OK),
    *cases("list", "limit", ValidationError, 0, -1, 1001, 10**9, 10**400, 2.5, True, False, "10", None, float("nan")),
    *cases("list", "limit", OK, 1, 1000),
    *cases("list", "cursor", ValidationError, *CURSOR_BAD),
    *cases("list", "cursor", OK, Ref("cursor")),
    *cases("list@mallory", "cursor", OK, Ref("cursor")),
    *cases("list", "newest_first", ValidationError, "yes", "", 1, None),
    *cases("list", "all_scopes", ValidationError, "False", "", 0, None),
    *cases("list", "all_scopes", OK, True),
    *cases("recall", "query", ContentError, *NOT_TEXT, None, "", "   ", "\x00", "\ud800", "x" * 8001),
    *cases("recall", "query", OK, *QUERY_INJECT),
    *scope_cases("recall"),
    *cases("recall", "k", ValidationError, 0, -1, 201, 10**9, 10**400, 2.5, True, False, "5", float("nan"), [5]),
    *cases("recall", "k", OK, 1, 200, None),
    *cases("recall", "kinds", ValidationError, *KINDS_BAD),
    *cases("recall", "kinds", OK, *KINDS_OK),
    *cases("recall", "metadata", ValidationError, *FILTER_BAD),
    *cases("recall", "metadata", OK, *FILTER_OK),
    *cases("recall", "min_score", ValidationError, "5", True, [5], b"5", float("nan"), float("inf"), 10**400),
    *cases("recall", "min_score", OK, 0.0, -0.0, 100.0),
    *cases("recall", "min_importance", ImportanceError, float("nan"), -1, 2, "0.5", True, None),
    *cases("recall", "min_importance", OK, 0.0, 1.0, 0.6),
    *cases("recall", "weights", ValidationError, "x", {"similarity": 1.0}, (0.5, 0.5), 5, Weights),
    *cases("recall", "weights", OK, Weights(similarity=1, lexical=0, recency=0, importance=0),
           Weights(similarity=0, lexical=0, recency=0, importance=0)),
    *cases("recall", "as_of", ValidationError, *MOMENT_BAD),
    *cases("recall", "as_of", OK, *MOMENT_OK),
    *cases("recall", "all_scopes", ValidationError, "False", 1, None),
    *cases("sweep_expired", "", OK, None),
]
CLIENT_CASES = [
    *cases("Memkit", "url", InvalidURLError, *URL_BAD),
    *cases("Memkit", "url", UnknownSchemeError, "nope://x"),
    *cases("Memkit", "embedder", ConfigurationError, 5, "HASHING", "", b"hashing", ["hashing"], object(),
           HashingEmbedder),
    *cases("Memkit", "embedder", OK, None),  # not given: the configuration's, else "auto"
    *cases("Memkit", "long_term", ValidationError, "x", {}, {"collection": "x"}, 5, LongTermConfig, Weights()),
    *cases("Memkit", "short_term", ValidationError, "x", {}, {"max_tokens": 500}, 5, ShortTermConfig),
    *cases("Memkit", "tool_cache", ValidationError, "x", {}, 5, ToolCacheConfig),
    *cases("Memkit", "checkpoints", ValidationError, "x", {}, 5, CheckpointConfig),
    *cases("Memkit", "llm", ValidationError, "gpt-4o", {}, 5),
    *cases("Memkit", "layer_urls", ConfigurationError, "long_term", ["long_term"], 5, {"knowledge": "memory://"},
           {1: "memory://", "x": "memory://"}),
    *cases("Memkit", "layer_urls", InvalidURLError, {"long_term": 5}, {"long_term": ""}, {"long_term": b"x"}),
    *cases("Memkit", "layer_urls", UnknownSchemeError, {"long_term": "nope://x"}),
    *cases("Memkit", "layer_urls", OK, {}, None, {"long_term": None}, {"long_term": Ref("url")}, {"graph": Ref("url")}),
    *cases("Memkit", "close_timeout", ValidationError, float("nan"), -1, -1e-9, float("-inf"), "5", True, None, [5],
           10**400),
    *cases("Memkit", "close_timeout", OK, 0, -0.0, 2**70, 1e308, float("inf")),
    *cases("Memkit.open", "embedder", EmbeddingError, BrokenEmbedder(dim="x"), BrokenEmbedder(dim=0),
           BrokenEmbedder(dim=True), BrokenEmbedder(dim=-1), BrokenEmbedder(dim=2.5), BrokenEmbedder(model_id=5),
           BrokenEmbedder(model_id=""), BrokenEmbedder(model_id="a\x00b")),
    *cases("url option", "option", InvalidURLError, *OPTION_BAD),
    *cases("StorageURL", "url", InvalidURLError, *URL_BAD),
    *cases("StorageURL", "url", OK, "MEMORY://", "postgresql://u:p%40ss@h/db", "memory://" + "x" * 10_000),
    *cases("open_backend", "url", InvalidURLError, *URL_BAD[:12], *OPEN_BAD[1:]),
    *cases("open_backend", "url", UnknownSchemeError, "nope://x", "NOPE://x"),
    *cases("HashingEmbedder", "dim", ValidationError, 4, 0, -1, "x", 2.5, True, None, 10**12),
    *[c for arg, values in {
        "collection": (*NOT_TEXT, None, *BAD_TEXT),
        "min_importance": (*NOT_NUMBER, float("inf"), -0.1, 1.1, 10**400),
        "max_content_chars": (*NOT_NUMBER, 0, -1, 2.5, 10**7),
        "dedupe": ("no", 1, None, "false"),
        "merge_threshold": (*NOT_NUMBER, 0, 1.5, -0.5),
        "default_k": (*NOT_NUMBER, 0, 2.5, 201),
        "max_k": (*NOT_NUMBER, 0, 10_001, 2.5, 10**9),
        "min_score": ("0.1", True, [0.1], float("nan"), float("inf")),
        "weights": ("x", {}, (0.5, 0.5, 0, 0), None, Weights),
        "half_life_days": (*NOT_NUMBER, 0, -1, float("inf"), 1e308, 10**400),
        "track_access": ("yes", None, 1, "false"),
        "fusion": ("RRF", None, ["blend"], 5, ""),
        "neighbour_weight": (*NOT_NUMBER, -1, float("inf"), 10**400),
        "context_turns": (*NOT_NUMBER, -1, 21, 2.5),
    }.items() for c in cases("LongTermConfig", arg, ValidationError, *values)],
    *[c for arg in ("similarity", "lexical", "recency", "importance")
      for c in cases("Weights", arg, ValidationError, *NOT_NUMBER, -1, float("inf"), 10**400, "x")],
]
# fmt: on
KNOWN: dict[tuple[str, str], tuple[frozenset[str], str]] = {
    # (entry, repr(value)) -> (backends, why): backend defects still open. None now: the float/int filter on
    # Redis, its boolean cursor timestamp and NUL in cursor ids were fixed after this catalogue found them.
}


def _numbered(at: int, case: Case) -> Case:
    known = KNOWN.get((case.entry, reprlib.repr(case.value)), (frozenset(), ""))[0]
    return Case(case.entry, case.arg, case.value, case.expect, at, known)


CASES = [_numbered(at, c) for at, c in enumerate([*CLIENT_CASES, *LAYER_CASES])]
