"""Messages in OpenAI chat shape: checking them, and converting them for Anthropic's Messages API.

Anthropic differs in four ways the conversion absorbs: system prompts are a top-level ``system`` string, roles
must alternate (consecutive same-role messages are merged), an assistant's ``tool_calls`` are ``tool_use``
blocks, and a ``tool`` message is a ``tool_result`` block in a user message, before any text in it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from memkit._repr import short_repr
from memkit.errors import ValidationError
from memkit.llm._protocol import ChatMessage

__all__ = ["as_messages", "to_anthropic", "with_system_instruction"]

_SYSTEM_ROLES = frozenset({"system", "developer"})  # "developer": OpenAI's newer name for system


def as_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Plain dict copies, or ``ValidationError`` if ``messages`` is not a sequence of role-bearing mappings."""
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise ValidationError(
            f"messages must be a sequence of {{'role': ..., 'content': ...}} mappings, got {type(messages).__name__}"
        )
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise ValidationError(f"messages[{i}] must be a mapping with a 'role' string, got {short_repr(message)}")
        out.append(dict(message))
    return out


def with_system_instruction(messages: list[dict[str, Any]], instruction: str) -> list[dict[str, Any]]:
    """``messages`` with ``instruction`` added to the leading system prompt (some chat templates refuse a system
    message anywhere but first, so it is merged there rather than appended)."""
    if messages and messages[0]["role"] == "system" and isinstance(messages[0].get("content"), str):
        first = {**messages[0], "content": f"{messages[0]['content']}\n\n{instruction}"}
        return [first, *messages[1:]]
    return [{"role": "system", "content": instruction}, *messages]


def to_anthropic(messages: Sequence[ChatMessage]) -> tuple[str | None, list[dict[str, Any]]]:
    """The ``system`` string (None if there is none) and the alternating ``messages`` of a Messages API call."""
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for i, message in enumerate(as_messages(messages)):
        role = message["role"]
        if role in _SYSTEM_ROLES:
            system.extend(_texts(message.get("content")))
            continue
        if role == "tool":
            role, blocks = "user", [_tool_result(message, i)]
        elif role == "user":
            blocks = _blocks(message.get("content"))
        elif role == "assistant":
            blocks = _blocks(message.get("content")) + _tool_uses(message, i)
        else:
            raise ValidationError(f"messages[{i}] has role {short_repr(role)}; use system, user, assistant or tool")
        if not blocks:
            continue  # Anthropic refuses empty content; an empty turn says nothing
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    for message in out:  # tool results must open their user message; sort is stable
        message["content"].sort(key=lambda block: block.get("type") != "tool_result")
    return ("\n\n".join(text for text in system if text) or None), out


def _texts(content: Any) -> list[str]:
    return [block["text"] for block in _blocks(content) if block.get("type") == "text"]


def _blocks(content: Any) -> list[dict[str, Any]]:
    """Content blocks from a string or a list of OpenAI content parts; Anthropic-native blocks pass through."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, Sequence):
        raise ValidationError(f"message content must be a string or a list of parts, got {short_repr(content)}")
    blocks: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, str):
            blocks.extend(_blocks(part))
        elif isinstance(part, Mapping) and part.get("type") == "text":
            blocks.extend(_blocks(part.get("text")))
        elif isinstance(part, Mapping) and part.get("type") == "image_url":
            blocks.append(_image(part.get("image_url")))
        elif isinstance(part, Mapping):
            blocks.append(dict(part))
        else:
            raise ValidationError(f"a content part must be a mapping or a string, got {short_repr(part)}")
    return blocks


def _image(image_url: Any) -> dict[str, Any]:
    url = image_url.get("url") if isinstance(image_url, Mapping) else image_url
    if not isinstance(url, str):
        raise ValidationError(f"an image_url part needs a URL, got {short_repr(image_url)}")
    if url.startswith("data:") and ";base64," in url:
        media_type, _, data = url[len("data:") :].partition(";base64,")
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _tool_uses(message: Mapping[str, Any], i: int) -> list[dict[str, Any]]:
    blocks = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not call.get("id") or not function.get("name"):
            raise ValidationError(
                f"messages[{i}] has a tool call without an id, a function or its name: {short_repr(call)}"
            )
        tool_input = _arguments(function.get("arguments"))
        blocks.append({"type": "tool_use", "id": call["id"], "name": function["name"], "input": tool_input})
    return blocks


def _arguments(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as the JSON object Anthropic wants. OpenAI carries them as a string the model
    wrote, which may not be an object (or JSON at all): that is kept whole under ``value``, never dropped."""
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if arguments is None or arguments == "":
        return {}
    try:
        decoded = msgspec.json.decode(arguments) if isinstance(arguments, str | bytes) else arguments
    except msgspec.DecodeError:
        decoded = arguments
    return decoded if isinstance(decoded, dict) else {"value": decoded}


def _tool_result(message: Mapping[str, Any], i: int) -> dict[str, Any]:
    call_id = message.get("tool_call_id")
    if not call_id:
        raise ValidationError(f"messages[{i}] is a tool message without a tool_call_id")
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
    content = message.get("content")
    if content:
        block["content"] = content if isinstance(content, str) else _blocks(content)
    if message.get("is_error"):
        block["is_error"] = True
    return block
