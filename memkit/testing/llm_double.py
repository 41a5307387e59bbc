"""``LLMDouble``: a test double of the hosted APIs, served over real HTTP on loopback so the real client code runs.

It speaks OpenAI's ``POST /v1/chat/completions`` and ``POST /v1/embeddings`` and Anthropic's
``POST /v1/messages`` from a stdlib ``ThreadingHTTPServer`` on ``127.0.0.1`` (a free port), so connection
handling, headers, status codes, retries and timeouts are exercised for real, with no mock transport.
Each endpoint answers from its script first (``double.script``), then from its handler (``double.handler``);
with neither, it answers 400 saying so. Every request is recorded (``double.requests``)::

    with LLMDouble() as double:
        double.script("openai", status_reply(429, headers={"Retry-After": "0.1"}), text_reply("hello"))
        double.handler("anthropic", lambda body: text_reply(body["messages"][-1]["content"][0]["text"].upper()))
        async with OpenAIChat("m", base_url=double.openai_url, api_key="k") as llm:
            assert await llm.complete([{"role": "user", "content": "hi"}]) == "hello"
        assert len(double.requests("openai")) == 2

A handler may return a plain string: it is sent as ``text_reply(string)``. Token usage in answers defaults to
10 input and 5 output tokens; the builders take others.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count
from types import TracebackType
from typing import Any, Literal, Self, cast

__all__ = [
    "DelayedReply",
    "DisconnectReply",
    "EmbeddingReply",
    "Endpoint",
    "Handler",
    "JSONReply",
    "LLMDouble",
    "RecordedRequest",
    "Reply",
    "StatusReply",
    "TextReply",
    "ToolCallReply",
    "delayed",
    "disconnect",
    "embedding_reply",
    "json_reply",
    "status_reply",
    "text_reply",
    "tool_call_reply",
]

Endpoint = Literal["openai", "anthropic", "embeddings"]
_PATHS: dict[str, Endpoint] = {
    "/v1/chat/completions": "openai",
    "/v1/messages": "anthropic",
    "/v1/embeddings": "embeddings",
}


@dataclass(frozen=True)
class TextReply:
    """A text answer; ``truncated`` marks it cut off at the token limit (finish_reason length / max_tokens)."""

    text: str
    truncated: bool = False
    input_tokens: int = 10
    output_tokens: int = 5


@dataclass(frozen=True)
class JSONReply:
    """A structured answer: JSON text from OpenAI; from Anthropic the forced tool's input when the request
    forces a tool, else JSON text."""

    value: Any
    truncated: bool = False
    input_tokens: int = 10
    output_tokens: int = 5


@dataclass(frozen=True)
class ToolCallReply:
    """The model calls tool ``name`` with ``arguments`` (OpenAI ``tool_calls``, Anthropic ``tool_use``)."""

    name: str
    arguments: Mapping[str, Any]
    call_id: str = "call_1"
    truncated: bool = False
    input_tokens: int = 10
    output_tokens: int = 5


@dataclass(frozen=True)
class StatusReply:
    """A raw HTTP answer. With no ``body``: the provider's error shape carrying ``message``. A ``body`` that is
    str or bytes is sent as is, anything else as JSON."""

    status: int
    message: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None


@dataclass(frozen=True)
class DelayedReply:
    """``reply`` after ``seconds`` (the server thread sleeps before answering): for timeouts."""

    seconds: float
    reply: Reply


@dataclass(frozen=True)
class EmbeddingReply:
    """Embeddings, sent in ``order`` (indices into ``vectors``; default in order: servers may reorder)."""

    vectors: Sequence[Sequence[float]]
    order: Sequence[int] | None = None


@dataclass(frozen=True)
class DisconnectReply:
    """The connection is closed with no answer at all: a connection error for the client."""


Reply = TextReply | JSONReply | ToolCallReply | StatusReply | DelayedReply | EmbeddingReply | DisconnectReply
Handler = Callable[[dict[str, Any]], Reply | str]


def text_reply(text: str, *, truncated: bool = False, input_tokens: int = 10, output_tokens: int = 5) -> TextReply:
    return TextReply(text, truncated, input_tokens, output_tokens)


def json_reply(value: Any, *, truncated: bool = False, input_tokens: int = 10, output_tokens: int = 5) -> JSONReply:
    return JSONReply(value, truncated, input_tokens, output_tokens)


def tool_call_reply(
    name: str, arguments: Mapping[str, Any], *, call_id: str = "call_1", truncated: bool = False
) -> ToolCallReply:
    return ToolCallReply(name, arguments, call_id, truncated)


def status_reply(
    status: int, message: str | None = None, *, headers: Mapping[str, str] | None = None, body: Any = None
) -> StatusReply:
    return StatusReply(status, message, dict(headers or {}), body)


def delayed(seconds: float, reply: Reply) -> DelayedReply:
    return DelayedReply(seconds, reply)


def embedding_reply(vectors: Sequence[Sequence[float]], *, order: Sequence[int] | None = None) -> EmbeddingReply:
    return EmbeddingReply(vectors, order)


def disconnect() -> DisconnectReply:
    return DisconnectReply()


@dataclass(frozen=True)
class RecordedRequest:
    """One request the double received: its parsed JSON body, headers (lower-case names), arrival time."""

    endpoint: Endpoint
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    at: float  # time.monotonic() on arrival


class _Misuse(Exception):
    """The test asked the double for something it cannot answer; sent back as a 400 naming the problem."""


class LLMDouble:
    """A test double of the hosted APIs, served over real HTTP on loopback so the real client code runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scripts: dict[Endpoint, deque[Reply]] = {name: deque() for name in _PATHS.values()}
        self._handlers: dict[Endpoint, Handler] = {}
        self._requests: list[RecordedRequest] = []
        self._ids = count(1)
        self._server = _Server(self)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_url(self) -> str:
        """The base URL for OpenAI-compatible clients (ends in ``/v1``)."""
        return f"{self.url}/v1"

    @property
    def anthropic_url(self) -> str:
        """The base URL for Anthropic clients (they add ``/v1/messages``)."""
        return self.url

    def start(self) -> Self:
        if self._thread is None:
            self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Stops serving; replies still sleeping in a ``delayed`` finish into closed sockets, unseen."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def script(self, endpoint: Endpoint, *replies: Reply | str) -> None:
        """Queues replies for ``endpoint``, answered one per request in order before any handler."""
        with self._lock:
            self._scripts[_checked(endpoint)].extend(_as_reply(reply) for reply in replies)

    def handler(self, endpoint: Endpoint, fn: Handler | None) -> None:
        """Answers ``endpoint``'s requests with ``fn(request_body)`` whenever its script is empty (None: remove)."""
        with self._lock:
            if fn is None:
                self._handlers.pop(_checked(endpoint), None)
            else:
                self._handlers[_checked(endpoint)] = fn

    def requests(self, endpoint: Endpoint | None = None) -> list[RecordedRequest]:
        """Every request received so far (for ``endpoint``, or all), oldest first."""
        with self._lock:
            return [r for r in self._requests if endpoint is None or r.endpoint == endpoint]

    def pending(self, endpoint: Endpoint) -> int:
        """How many scripted replies are still unused: a test can assert its script was consumed."""
        with self._lock:
            return len(self._scripts[_checked(endpoint)])

    def reset(self) -> None:
        """Forgets scripts, handlers and recorded requests (for a double shared between tests)."""
        with self._lock:
            for script in self._scripts.values():
                script.clear()
            self._handlers.clear()
            self._requests.clear()

    def _receive(self, endpoint: Endpoint, path: str, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        with self._lock:
            self._requests.append(RecordedRequest(endpoint, path, body, headers, time.monotonic()))
            if self._scripts[endpoint]:
                return self._scripts[endpoint].popleft()
            fn = self._handlers.get(endpoint)
        if fn is None:
            raise _Misuse(
                f"LLMDouble: nothing scripted for {endpoint!r} and no handler set; "
                f"call double.script({endpoint!r}, ...) or double.handler({endpoint!r}, fn)"
            )
        try:
            return _as_reply(fn(body))
        except Exception as exc:
            raise _Misuse(f"LLMDouble: the handler for {endpoint!r} raised {type(exc).__name__}: {exc}") from exc

    def _next_id(self) -> int:
        return next(self._ids)


def _checked(endpoint: str) -> Endpoint:
    if endpoint not in _PATHS.values():
        raise ValueError(f"unknown endpoint {endpoint!r}; use one of {sorted(set(_PATHS.values()))}")
    return cast(Endpoint, endpoint)


def _as_reply(reply: Reply | str) -> Reply:
    return text_reply(reply) if isinstance(reply, str) else reply


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, double: LLMDouble) -> None:
        self.double = double
        super().__init__(("127.0.0.1", 0), _RequestHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet about clients that hung up (a timed-out request's late reply); loud about anything else."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the hosted APIs: clients reuse connections

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the test output is not the place for an access log."""

    def do_POST(self) -> None:
        double = cast(_Server, self.server).double
        endpoint = _PATHS.get(self.path)
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        if endpoint is None:
            self._send(404, {"error": {"message": f"LLMDouble serves {sorted(_PATHS)}, not {self.path}"}}, {})
            return
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise _Misuse("LLMDouble: the request body is not a JSON object")
            if body.get("stream"):
                raise _Misuse("LLMDouble: streaming is not supported")
            headers = {name.lower(): value for name, value in self.headers.items()}
            self._answer(double, endpoint, body, double._receive(endpoint, self.path, body, headers))
        except (_Misuse, ValueError) as exc:
            self._send(400, _error_body(endpoint, str(exc)), {})

    def _answer(self, double: LLMDouble, endpoint: Endpoint, body: dict[str, Any], reply: Reply) -> None:
        while isinstance(reply, DelayedReply):
            time.sleep(reply.seconds)
            reply = reply.reply
        if isinstance(reply, DisconnectReply):
            self.close_connection = True
            return
        if isinstance(reply, StatusReply):
            content = reply.body if reply.body is not None else _error_body(endpoint, reply.message)
            self._send(reply.status, content, reply.headers)
            return
        render = {"openai": _openai_body, "anthropic": _anthropic_body, "embeddings": _embeddings_body}[endpoint]
        self._send(200, render(reply, body, double._next_id()), {})

    def _send(self, status: int, content: Any, headers: Mapping[str, str]) -> None:
        if isinstance(content, bytes | str):
            data = content.encode() if isinstance(content, str) else content
            content_type = "text/plain; charset=utf-8"
        else:
            data = json.dumps(content).encode()
            content_type = "application/json"
        self.send_response(status)
        sent = {name.lower() for name in headers}
        for name, value in headers.items():
            self.send_header(name, value)
        if "content-type" not in sent:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _error_body(endpoint: Endpoint, message: str | None) -> dict[str, Any]:
    message = message or "LLMDouble: scripted error"
    if endpoint == "anthropic":
        return {"type": "error", "error": {"type": "double_error", "message": message}}
    return {"error": {"message": message, "type": "double_error", "code": None}}


def _usage(reply: TextReply | JSONReply | ToolCallReply) -> tuple[int, int]:
    return reply.input_tokens, reply.output_tokens


def _openai_body(reply: Reply, request: dict[str, Any], n: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None}
    if isinstance(reply, TextReply):
        message["content"], finish = reply.text, "stop"
    elif isinstance(reply, JSONReply):
        message["content"], finish = json.dumps(reply.value), "stop"
    elif isinstance(reply, ToolCallReply):
        arguments = json.dumps(dict(reply.arguments))
        call = {"id": reply.call_id, "type": "function", "function": {"name": reply.name, "arguments": arguments}}
        message["tool_calls"], finish = [call], "tool_calls"
    else:
        raise _Misuse(f"LLMDouble: {type(reply).__name__} cannot answer a chat completion")
    prompt, completion = _usage(reply)
    return {
        "id": f"chatcmpl-double-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", ""),
        "choices": [{"index": 0, "message": message, "finish_reason": "length" if reply.truncated else finish}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def _anthropic_body(reply: Reply, request: dict[str, Any], n: int) -> dict[str, Any]:
    forced = request.get("tool_choice") or {}
    block: dict[str, Any]
    if isinstance(reply, TextReply):
        block, stop = {"type": "text", "text": reply.text}, "end_turn"
    elif isinstance(reply, JSONReply) and forced.get("type") == "tool":
        block, stop = (
            {"type": "tool_use", "id": f"toolu_double_{n}", "name": forced["name"], "input": reply.value},
            "tool_use",
        )
    elif isinstance(reply, JSONReply):
        block, stop = {"type": "text", "text": json.dumps(reply.value)}, "end_turn"
    elif isinstance(reply, ToolCallReply):
        block = {"type": "tool_use", "id": reply.call_id, "name": reply.name, "input": dict(reply.arguments)}
        stop = "tool_use"
    else:
        raise _Misuse(f"LLMDouble: {type(reply).__name__} cannot answer a Messages API request")
    input_tokens, output_tokens = _usage(reply)
    return {
        "id": f"msg_double_{n}",
        "type": "message",
        "role": "assistant",
        "model": request.get("model", ""),
        "content": [block],
        "stop_reason": "max_tokens" if reply.truncated else stop,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


def _embeddings_body(reply: Reply, request: dict[str, Any], n: int) -> dict[str, Any]:
    if not isinstance(reply, EmbeddingReply):
        raise _Misuse(f"LLMDouble: {type(reply).__name__} cannot answer an embeddings request")
    order = range(len(reply.vectors)) if reply.order is None else reply.order
    data = [{"object": "embedding", "index": i, "embedding": list(reply.vectors[i])} for i in order]
    tokens = len(request.get("input") or ())
    return {
        "object": "list",
        "data": data,
        "model": request.get("model", ""),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
