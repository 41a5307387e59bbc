"""The gRPC face of ``WeaviateDouble``: Search, BatchObjects, BatchDelete, Aggregate (a count), TenantsGet and
the health check, served with grpcio from the protocol modules the official client ships
(``weaviate.proto.v1``), so the client talks to it unchanged."""

from __future__ import annotations

import time
import uuid as uuid_lib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import grpc
import numpy as np
from google.protobuf import json_format
from weaviate.proto.v1 import (
    aggregate_pb2,
    base_pb2,
    batch_delete_pb2,
    batch_pb2,
    health_weaviate_pb2,
    properties_pb2,
    search_get_pb2,
    tenants_pb2,
    weaviate_pb2_grpc,
)

from memkit.testing.weaviate_double_store import (
    Collection,
    DoubleError,
    Obj,
    Store,
    bm25,
    check_value,
    cosine_distance,
    like,
    tokens,
)

if TYPE_CHECKING:
    from memkit.testing.weaviate_double import WeaviateDouble

__all__ = ["QUERY_MAXIMUM_RESULTS", "Servicer", "add_health", "compile_filter", "matches"]

QUERY_MAXIMUM_RESULTS: Final = 10_000
QUERY_DEFAULT_LIMIT: Final = 10
F = base_pb2.Filters
_STATUS: Final = {"not_found": grpc.StatusCode.NOT_FOUND, "invalid": grpc.StatusCode.INVALID_ARGUMENT,
                  "exists": grpc.StatusCode.ALREADY_EXISTS}  # fmt: skip


# -- filters ------------------------------------------------------------------------------------
def _filter_value(f: Any) -> Any:
    which = f.WhichOneof("test_value")
    if which is None:
        return None
    value = getattr(f, which)
    return list(value.values) if which.endswith("_array") else value


def _target(f: Any) -> str:
    if f.HasField("target"):
        if f.target.WhichOneof("target") != "property":
            raise DoubleError("invalid", "the double filters on properties and _id only, not on references")
        return str(f.target.property)
    if len(f.on) != 1:
        raise DoubleError("invalid", "a filter needs a target")
    return str(f.on[0])


def matches(obj: Obj, f: Any, collection: Collection) -> bool:
    """Whether ``obj`` passes the proto filter ``f`` (Weaviate's semantics for the forms the double knows)."""
    return compile_filter(f, collection)(obj)


def compile_filter(f: Any, collection: Collection) -> Callable[[Obj], bool]:
    """The proto filter ``f`` as a predicate, checked and normalised once for a whole request."""
    op = f.operator
    if op in (F.OPERATOR_AND, F.OPERATOR_OR, F.OPERATOR_NOT):
        parts = [compile_filter(part, collection) for part in f.filters]
        if op == F.OPERATOR_AND:
            return lambda obj: all(part(obj) for part in parts)
        if op == F.OPERATOR_OR:
            return lambda obj: any(part(obj) for part in parts)
        return lambda obj: not all(part(obj) for part in parts)
    name, wanted = _target(f), _filter_value(f)
    if name == "_id":
        kind, tokenization = "uuid", "field"
        wanted = [str(w).lower() for w in wanted] if isinstance(wanted, list) else str(wanted).lower()
    else:
        prop = collection.prop(name)
        if not prop.get("indexFilterable", True):
            raise DoubleError("invalid", f"property {name!r} is not filterable (indexFilterable is false)")
        kind, tokenization = prop["dataType"][0], prop.get("tokenization", "word")
    if op == F.OPERATOR_IS_NULL:
        return lambda obj: (_held(obj, name) in (None, [])) == bool(wanted)
    normal = _normal(wanted, kind, tokenization)
    asked = normal if isinstance(normal, list) else [normal]
    exact = all(not isinstance(w, tuple) or len(w) <= 1 for w in asked)
    if op in (F.OPERATOR_CONTAINS_ANY, F.OPERATOR_EQUAL) and exact and (isinstance(normal, list)) == (
            op == F.OPERATOR_CONTAINS_ANY):  # fmt: skip
        members = set(asked)  # membership: what a UUID list or a digest list asks, in O(1) per value

        def member(obj: Obj) -> bool:
            have = _held(obj, name)
            if have is None:
                return False
            held = _normal(have, kind, tokenization)
            return any(h in members for h in (held if isinstance(held, list) else [held]))

        return member

    def general(obj: Obj) -> bool:
        have = _held(obj, name)
        return have is not None and _compare(op, _normal(have, kind, tokenization), normal, kind)

    return general


def _held(obj: Obj, name: str) -> Any:
    return obj.uuid if name == "_id" else obj.properties.get(name)


def _normal(value: Any, kind: str, tokenization: str) -> Any:
    """Values as compared: text by its tokens (field tokenization: trimmed whole), numbers as floats."""
    if isinstance(value, list):
        return [_normal(v, kind[:-2] if kind.endswith("[]") else kind, tokenization) for v in value]
    if kind.startswith("text") and isinstance(value, str):
        return tuple(tokens(value, tokenization))
    if kind.startswith(("number", "int")) and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return value


def _compare(op: int, have: Any, wanted: Any, kind: str) -> bool:
    held = have if isinstance(have, list) else [have]
    if op in (F.OPERATOR_CONTAINS_ANY, F.OPERATOR_CONTAINS_ALL, F.OPERATOR_CONTAINS_NONE):
        asked = wanted if isinstance(wanted, list) else [wanted]
        found = [any(_equal(h, w) for h in held) for w in asked]
        return (
            any(found)
            if op == F.OPERATOR_CONTAINS_ANY
            else all(found)
            if op == F.OPERATOR_CONTAINS_ALL
            else not any(found)
        )
    if isinstance(wanted, list):
        raise DoubleError("invalid", "a list value needs ContainsAny, ContainsAll or ContainsNone")
    if op == F.OPERATOR_EQUAL:
        return any(_equal(h, wanted) for h in held)
    if op == F.OPERATOR_NOT_EQUAL:
        return not any(_equal(h, wanted) for h in held)
    if op == F.OPERATOR_LIKE:
        return any(like(" ".join(wanted), " ".join(h)) for h in held if isinstance(h, tuple))
    if kind.startswith(("text", "boolean", "uuid")):
        raise DoubleError("invalid", f"operator {F.Operator.Name(op)} is not supported on {kind}")
    order: dict[int, Callable[[float, float], bool]] = {
        F.OPERATOR_GREATER_THAN: lambda a, b: a > b,
        F.OPERATOR_GREATER_THAN_EQUAL: lambda a, b: a >= b,
        F.OPERATOR_LESS_THAN: lambda a, b: a < b,
        F.OPERATOR_LESS_THAN_EQUAL: lambda a, b: a <= b,
    }
    if op not in order:
        raise DoubleError("invalid", f"operator {F.Operator.Name(op)} is not supported by the double")
    return any(order[op](h, float(wanted)) for h in held)


def _equal(have: Any, wanted: Any) -> bool:
    if isinstance(have, tuple) and isinstance(wanted, tuple):  # text: every wanted token present
        return bool(wanted) and (have == wanted if len(have) <= 1 else all(w in have for w in wanted))
    return bool(have == wanted)


# -- values out -----------------------------------------------------------------------------------
def _value(kind: str, value: Any) -> Any:
    if kind == "text[]":
        return properties_pb2.Value(list_value=properties_pb2.ListValue(
            text_values=properties_pb2.TextValues(values=list(value))))  # fmt: skip
    if kind == "int":
        return properties_pb2.Value(int_value=int(value))
    if kind == "number":
        return properties_pb2.Value(number_value=float(value))
    if kind == "boolean":
        return properties_pb2.Value(bool_value=bool(value))
    if kind == "uuid":
        return properties_pb2.Value(uuid_value=str(value))
    if kind.endswith("[]"):
        raise DoubleError("invalid", f"the double does not return {kind} properties")
    return properties_pb2.Value(text_value=str(value))


def _result(collection: Collection, obj: Obj, request: Any, *, distance: float | None, score: float | None) -> Any:
    wanted = request.properties
    names = [p["name"] for p in collection.schema.get("properties") or []]
    if request.HasField("properties") and not wanted.return_all_nonref_properties:
        names = list(wanted.non_ref_properties)
    fields = {n: _value(collection.type_of(n), obj.properties[n]) for n in names if n in obj.properties}
    meta = search_get_pb2.MetadataResult(id=obj.uuid, id_as_bytes=uuid_lib.UUID(obj.uuid).bytes)
    if request.metadata.distance and distance is not None:
        meta.distance, meta.distance_present = distance, True
    if request.metadata.score and score is not None:
        meta.score, meta.score_present = score, True
    if (request.metadata.vector or len(request.metadata.vectors)) and obj.vector is not None:
        meta.vector_bytes = obj.vector.astype("<f4").tobytes()
    props = search_get_pb2.PropertiesResult(non_ref_props=properties_pb2.Properties(fields=fields),
                                            target_collection=collection.name)  # fmt: skip
    return search_get_pb2.SearchResult(properties=props, metadata=meta)


def _vector_in(near: Any) -> np.ndarray:
    if len(near.vector_bytes):
        return np.frombuffer(near.vector_bytes, "<f4")
    if len(getattr(near, "vectors", ())):
        return np.frombuffer(near.vectors[0].vector_bytes, "<f4")
    if len(near.vector):
        return np.asarray(list(near.vector), np.float32)
    raise DoubleError("invalid", "nearVector: no vector given")


def _sorted(objects: list[Obj], sort_by: Any) -> list[Obj]:
    ordered = list(objects)
    for rule in reversed(list(sort_by)):
        name = rule.path[0]
        present = [o for o in ordered if o.properties.get(name) is not None]
        absent = [o for o in ordered if o.properties.get(name) is None]
        present.sort(key=lambda o: o.properties[name], reverse=not rule.ascending)
        ordered = absent + present if rule.ascending else present + absent
    return ordered


class Servicer(weaviate_pb2_grpc.WeaviateServicer):
    """What the client's async collection calls need, over the double's ``Store``."""

    def __init__(self, double: WeaviateDouble) -> None:
        self.double = double
        self.store: Store = double.store

    def _run(self, context: Any, work: Callable[[], Any]) -> Any:
        status = self.double.gate(dict(context.invocation_metadata()), rest=False)
        if status is not None:
            code, message = status
            context.abort(code, message)
        try:
            with self.store.lock:
                return work()
        except DoubleError as exc:
            context.abort(_STATUS[exc.kind], str(exc))

    def Search(self, request: Any, context: Any) -> Any:
        return self._run(context, lambda: self._search(request))

    def _search(self, request: Any) -> Any:
        started = time.perf_counter()
        collection = self.store.find(request.collection)
        objects = collection.partition(request.tenant)
        if request.HasField("filters"):
            admit = compile_filter(request.filters, collection)
            objects = [o for o in objects if admit(o)]
        limit = request.limit or QUERY_DEFAULT_LIMIT
        if request.offset + limit > QUERY_MAXIMUM_RESULTS:
            raise DoubleError("invalid", f"query maximum results exceeded: offset + limit > {QUERY_MAXIMUM_RESULTS}")
        ranked: list[tuple[Obj, float | None, float | None]]
        if request.HasField("near_vector"):
            query = _vector_in(request.near_vector)
            dims = {o.vector.shape[0] for o in objects if o.vector is not None}
            if dims and dims != {query.shape[0]}:
                raise DoubleError("invalid", f"vector search: query vector of length {query.shape[0]}, "
                                             f"objects hold {sorted(dims)}")  # fmt: skip
            found = [(o, cosine_distance(o.vector, query)) for o in objects if o.vector is not None]
            found.sort(key=lambda p: (p[1], p[0].uuid))
            ranked = [(o, d, None) for o, d in found]
        elif request.HasField("bm25_search"):
            search = request.bm25_search
            scored = bm25(collection, request.tenant, objects, search.query, list(search.properties))
            ranked = [(o, None, s) for o, s in scored]
        else:
            ranked = [(o, None, None) for o in _sorted(objects, request.sort_by)]
        page = ranked[request.offset : request.offset + limit]
        results = [_result(collection, o, request, distance=d, score=s) for o, d, s in page]
        return search_get_pb2.SearchReply(took=time.perf_counter() - started, results=results)

    def BatchObjects(self, request: Any, context: Any) -> Any:
        return self._run(context, lambda: self._batch(request))

    def _batch(self, request: Any) -> Any:
        errors = []
        for at, obj in enumerate(request.objects):
            try:
                collection = self.store.find(obj.collection)
                props = _batch_properties(obj.properties)
                vector = None
                if len(obj.vector_bytes):
                    vector = np.frombuffer(obj.vector_bytes, "<f4")
                elif len(obj.vectors):
                    vector = np.frombuffer(obj.vectors[0].vector_bytes, "<f4")
                elif len(obj.vector):
                    vector = np.asarray(list(obj.vector), np.float32)
                uid = str(uuid_lib.UUID(obj.uuid))
                refusal = self.double.refusals.pop(uid, None)
                if refusal is not None:
                    raise DoubleError("invalid", refusal)
                self.store.put(collection, obj.tenant, uid, props, vector)
            except (DoubleError, ValueError) as exc:
                errors.append(batch_pb2.BatchObjectsReply.BatchError(index=at, error=str(exc)))
        return batch_pb2.BatchObjectsReply(took=0.001, errors=errors)

    def BatchDelete(self, request: Any, context: Any) -> Any:
        return self._run(context, lambda: self._delete(request))

    def _delete(self, request: Any) -> Any:
        collection = self.store.find(request.collection)
        admit = compile_filter(request.filters, collection)
        doomed = [o for o in collection.partition(request.tenant) if admit(o)]
        if not request.dry_run:
            for obj in doomed:
                del collection.objects[request.tenant, obj.uuid]
        objects = [batch_delete_pb2.BatchDeleteObject(uuid=uuid_lib.UUID(o.uuid).bytes, successful=True)
                   for o in doomed] if request.verbose else []  # fmt: skip
        return batch_delete_pb2.BatchDeleteReply(took=0.001, failed=0, matches=len(doomed),
                                                 successful=len(doomed), objects=objects)  # fmt: skip

    def Aggregate(self, request: Any, context: Any) -> Any:
        return self._run(context, lambda: self._aggregate(request))

    def _aggregate(self, request: Any) -> Any:
        if len(request.aggregations) or request.HasField("group_by"):
            raise DoubleError("invalid", "the double aggregates a count only")
        collection = self.store.find(request.collection)
        objects = collection.partition(request.tenant)
        if request.HasField("filters"):
            admit = compile_filter(request.filters, collection)
            objects = [o for o in objects if admit(o)]
        single = aggregate_pb2.AggregateReply.Single(objects_count=len(objects))
        return aggregate_pb2.AggregateReply(took=0.001, single_result=single)

    def TenantsGet(self, request: Any, context: Any) -> Any:
        return self._run(context, lambda: self._tenants(request))

    def _tenants(self, request: Any) -> Any:
        collection = self.store.find(request.collection)
        names = set(request.names.values) if request.HasField("names") else set(collection.tenants)
        status = {"HOT": tenants_pb2.TENANT_ACTIVITY_STATUS_HOT, "COLD": tenants_pb2.TENANT_ACTIVITY_STATUS_COLD}
        found = [tenants_pb2.Tenant(name=n, activity_status=status.get(s, tenants_pb2.TENANT_ACTIVITY_STATUS_HOT))
                 for n, s in sorted(collection.tenants.items()) if n in names]  # fmt: skip
        return tenants_pb2.TenantsGetReply(took=0.001, tenants=found)


def _batch_properties(props: Any) -> dict[str, Any]:
    found: dict[str, Any] = json_format.MessageToDict(props.non_ref_properties)
    for array in props.text_array_properties:
        found[array.prop_name] = list(array.values)
    for array in props.int_array_properties:
        found[array.prop_name] = list(array.values)
    for array in props.boolean_array_properties:
        found[array.prop_name] = list(array.values)
    for array in props.number_array_properties:
        found[array.prop_name] = list(np.frombuffer(array.values_bytes, "<f8")) if array.values_bytes else list(
            array.values)  # fmt: skip
    for name in props.empty_list_props:
        found[name] = []
    if len(props.object_properties) or len(props.object_array_properties):
        raise DoubleError("invalid", "the double stores no object properties")
    return found


class _Health(grpc.GenericRpcHandler):  # type: ignore[misc]
    """``/grpc.health.v1.Health/Check`` answered with Weaviate's own health messages (the client's ping)."""

    def service(self, details: Any) -> Any:
        if details.method != "/grpc.health.v1.Health/Check":
            return None
        serving = health_weaviate_pb2.WeaviateHealthCheckResponse.SERVING
        return grpc.unary_unary_rpc_method_handler(
            lambda request, context: health_weaviate_pb2.WeaviateHealthCheckResponse(status=serving),
            request_deserializer=health_weaviate_pb2.WeaviateHealthCheckRequest.FromString,
            response_serializer=health_weaviate_pb2.WeaviateHealthCheckResponse.SerializeToString,
        )


def add_health(server: Any) -> None:
    server.add_generic_rpc_handlers((_Health(),))


_ = check_value  # re-exported for the REST face's PATCH
