"""A loopback test double of Pinecone's data plane, for the official SDK to talk to unchanged.

``with PineconeDouble(dimension=8) as double: open_backend(double.storage_url())`` serves, on 127.0.0.1
only, the REST endpoints memkit's ``pinecone://`` adapter calls, with these semantics (a subset of
Pinecone's, written from its API reference; nothing here is Pinecone's code):

- ``POST /describe_index_stats``: dimension, metric ``cosine``, per-namespace vector counts.
- ``POST /vectors/upsert``: at most 1,000 vectors and 2,000,000 bytes a request (else 400 / 413); ids
  ASCII, no NUL, 1-512 characters; values of the index's dimension, finite and not all zero; metadata
  flat (strings, finite numbers, booleans, lists of strings), at most 40,960 bytes as JSON.
- ``GET /vectors/fetch``: at most 1,000 ids, a URL of at most 8,192 bytes (else 414).
- ``POST /vectors/fetch_by_metadata``: pages of at most ``limit`` (1-10,000) matches in id order, the
  next page's token the last id returned, so a page sequence is stable under concurrent writes.
- ``POST /query``: exact cosine similarity (not an ANN index: every row is scored), best first, ties by
  id; ``topK`` at most 10,000, and 1,000 with ``includeMetadata`` or ``includeValues``.
- ``POST /vectors/delete``: by ids (at most 1,000), by filter, or all; ``POST /vectors/update``: one id's
  values and / or metadata keys, or by filter the metadata keys of every match; ``dryRun`` counts only.
- Filters: ``$and``, ``$or``; per field ``$eq`` ``$ne`` ``$gt`` ``$gte`` ``$lt`` ``$lte`` ``$in`` ``$nin``
  ``$exists`` and a bare value for ``$eq``. On a list field ``$eq`` / ``$in`` match when any element does,
  ``$ne`` / ``$nin`` when none does; a missing field matches only ``$ne``, ``$nin`` and ``$exists: false``.
  A boolean never equals a number. An unknown operator or a range on a non-number is a 400.
- ``Api-Key`` must equal the double's key, else 401. Writes are visible to the next read at once (real
  Pinecone's are eventually consistent).

Faults for retry tests: ``fail_next(n, status, retry_after)`` answers the next ``n`` requests with that
status; ``drop_next(n)`` closes the next ``n`` connections without an answer; ``clear_faults()`` forgets the
rest. ``requests`` counts every request received.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final
from urllib.parse import parse_qs, quote, urlsplit

import numpy as np

__all__ = ["PineconeDouble", "pinecone_double"]

MAX_UPSERT_VECTORS: Final = 1_000
MAX_REQUEST_BYTES: Final = 2_000_000
MAX_METADATA_BYTES: Final = 40_960
MAX_URL: Final = 8_192


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same(a: Any, b: Any) -> bool:
    """Equality as Pinecone compares metadata: a boolean never equals a number."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def _field_matches(stored: Any, operator: str, operand: Any) -> bool:
    values = stored if isinstance(stored, list) else [] if stored is None else [stored]
    if operator == "$exists":
        return (stored is not None) == bool(operand)
    if operator in ("$eq", "$ne"):
        hit = any(_same(v, operand) for v in values)
        return hit if operator == "$eq" else not hit
    if operator in ("$in", "$nin"):
        if not isinstance(operand, list):
            raise _Refused(400, f"{operator} needs an array")
        hit = any(_same(v, o) for v in values for o in operand)
        return hit if operator == "$in" else not hit
    if operator in ("$gt", "$gte", "$lt", "$lte"):
        if not _number(operand):
            raise _Refused(400, f"{operator} needs a number, got {operand!r}")
        if not _number(stored):
            return False
        return bool({"$gt": stored > operand, "$gte": stored >= operand, "$lt": stored < operand,
                     "$lte": stored <= operand}[operator])  # fmt: skip
    raise _Refused(400, f"unknown filter operator {operator!r}")


def matches(metadata: Mapping[str, Any], where: Mapping[str, Any]) -> bool:
    """Whether a vector's metadata satisfies a Pinecone filter (every top-level condition)."""
    for key, condition in where.items():
        if key in ("$and", "$or"):
            if not isinstance(condition, list):
                raise _Refused(400, f"{key} needs an array of filters")
            results = [matches(metadata, part) for part in condition]
            if not (all(results) if key == "$and" else any(results)):
                return False
        elif key.startswith("$"):
            raise _Refused(400, f"unknown filter operator {key!r}")
        elif isinstance(condition, dict):
            if not all(_field_matches(metadata.get(key), op, operand) for op, operand in condition.items()):
                return False
        elif not _field_matches(metadata.get(key), "$eq", condition):
            return False
    return True


def _check_metadata(metadata: Any) -> None:
    if not isinstance(metadata, dict):
        raise _Refused(400, "metadata must be an object")
    for key, value in metadata.items():
        scalar = isinstance(value, str | bool) or (_number(value) and math.isfinite(value))
        strings = isinstance(value, list) and all(isinstance(v, str) for v in value)
        if not (scalar or strings):
            raise _Refused(400, f"metadata value of {key!r} must be a string, number, boolean or list of strings")
    size = len(json.dumps(metadata, separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_METADATA_BYTES:
        raise _Refused(400, f"Metadata size is {size} bytes, which exceeds the limit of {MAX_METADATA_BYTES} bytes")


def _check_id(vector_id: Any) -> str:
    if not (isinstance(vector_id, str) and 0 < len(vector_id) <= 512 and vector_id.isascii()
            and "\x00" not in vector_id):  # fmt: skip
        raise _Refused(400, f"invalid vector id {vector_id!r:.80}")
    return vector_id


class PineconeDouble:
    """The double's state and HTTP server; use as a context manager (or ``start`` / ``stop``)."""

    def __init__(self, *, dimension: int = 8, api_key: str = "double-api-key") -> None:
        self.dimension = dimension
        self.api_key = api_key
        self.namespaces: dict[str, dict[str, tuple[np.ndarray, dict[str, Any]]]] = {}
        self.requests = 0
        self._faults: list[tuple[str, int, float | None]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle and faults -------------------------------------------------------------------
    def start(self) -> PineconeDouble:
        double = self

        class Handler(_Handler):
            state = double

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="pinecone-double", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> PineconeDouble:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def host(self) -> str:
        if self._server is None:
            raise RuntimeError("the Pinecone double is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def storage_url(self, namespace: str = "memkit", **options: str) -> str:
        extra = "".join(f"&{k}={quote(v, safe='')}" for k, v in options.items())
        return f"pinecone://double?host={quote(self.host, safe='')}&api_key={self.api_key}&namespace={namespace}{extra}"

    def fail_next(self, n: int, status: int = 429, retry_after: float | None = None) -> None:
        with self._lock:
            self._faults += [("status", status, retry_after)] * n

    def drop_next(self, n: int) -> None:
        with self._lock:
            self._faults += [("drop", 0, None)] * n

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def take_fault(self) -> tuple[str, int, float | None] | None:
        with self._lock:
            self.requests += 1
            return self._faults.pop(0) if self._faults else None

    # -- the API ----------------------------------------------------------------------------------
    def handle(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> Any:
        with self._lock:
            route = {
                ("POST", "/describe_index_stats"): self._stats, ("POST", "/vectors/upsert"): self._upsert,
                ("GET", "/vectors/fetch"): self._fetch, ("POST", "/vectors/fetch_by_metadata"): self._fetch_matching,
                ("POST", "/query"): self._query, ("POST", "/vectors/delete"): self._delete,
                ("POST", "/vectors/update"): self._update,
            }.get((method, path))  # fmt: skip
            if route is None:
                raise _Refused(404, f"no route {method} {path}")
            return route(query if method == "GET" else body)

    def _space(self, request: Mapping[str, Any] | dict[str, list[str]]) -> dict[str, tuple[np.ndarray, dict[str, Any]]]:
        name = request.get("namespace", "")
        name = name[0] if isinstance(name, list) else name
        return self.namespaces.setdefault(str(name or "__default__"), {})

    def _stats(self, body: Any) -> Any:
        spaces = {name: {"vectorCount": len(rows)} for name, rows in self.namespaces.items() if rows}
        return {"namespaces": spaces, "dimension": self.dimension, "indexFullness": 0.0, "metric": "cosine",
                "totalVectorCount": sum(s["vectorCount"] for s in spaces.values()), "vectorType": "dense"}  # fmt: skip

    def _values(self, values: Any) -> np.ndarray:
        array = np.asarray(values, dtype=np.float32)
        if array.shape != (self.dimension,) or not np.isfinite(array).all():
            raise _Refused(400, f"Vector dimension {array.size} does not match the dimension of the index "
                                f"{self.dimension}, or is not finite")  # fmt: skip
        if not array.any():
            raise _Refused(400, "Dense vectors must contain at least one non-zero value")
        return array

    def _upsert(self, body: Any) -> Any:
        vectors = body.get("vectors") or []
        if len(vectors) > MAX_UPSERT_VECTORS:
            raise _Refused(400, f"upsert of {len(vectors)} vectors exceeds the limit of {MAX_UPSERT_VECTORS}")
        rows = {}
        for vector in vectors:
            metadata = vector.get("metadata") or {}
            _check_metadata(metadata)
            rows[_check_id(vector.get("id"))] = (self._values(vector.get("values")), dict(metadata))
        self._space(body).update(rows)
        return {"upsertedCount": len(vectors)}

    @staticmethod
    def _wire(vector_id: str, row: tuple[np.ndarray, dict[str, Any]], values: bool = True) -> dict[str, Any]:
        found: dict[str, Any] = {"id": vector_id, "metadata": row[1]}
        if values:
            found["values"] = row[0].tolist()
        return found

    def _fetch(self, query: dict[str, list[str]]) -> Any:
        ids = query.get("ids", [])
        if not ids or len(ids) > 1_000:
            raise _Refused(400, "fetch takes 1 to 1,000 ids")
        space = self._space(query)
        return {"vectors": {i: self._wire(i, space[i]) for i in ids if i in space}, "namespace": "",
                "usage": {"readUnits": 1}}  # fmt: skip

    def _matching(self, body: Any) -> list[str]:
        space, where = self._space(body), body.get("filter") or {}
        return sorted(i for i, (_, metadata) in space.items() if matches(metadata, where))

    def _fetch_matching(self, body: Any) -> Any:
        limit = body.get("limit", 100)
        if not (isinstance(limit, int) and 1 <= limit <= 10_000) or not body.get("filter"):
            raise _Refused(400, "fetch_by_metadata needs a filter and a limit of 1 to 10,000")
        token = body.get("paginationToken")
        ids = [i for i in self._matching(body) if token is None or i > token]
        page, space = ids[:limit], self._space(body)
        pagination = {"next": page[-1]} if len(ids) > limit else None
        return {"vectors": {i: self._wire(i, space[i]) for i in page}, "namespace": "", "pagination": pagination}

    def _query(self, body: Any) -> Any:
        top_k, with_metadata, with_values = body.get("topK"), body.get("includeMetadata"), body.get("includeValues")
        ceiling = 1_000 if with_metadata or with_values else 10_000
        if not (isinstance(top_k, int) and 1 <= top_k <= ceiling):
            raise _Refused(400, f"topK must be 1 to {ceiling}, got {top_k!r}")
        vector = self._values(body.get("vector"))
        space, ids = self._space(body), self._matching(body)
        if not ids:
            return {"matches": [], "namespace": ""}
        stored = np.stack([space[i][0] for i in ids]).astype(np.float64)
        query = vector.astype(np.float64)
        scores = (stored @ query) / (np.linalg.norm(stored, axis=1) * np.linalg.norm(query))
        order = sorted(range(len(ids)), key=lambda at: (-scores[at], ids[at]))[:top_k]
        found = []
        for at in order:
            match: dict[str, Any] = {"id": ids[at], "score": float(scores[at])}
            if with_metadata:
                match["metadata"] = space[ids[at]][1]
            if with_values:
                match["values"] = space[ids[at]][0].tolist()
            found.append(match)
        return {"matches": found, "namespace": "", "usage": {"readUnits": 5}}

    def _delete(self, body: Any) -> Any:
        space = self._space(body)
        if body.get("deleteAll"):
            space.clear()
        elif body.get("filter"):
            for vector_id in self._matching(body):
                del space[vector_id]
        else:
            ids = body.get("ids") or []
            if len(ids) > 1_000:
                raise _Refused(400, "delete takes at most 1,000 ids")
            for vector_id in ids:
                space.pop(vector_id, None)
        return {}

    def _update(self, body: Any) -> Any:
        space, patch = self._space(body), body.get("setMetadata") or {}
        if body.get("filter"):
            ids = self._matching(body)
            if not body.get("dryRun"):
                for vector_id in ids:
                    _check_metadata({**space[vector_id][1], **patch})
                    space[vector_id][1].update(patch)
            return {"matchedRecords": len(ids)}
        vector_id = _check_id(body.get("id"))
        if vector_id in space:
            values = space[vector_id][0] if body.get("values") is None else self._values(body["values"])
            _check_metadata({**space[vector_id][1], **patch})
            space[vector_id] = (values, {**space[vector_id][1], **patch})
        return {}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the SDK's connection pool expects
    disable_nagle_algorithm = True  # headers and body are two writes: with Nagle each answer waited 40 ms
    state: PineconeDouble

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        fault = self.state.take_fault()
        if fault is not None and fault[0] == "drop":
            self.close_connection = True  # no answer at all: the client sees the connection end
            return
        if fault is not None:
            _, status, retry_after = fault
            headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
            return self._answer(status, {"error": {"code": status, "message": "injected by the double"}}, headers)
        try:
            self._answer(200, self._route(method, raw))
        except _Refused as refused:
            self._answer(refused.status, {"code": 3, "message": str(refused), "details": []})

    def _route(self, method: str, raw: bytes) -> Any:
        if self.headers.get("Api-Key") != self.state.api_key:
            raise _Refused(401, "Invalid API Key")
        if len(self.path) > MAX_URL:
            raise _Refused(414, "request URI too long")
        if len(raw) > MAX_REQUEST_BYTES:
            raise _Refused(413, f"request of {len(raw)} bytes exceeds the limit of {MAX_REQUEST_BYTES} bytes")
        try:
            body = json.loads(raw) if raw else {}
        except ValueError as exc:
            raise _Refused(400, f"malformed JSON: {exc}") from None
        parts = urlsplit(self.path)
        return self.state.handle(method, parts.path, parse_qs(parts.query), body)

    def _answer(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def pinecone_double(dimension: int = 8) -> Iterator[PineconeDouble]:
    """A started double for the ``with`` block."""
    with PineconeDouble(dimension=dimension) as double:
        yield double
