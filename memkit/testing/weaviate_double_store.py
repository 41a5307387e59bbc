"""The data model of ``WeaviateDouble``: collections with explicit schemas, objects, filters, BM25, cosine.

Pure Python (no gRPC, no HTTP): ``weaviate_double`` serves it over REST and ``weaviate_double_grpc`` over
gRPC. The semantics implemented, and only these, are listed in ``weaviate_double``'s docstring.
"""

from __future__ import annotations

import fnmatch
import math
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

__all__ = ["Collection", "DoubleError", "Obj", "Store"]

SCALARS: Final = frozenset({"text", "int", "number", "boolean", "uuid", "date", "blob"})
ARRAYS: Final = frozenset({"text[]", "int[]", "number[]", "boolean[]", "uuid[]", "date[]"})


class DoubleError(Exception):
    """A request the double refuses, as Weaviate would: ``kind`` is ``not_found``, ``invalid`` or ``exists``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class Obj:
    uuid: str
    properties: dict[str, Any]
    vector: np.ndarray | None
    created: int
    updated: int
    terms: dict[str, Counter[str]] = field(default_factory=dict)
    """Per searchable property, its tokens counted (a cache, emptied by every write)."""


@dataclass
class Collection:
    schema: dict[str, Any]
    objects: dict[tuple[str, str], Obj] = field(default_factory=dict)
    """(tenant, uuid) -> object; the tenant is "" without multi-tenancy."""
    tenants: dict[str, str] = field(default_factory=dict)
    """tenant name -> activity status (HOT / COLD)."""
    dims: dict[str, int] = field(default_factory=dict)
    """tenant -> the vector length its index was made with by the first vector (kept, as Weaviate's index)."""

    @property
    def name(self) -> str:
        return str(self.schema["class"])

    @property
    def multi_tenant(self) -> bool:
        return bool((self.schema.get("multiTenancyConfig") or {}).get("enabled"))

    def __post_init__(self) -> None:
        self.props: dict[str, dict[str, Any]] = {p["name"]: p for p in self.schema.get("properties") or []}

    def prop(self, name: str) -> dict[str, Any]:
        if name in self.props:
            return self.props[name]
        raise DoubleError("invalid", f"no such prop with name '{name}' found in class '{self.name}' in the schema. "
                          "Check your schema files for which properties in this class are available")  # fmt: skip

    def type_of(self, name: str) -> str:
        return str(self.prop(name)["dataType"][0])

    def partition(self, tenant: str) -> list[Obj]:
        """The objects of one tenant (all objects without multi-tenancy), in UUID order."""
        self.check_tenant(tenant)
        return sorted((o for (t, _), o in self.objects.items() if t == tenant), key=lambda o: o.uuid)

    def check_tenant(self, tenant: str) -> None:
        if self.multi_tenant and not tenant:
            raise DoubleError("invalid", f"class {self.name} has multi-tenancy enabled, but request was without tenant")
        if not self.multi_tenant and tenant:
            raise DoubleError("invalid", f"class {self.name} has multi-tenancy disabled, but request was with tenant")
        if tenant and tenant not in self.tenants:
            raise DoubleError("not_found", f"tenant not found: {tenant!r}")


def check_value(collection: Collection, name: str, value: Any) -> Any:
    """A property value as stored, or DoubleError for one the schema's type refuses."""
    kind = collection.type_of(name)
    bad = DoubleError("invalid", f"invalid {kind} property '{name}' on class '{collection.name}': {value!r:.60}")
    if value is None:
        return None
    if kind in ARRAYS:
        if not isinstance(value, list | tuple):
            raise bad
        return [check_value_scalar(kind[:-2], item, bad) for item in value]
    return check_value_scalar(kind, value, bad)


def check_value_scalar(kind: str, value: Any, bad: DoubleError) -> Any:
    if kind in ("text", "uuid", "date", "blob"):
        if not isinstance(value, str):
            raise bad
        return value
    if kind == "boolean":
        if not isinstance(value, bool):
            raise bad
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(float(value)):
        raise bad
    if kind == "int":
        if float(value) != int(value):
            raise bad
        return int(value)
    return float(value)


class Store:
    """Every collection of the double, behind one lock."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.collections: dict[str, Collection] = {}
        self._clock = 0

    def tick(self) -> int:
        self._clock += 1
        return self._clock

    def find(self, name: str) -> Collection:
        for collection in self.collections.values():
            if collection.name.lower() == name.lower():
                return collection
        raise DoubleError("not_found", f"could not find class {name} in schema")

    def create(self, schema: dict[str, Any]) -> Collection:
        name = str(schema.get("class") or "")
        if not name or not (name[0].isalpha() and name.replace("_", "a").isalnum() and name.isascii()):
            raise DoubleError("invalid", f"'{name}' is not a valid class name")
        schema = {**schema, "class": name[0].upper() + name[1:]}
        if any(c.name.lower() == schema["class"].lower() for c in self.collections.values()):
            raise DoubleError("exists", f"class name {schema['class']!r} already exists")
        for prop in schema.get("properties") or []:
            kinds = prop.get("dataType") or []
            if len(kinds) != 1 or kinds[0] not in SCALARS | ARRAYS:
                raise DoubleError("invalid", f"property {prop.get('name')!r}: unsupported dataType {kinds}")
        collection = Collection(schema=schema)
        self.collections[collection.name] = collection
        return collection

    def put(self, collection: Collection, tenant: str, uuid: str, props: dict[str, Any], vector: Any) -> None:
        """Insert or replace one object (the batch semantics): DoubleError for what Weaviate refuses."""
        collection.check_tenant(tenant)
        stored = {name: check_value(collection, name, value) for name, value in props.items()}
        array = None if vector is None else np.asarray(vector, np.float32)
        if array is not None:
            held = collection.dims.setdefault(tenant, int(array.shape[0]))
            if held != array.shape[0]:
                raise DoubleError("invalid", f"new node has a vector with length {array.shape[0]}. "
                                             f"Existing nodes have vectors with length {held}")  # fmt: skip
        previous = collection.objects.get((tenant, uuid))
        now = self.tick()
        created = previous.created if previous is not None else now
        collection.objects[tenant, uuid] = Obj(uuid, {k: v for k, v in stored.items() if v is not None}, array,
                                               created, now)  # fmt: skip

    def patch(self, collection: Collection, tenant: str, uuid: str, props: dict[str, Any]) -> None:
        obj = collection.objects.get((tenant, uuid))
        if obj is None:
            raise DoubleError("not_found", f"object {uuid} not found")
        for name, value in props.items():
            obj.properties[name] = check_value(collection, name, value)
        obj.terms.clear()
        obj.updated = self.tick()


def bm25(collection: Collection, tenant: str, allowed: list[Obj], query: str, properties: list[str]
         ) -> list[tuple[Obj, float]]:  # fmt: skip
    """Weaviate's BM25F over ``properties`` (see the docstring of ``weaviate_double``): matches best first."""
    params = (collection.schema.get("invertedIndexConfig") or {}).get("bm25") or {}
    k1, b = float(params.get("k1", 1.2)), float(params.get("b", 0.75))
    everyone = collection.partition(tenant)
    names = properties or [p["name"] for p in collection.schema.get("properties") or [] if p.get("indexSearchable")]
    for name in names:
        prop = collection.prop(name)
        if not prop.get("indexSearchable", True) or prop["dataType"][0] not in ("text", "text[]"):
            raise DoubleError("invalid", f"property {name!r} is not searchable")
    terms = Counter(tokens(query, collection.prop(names[0]).get("tokenization", "word"))) if names else Counter()
    docs = {o.uuid: _terms(collection, o, names) for o in everyone}
    lengths = {uid: sum(c.values()) for uid, c in docs.items()}
    average = sum(lengths.values()) / len(lengths) if lengths else 0.0
    total = float(len(everyone))
    scores: dict[str, float] = {}
    allow = {o.uuid for o in allowed}
    for term, repeats in terms.items():
        holders = [uid for uid, c in docs.items() if c[term] > 0]
        idf = math.log(1 + (total - len(holders) + 0.5) / (len(holders) + 0.5)) * repeats
        for uid in holders:
            if uid in allow:
                freq = docs[uid][term]
                tf = freq / (freq + k1 * (1 - b + b * lengths[uid] / (average or 1.0)))
                scores[uid] = scores.get(uid, 0.0) + tf * idf
    by_uuid = {o.uuid: o for o in allowed}
    return sorted(((by_uuid[u], s) for u, s in scores.items()), key=lambda p: (-p[1], p[0].uuid))


def _terms(collection: Collection, obj: Obj, names: list[str]) -> Counter[str]:
    found: Counter[str] = Counter()
    for name in names:
        if name not in obj.terms:
            obj.terms[name] = Counter(tokens(_text(obj, name), collection.prop(name).get("tokenization", "word")))
        found.update(obj.terms[name])
    return found


def _text(obj: Obj, name: str) -> str:
    value = obj.properties.get(name)
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return "" if value is None else str(value)


def tokens(text: str, tokenization: str) -> list[str]:
    """Weaviate's tokenizations the double knows: whitespace, lowercase, word, field."""
    if tokenization == "field":
        return [text.strip()] if text.strip() else []
    if tokenization == "whitespace":
        return text.split()
    if tokenization == "lowercase":
        return text.lower().split()
    return [w for w in "".join(c.lower() if c.isalnum() else " " for c in text).split()]


def cosine_distance(stored: np.ndarray, query: np.ndarray) -> float:
    norm = float(np.linalg.norm(stored) * np.linalg.norm(query))
    return 1.0 - (float(stored.astype(np.float64) @ query.astype(np.float64)) / norm if norm > 0 else 0.0)


def like(pattern: str, value: str) -> bool:
    """Weaviate's Like: ``*`` any run of characters, ``?`` one character."""
    return fnmatch.fnmatchcase(value, pattern.replace("[", "[[]"))
