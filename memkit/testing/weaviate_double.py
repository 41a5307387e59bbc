"""``WeaviateDouble``: a loopback test double of Weaviate's API, for testing ``weaviate://`` without a server.

It is a double, not Weaviate: it serves, on 127.0.0.1, what the official ``weaviate-client`` v4 async
client needs for memkit's calls, over the real protocols, so the client talks to it unchanged:

- REST over HTTP/1.1 (``/v1/...``): ``meta``, ``.well-known/ready`` and ``live``, the schema (list, get,
  create, update, delete collections), tenants (list, create, delete), and objects (``PATCH`` of
  properties, ``GET``, ``HEAD``, ``DELETE``);
- gRPC, from the protocol modules the client ships (``weaviate.proto.v1``): ``Search``, ``BatchObjects``,
  ``BatchDelete``, ``Aggregate`` (an object count), ``TenantsGet`` and the health check.

Semantics implemented (and only these):

- collections with explicit schemas: no auto-schema (a property not in the schema, or of the wrong type,
  fails that object of a batch with Weaviate's message); class names are matched case-insensitively and
  capitalised; creating an existing one is a 422;
- objects keyed by UUID per tenant; a batch write replaces the whole object and reports errors per object
  (by index); a vector of another length than the collection's fails its object;
- multi-tenancy: a collection with ``multiTenancyConfig.enabled`` needs a tenant on every request and keeps
  each tenant's objects apart; one without refuses a tenant;
- filters: AND, OR, NOT; Equal, NotEqual, GreaterThan(Equal), LessThan(Equal) on numbers and ints; Equal,
  NotEqual, Like on text (compared by the property's tokenization: ``field`` compares the whole value with
  whitespace trimmed, as Weaviate does); ContainsAny / ContainsAll / ContainsNone on arrays and scalars;
  IsNull; by ``_id``; a filter on a property with ``indexFilterable: false`` is refused;
- vector search (``nearVector``): exact cosine distance ``1 - cos(a, b)`` over every object the filter
  admits (as Weaviate's ``flat`` index, or HNSW under its ``flatSearchCutoff``), nearest first, ties by
  UUID; objects without a vector are not in it;
- BM25 (``bm25``) over the named searchable properties, Weaviate's formula: a query term's idf is
  ``ln(1 + (N - n + 0.5) / (n + 0.5))`` times how often the query repeats the term, with ``N`` the objects
  of the collection (tenant) and ``n`` those holding the term (whatever the filter); its weight in an
  object is ``tf / (tf + k1 * (1 - b + b * len / avglen))`` (no ``k1 + 1`` factor, as Weaviate), summed
  over terms; ``k1`` and ``b`` from the schema (1.2, 0.75). Filters restrict which objects are returned,
  not the statistics. Tokenizations: whitespace, lowercase, word, field. Stop words are not removed;
- fetch with ``sort`` (by one or more properties) and ``limit`` / ``offset`` within
  ``QUERY_MAXIMUM_RESULTS`` (10,000);
- consistency: every write is visible to the next read (one node).

Not implemented: hybrid search, named vectors, references, generative or rerank modules, ``after``
cursors, aggregations other than a count, OIDC, replication. Faults for tests: ``fail_next`` (HTTP 429 /
503 on REST, gRPC ``RESOURCE_EXHAUSTED`` / ``UNAVAILABLE``), ``drop_next`` (REST connections closed
unanswered), ``refuse`` (one object of a batch fails), ``grpc_down`` / ``grpc_up`` (the gRPC listener
gone: connections dropped and refused).
"""

from __future__ import annotations

import json
import socket
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final
from urllib.parse import unquote, urlsplit

import grpc

from memkit.testing.weaviate_double_grpc import Servicer, add_health
from memkit.testing.weaviate_double_schema import full_schema
from memkit.testing.weaviate_double_store import DoubleError, Store

__all__ = ["VERSION", "WeaviateDouble"]

VERSION: Final = "1.33.0"
MAX_MESSAGE: Final = 10 * 1024 * 1024
_HTTP: Final = {"not_found": 404, "invalid": 422, "exists": 422}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class WeaviateDouble:
    """A loopback Weaviate double: ``with WeaviateDouble() as double: double.storage_url()``."""

    def __init__(self, api_key: str | None = None) -> None:
        self.api_key = api_key
        self.store = Store()
        self.requests = 0
        """REST and gRPC requests answered (health checks and readiness included)."""
        self._faults: list[int] = []
        self.refusals: dict[str, str] = {}
        """Object UUID -> the message its next batch write fails with (``refuse``)."""
        self._drops = 0
        self._fault_lock = threading.Lock()
        self._http: ThreadingHTTPServer | None = None
        self._grpc: Any = None
        self.http_port = 0
        self.grpc_port = _free_port()

    # -- lifecycle ------------------------------------------------------------------------------
    def __enter__(self) -> WeaviateDouble:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        handler = type("Handler", (_Handler,), {"double": self})
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._http.daemon_threads = True
        self.http_port = int(self._http.server_address[1])
        threading.Thread(target=self._http.serve_forever, name="weaviate-double-http", daemon=True).start()
        self.grpc_up()

    def stop(self) -> None:
        self.grpc_down()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None

    def grpc_up(self) -> None:
        """(Re)start the gRPC listener on its port."""
        if self._grpc is not None:
            return
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE), ("grpc.max_send_message_length", MAX_MESSAGE),
            ("grpc.so_reuseport", 0)])  # fmt: skip
        from weaviate.proto.v1 import weaviate_pb2_grpc

        weaviate_pb2_grpc.add_WeaviateServicer_to_server(Servicer(self), server)  # type: ignore[no-untyped-call]
        add_health(server)
        server.add_insecure_port(f"127.0.0.1:{self.grpc_port}")
        server.start()
        self._grpc = server

    def grpc_down(self) -> None:
        """Stop the gRPC listener: open connections drop, new ones are refused until ``grpc_up``."""
        server, self._grpc = self._grpc, None
        if server is not None:
            server.stop(grace=None).wait()

    def storage_url(self, **options: str) -> str:
        """The ``weaviate://`` URL of this double (gRPC port, API key and ``options`` as URL options)."""
        query = {"grpc_port": str(self.grpc_port), **({"api_key": self.api_key} if self.api_key else {}), **options}
        return f"weaviate://127.0.0.1:{self.http_port}?" + "&".join(f"{k}={v}" for k, v in query.items())

    # -- faults ---------------------------------------------------------------------------------
    def fail_next(self, count: int, status: int = 503) -> None:
        """The next ``count`` requests fail: REST with ``status``, gRPC with its code (429: RESOURCE_EXHAUSTED,
        anything else: UNAVAILABLE)."""
        with self._fault_lock:
            self._faults += [status] * count

    def refuse(self, uuid: str, message: str) -> None:
        """The next batch write of the object ``uuid`` fails with ``message`` (an error for that object alone,
        as Weaviate reports one per object); the batch's other objects are written."""
        with self._fault_lock:
            self.refusals[uuid.lower()] = message

    def drop_next(self, count: int) -> None:
        """The next ``count`` REST requests have their connection closed without an answer."""
        with self._fault_lock:
            self._drops += count

    def clear_faults(self) -> None:
        with self._fault_lock:
            self._faults, self._drops = [], 0

    def gate(self, headers: dict[str, str], *, rest: bool, auth: bool = True) -> tuple[Any, str] | None:
        """Count a request; (status, message) when it must fail (a fault, a missing or wrong API key)."""
        with self._fault_lock:
            self.requests += 1
            if rest and self._drops:
                self._drops -= 1
                return ("drop", "")
            fault = self._faults.pop(0) if self._faults else None
        if fault is not None:
            if rest:
                return (fault, "injected fault")
            code = grpc.StatusCode.RESOURCE_EXHAUSTED if fault == 429 else grpc.StatusCode.UNAVAILABLE
            return (code, f"injected fault ({fault})")
        if self.api_key is not None and auth:
            given = {k.lower(): v for k, v in headers.items()}.get("authorization", "")
            if given != f"Bearer {self.api_key}":
                return (401, "anonymous access not enabled") if rest else (grpc.StatusCode.UNAUTHENTICATED,
                                                                           "invalid api key")  # fmt: skip
        return None


class _Handler(BaseHTTPRequestHandler):
    double: WeaviateDouble
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def _send(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"null") if length else None

    def _handle(self, method: str) -> None:
        body = self._body()
        path = [unquote(p) for p in urlsplit(self.path).path.strip("/").split("/")]
        open_path = path[:2] == ["v1", ".well-known"]  # readiness and liveness need no key, as on Weaviate
        verdict = self.double.gate(dict(self.headers.items()), rest=True, auth=not open_path)
        if verdict is not None:
            status, message = verdict
            if status == "drop":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            retry = {"Retry-After": "0"} if status == 429 else {}
            self._send(int(status), {"error": [{"message": message}]}, retry)
            return
        try:
            with self.double.store.lock:
                status, answer = _route(self.double.store, method, path, body)
        except DoubleError as exc:
            status, answer = _HTTP[exc.kind], {"error": [{"message": str(exc)}]}
        self._send(status, answer)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")


def _route(store: Store, method: str, path: list[str], body: Any) -> tuple[int, Any]:
    """One REST request: (status, JSON answer or None)."""
    if path[:1] != ["v1"]:
        return 404, None
    rest = path[1:]
    if rest == ["meta"] and method == "GET":
        return 200, {"hostname": "http://127.0.0.1", "version": VERSION, "modules": {},
                     "grpcMaxMessageSize": MAX_MESSAGE}  # fmt: skip
    if rest[:1] == [".well-known"]:
        return (200, None) if rest[1:] in (["ready"], ["live"]) else (404, None)
    if rest[:1] == ["schema"]:
        return _schema(store, method, rest[1:], body)
    if rest[:1] == ["objects"] and len(rest) == 3:
        return _object(store, method, rest[1], rest[2], body)
    return 404, None


def _schema(store: Store, method: str, rest: list[str], body: Any) -> tuple[int, Any]:
    if not rest:
        if method == "GET":
            return 200, {"classes": [c.schema for c in store.collections.values()]}
        if method == "POST":
            return 200, store.create(full_schema(body or {})).schema
        return 405, None
    collection = store.find(rest[0])
    if len(rest) == 1:
        if method == "GET":
            return 200, collection.schema
        if method == "DELETE":
            del store.collections[collection.name]
            return 200, None
        if method == "PUT":
            collection.schema["description"] = (body or {}).get("description", collection.schema.get("description"))
            return 200, collection.schema
    if rest[1:] == ["tenants"]:
        return _tenants(collection, method, body)
    return 405, None


def _tenants(collection: Any, method: str, body: Any) -> tuple[int, Any]:
    if not collection.multi_tenant and method != "GET":
        raise DoubleError("invalid", f"multi-tenancy is not enabled for class {collection.name!r}")
    if method == "GET":
        return 200, [{"name": n, "activityStatus": s} for n, s in sorted(collection.tenants.items())]
    if method == "POST":
        for tenant in body or []:
            collection.tenants.setdefault(str(tenant["name"]), str(tenant.get("activityStatus") or "HOT"))
        return 200, body
    if method == "DELETE":
        for name in body or []:
            collection.tenants.pop(str(name), None)
            for key in [k for k in collection.objects if k[0] == name]:
                del collection.objects[key]
        return 200, None
    return 405, None


def _object(store: Store, method: str, name: str, uuid: str, body: Any) -> tuple[int, Any]:
    collection = store.find(name)
    tenant = str((body or {}).get("tenant") or "")
    uuid = uuid.lower()
    if method == "PATCH":
        store.patch(collection, tenant, uuid, dict((body or {}).get("properties") or {}))
        return 204, None
    obj = collection.objects.get((tenant, uuid))
    if obj is None:
        return 404, None
    if method == "DELETE":
        del collection.objects[tenant, uuid]
        return 204, None
    if method in ("GET", "HEAD"):
        return 200, {"class": collection.name, "id": obj.uuid, "properties": obj.properties}
    return 405, None
