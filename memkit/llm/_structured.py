"""Structured output shared by the clients: the schema a type becomes, decoding, and the one repair attempt.

Models get a JSON Schema whose root is an object (OpenAI's ``json_schema`` mode and Anthropic's tool input
both require one); a type whose schema is not an object (``list[Fact]``) is asked for as ``{"value": ...}``
and unwrapped. Output is decoded with ``msgspec.json`` into the type, so validation is msgspec's. When it
fails, the model sees its answer and the error once and may correct it; a second failure raises
``StructuredOutputError`` with the last raw text.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Generic, NamedTuple, TypeVar, cast

import msgspec

from memkit._repr import short_repr
from memkit.errors import StructuredOutputError, ValidationError
from memkit.llm._protocol import ChatMessage

__all__ = ["Answer", "Target", "repair_messages", "schema_instruction", "structured_with_repair", "target_for"]

T = TypeVar("T")

_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]+")
_THINK = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)  # reasoning models served raw (DeepSeek-R1, Qwen3)
_FENCED = re.compile(r"```[\w-]*[ \t]*\n?(.*?)```", re.DOTALL)


class Answer(NamedTuple):
    """One model answer as structured output sees it."""

    text: str  # the text, or a forced tool call's input as JSON
    truncated: bool  # cut off at max_tokens
    tool_call_id: str | None = None  # set when the answer came as a tool call
    tool_name: str | None = None


class InvalidOutput(Exception):
    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


class Target(Generic[T]):
    """What ``structured(schema=...)`` decodes into, with the JSON Schema shown to the model."""

    def __init__(self, schema_type: type[T]) -> None:
        try:
            raw = msgspec.json.schema(schema_type)
        except (TypeError, ValueError, RecursionError) as exc:  # msgspec's message quotes the value whole
            raise ValidationError(
                f"{short_repr(schema_type)} cannot be described as a JSON Schema ({type(exc).__name__})"
            ) from exc
        self.name = _NAME_CHARS.sub("_", getattr(schema_type, "__name__", "") or "answer")[:64] or "answer"
        root = _inline_root(raw)
        self.wrapped = root.get("type") != "object"
        if self.wrapped:
            defs = root.pop("$defs", None)
            root = {"type": "object", "properties": {"value": root}, "required": ["value"]}
            if defs:
                root["$defs"] = defs
            decode_type: Any = msgspec.defstruct("Wrapped", [("value", schema_type)])
        else:
            decode_type = schema_type
        self.schema: dict[str, Any] = root
        self.strict_schema = _strict_form(root)
        self._decoder = msgspec.json.Decoder(decode_type)

    def decode(self, answer: Answer) -> T:
        """The decoded value; raises ``InvalidOutput`` with msgspec's message, saying so when it was truncated."""
        try:
            value = self._decoder.decode(json_text(answer.text))
        except msgspec.DecodeError as exc:  # msgspec.ValidationError is a DecodeError
            problem = str(exc)
            if answer.truncated:
                problem = f"the answer was cut off at the token limit, so its JSON is incomplete ({problem})"
            raise InvalidOutput(problem) from None
        return cast(T, value.value if self.wrapped else value)


@functools.lru_cache(maxsize=256)
def _cached_target(schema_type: Any) -> Target[Any]:
    return Target(schema_type)


def target_for(schema_type: type[T]) -> Target[T]:
    """The target for a type, built once per type (schemas and decoders are not free)."""
    try:
        return cast(Target[T], _cached_target(cast(Any, schema_type)))
    except TypeError:  # an unhashable type annotation: build it each time
        return Target(schema_type)


def json_text(text: str) -> str:
    """The JSON in a model's answer: without a leading ``<think>`` block or a ```json fence around it."""
    text = _THINK.sub("", text, count=1).strip()
    if text[:1] in ("{", "["):
        return text
    fenced = _FENCED.search(text)
    if fenced:
        return fenced.group(1).strip()
    if text.startswith("```"):  # an opening fence whose closing one was cut off
        return text.partition("\n")[2].strip()
    return text


def schema_instruction(target: Target[Any]) -> str:
    schema = msgspec.json.encode(target.schema).decode()
    return (
        "Answer with a single JSON object that matches this JSON Schema, and nothing else "
        f"(no prose, no code fences):\n{schema}"
    )


def repair_messages(answer: Answer, problem: str) -> list[dict[str, Any]]:
    """The model's invalid answer and the error, to append to the conversation for the repair attempt."""
    ask = "Reply with the corrected JSON only: no prose, no code fences."
    if answer.truncated:
        ask = "Reply with complete, corrected JSON only, shorter so that it fits: no prose, no code fences."
    if answer.tool_call_id is None:
        return [
            {"role": "assistant", "content": answer.text},
            {"role": "user", "content": f"Your answer is not valid JSON for the required schema: {problem}\n{ask}"},
        ]
    call = {
        "id": answer.tool_call_id,
        "type": "function",
        "function": {"name": answer.tool_name, "arguments": answer.text},
    }
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": answer.tool_call_id, "content": f"Invalid input: {problem}", "is_error": True},
        {"role": "user", "content": f"Call {answer.tool_name} again with input corrected for: {problem}"},
    ]


async def structured_with_repair(
    ask: Callable[[list[dict[str, Any]]], Awaitable[Answer]],
    messages: Sequence[ChatMessage],
    target: Target[T],
    who: str,
) -> T:
    """Asks, decodes, and on failure asks once more with the error shown; then ``StructuredOutputError``."""
    conversation = [dict(message) for message in messages]
    answer = await ask(conversation)
    try:
        return target.decode(answer)
    except InvalidOutput as exc:
        problem = exc.problem
    answer = await ask(conversation + repair_messages(answer, problem))
    try:
        return target.decode(answer)
    except InvalidOutput as exc:
        raise StructuredOutputError(
            f"{who} gave invalid JSON for {target.name} twice (the second time after being shown the error): "
            f"{exc.problem}",
            raw=answer.text,
            problem=exc.problem,
        ) from None


def _inline_root(schema: dict[str, Any]) -> dict[str, Any]:
    """msgspec puts a Struct's schema under ``$defs`` with a ``$ref`` root; providers want the object at the root."""
    root = copy.deepcopy(schema)
    ref = root.get("$ref")
    defs = root.get("$defs", {})
    if set(root) != {"$ref", "$defs"} or not isinstance(ref, str) or not ref.startswith("#/$defs/"):
        return root
    inlined = dict(defs[ref.removeprefix("#/$defs/")])
    if '"$ref"' in msgspec.json.encode(inlined).decode():  # nested or recursive types still point into $defs
        inlined["$defs"] = defs
    return inlined


def _strict_form(schema: dict[str, Any]) -> dict[str, Any] | None:
    """The schema for OpenAI's ``strict`` mode, or None if it does not fit it: every object must list all its
    properties as required and allow no others (a Struct field with a default does not fit)."""
    strict = copy.deepcopy(schema)
    for node in _objects(strict):
        properties = node.get("properties")
        if not isinstance(properties, dict) or set(node.get("required", ())) != set(properties):
            return None
        if node.get("additionalProperties", False) is not False:
            return None
        node["additionalProperties"] = False
    return strict


def _objects(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        if node.get("type") == "object":
            yield node
        for value in node.values():
            yield from _objects(value)
    elif isinstance(node, list):
        for value in node:
            yield from _objects(value)
