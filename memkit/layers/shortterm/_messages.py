"""Chat messages in one neutral shape, read from OpenAI's or Anthropic's and written back to either.

Internally a message is OpenAI-like (``system`` / ``user`` / ``assistant`` / ``tool``), because that shape
keeps each tool result as a message of its own: Anthropic's user message holding ``tool_result`` blocks
becomes one ``tool`` message per block (then a ``user`` message for any text beside them), and its
``tool_use`` blocks become ``tool_calls``. Rendering back to Anthropic merges them again.

A **turn** is what folding may never cut: one message, or one tool exchange (an assistant message with
tool calls and the results of all of them, parallel calls included). An exchange whose results have not
all arrived is *open*; it is never folded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

import msgspec

from memkit._repr import short_repr
from memkit.errors import ContentError

__all__ = [
    "Message",
    "MessageInput",
    "Role",
    "ToolCall",
    "Turn",
    "check_tool_order",
    "ROLES",
    "parse_messages",
    "split_turns",
]

Role = Literal["system", "user", "assistant", "tool"]
MessageInput: TypeAlias = "Mapping[str, Any] | Message"
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
_json = msgspec.json.Encoder()
_MAX_NAME_CHARS = 256


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    arguments: str = "{}"
    """The call's arguments as JSON text (OpenAI's form; Anthropic's ``input`` object is encoded)."""


class Message(msgspec.Struct, frozen=True, kw_only=True):
    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    """For ``tool`` messages: the call this is the result of."""
    name: str | None = None
    """A participant's name (``user``), or the tool's name (``tool``, when known)."""
    is_error: bool = False
    """A tool result that reports a failure (Anthropic's ``is_error``)."""
    seq: int = -1
    """Position in the session, given when it is added; folding checks it to know nothing moved."""
    tokens: int = 0
    """What it costs in a request, counted once when it is added (0: not counted yet)."""


class Turn(msgspec.Struct, frozen=True):
    """``messages[start:end]``: one message or one whole tool exchange."""

    start: int
    end: int
    open: bool = False


def parse_messages(message: MessageInput, max_chars: int) -> list[Message]:
    """One input message (OpenAI or Anthropic shape, or a ``Message``) as neutral messages (an Anthropic
    user message with tool results gives several). Raises ``ContentError`` saying what is wrong."""
    try:
        return _parse(message, max_chars)
    except ContentError:
        raise
    except (TypeError, ValueError, AttributeError, RecursionError, msgspec.ValidationError) as exc:
        # A shape the checks above did not foresee (a list as a role, an object as arguments...).
        raise ContentError(f"the message is not a chat message memkit can keep: {type(exc).__name__}: {exc}") from exc


def _parse(message: MessageInput, max_chars: int) -> list[Message]:
    if isinstance(message, Message):
        # Built by the caller: msgspec does not check a Struct's fields when it is built, and a wrong one
        # would make the stored session unreadable. Checked by converting it; count and position are ours.
        fields = msgspec.to_builtins(msgspec.structs.replace(message, tokens=0, seq=-1))
        return [_checked(msgspec.convert(fields, Message), max_chars)]
    if not isinstance(message, Mapping):
        raise ContentError(f"a message must be a dict with 'role' and 'content', got {type(message).__name__}")
    given_role = message.get("role")
    role = ROLES.get(given_role) if isinstance(given_role, str) else None
    if role is None:
        raise ContentError(f"message role must be one of {sorted(ROLES)}, got {short_repr(message.get('role'))}")
    content = message.get("content")
    if isinstance(content, list):
        return [_checked(m, max_chars) for m in _from_blocks(role, content, message)]
    if content is not None and not isinstance(content, str):
        raise ContentError(f"message content must be a string or a list of blocks, got {type(content).__name__}")
    given_calls = message.get("tool_calls") or ()
    if not isinstance(given_calls, (list, tuple)):
        raise ContentError(f"tool_calls must be a list, got {type(given_calls).__name__}")
    calls = tuple(_openai_call(call) for call in given_calls)
    parsed = Message(
        role=role,  # type: ignore[arg-type]
        content=content or "",
        tool_calls=calls,
        tool_call_id=_optional_str(message.get("tool_call_id"), "tool_call_id"),
        name=_optional_str(message.get("name"), "name"),
    )
    return [_checked(parsed, max_chars)]


def _from_blocks(role: str, blocks: list[Any], message: Mapping[str, Any]) -> list[Message]:
    """Content given as blocks: text parts (both APIs), Anthropic ``tool_use`` and ``tool_result``."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    results: list[Message] = []
    for block in blocks:
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text":
            texts.append(_required_str(block, "text"))
        elif kind == "tool_use" and role == "assistant":
            calls.append(ToolCall(id=_required_str(block, "id"), name=_required_str(block, "name"),
                                  arguments=_json.encode(block.get("input", {})).decode()))  # fmt: skip
        elif kind == "tool_result" and role == "user":
            is_error = block.get("is_error", False)
            if not isinstance(is_error, bool):
                raise ContentError(f"a tool_result's is_error must be true or false, got {short_repr(is_error)}")
            results.append(Message(role="tool", content=_result_text(block.get("content")),
                                   tool_call_id=_required_str(block, "tool_use_id"), is_error=is_error))  # fmt: skip
        else:
            raise ContentError(
                f"unsupported content block {short_repr(kind)} in a {role} message; short-term memory keeps text, "
                "tool_use (assistant) and tool_result (user) blocks"
            )
    text = "\n".join(texts)
    name = _optional_str(message.get("name"), "name")
    if role == "tool":
        return [
            Message(role="tool", content=text, tool_call_id=_optional_str(message.get("tool_call_id"), "tool_call_id"))
        ]
    own = [Message(role=role, content=text, tool_calls=tuple(calls), name=name)] if text or calls or not results else []  # type: ignore[arg-type]
    return results + own


def _result_text(content: object) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        parts = []
        for block in content:
            if not (isinstance(block, Mapping) and block.get("type") == "text"):
                raise ContentError("a tool_result's content blocks must be text blocks")
            parts.append(_required_str(block, "text"))
        return "\n".join(parts)
    raise ContentError(f"a tool_result's content must be a string or text blocks, got {type(content).__name__}")


def _openai_call(call: object) -> ToolCall:
    if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
        raise ContentError("each tool_calls entry must be {'id': ..., 'type': 'function', 'function': {...}}")
    function = call["function"]
    arguments = function.get("arguments", "{}")
    if not isinstance(arguments, str):  # some servers send the object itself
        arguments = _json.encode(arguments).decode()
    return ToolCall(id=_required_str(call, "id"), name=_required_str(function, "name"), arguments=arguments)


def _required_str(block: Mapping[str, Any], key: str) -> str:
    value = block.get(key)
    if not isinstance(value, str):
        raise ContentError(f"{key!r} must be a string, got {type(value).__name__}")
    return value


def _optional_str(value: object, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ContentError(f"{what} must be a string, got {type(value).__name__}")
    return value


def _checked(message: Message, max_chars: int) -> Message:
    if message.role not in ("system", "user", "assistant", "tool"):
        raise ContentError(f"message role must be system, user, assistant or tool, got {short_repr(message.role)}")
    if not isinstance(message.content, str):
        raise ContentError(f"message content must be a string, got {type(message.content).__name__}")
    if message.role == "tool" and not message.tool_call_id:
        raise ContentError("a tool message needs the tool_call_id of the call it answers")
    if message.tool_calls and message.role != "assistant":
        raise ContentError("only assistant messages carry tool_calls")
    names = [message.name, message.tool_call_id, *(x for c in message.tool_calls for x in (c.id, c.name))]
    for name in names:
        if name is not None and (len(name) > _MAX_NAME_CHARS or "\n" in name or not name.strip()):
            raise ContentError(
                f"names and ids must be one line of 1 to {_MAX_NAME_CHARS} characters, got {name[:80]!r}"
            )
    size = len(message.content) + sum(len(c.arguments) for c in message.tool_calls)
    if size > max_chars:
        raise ContentError(f"the message has {size} characters; the limit is {max_chars} (max_message_chars)")
    if not (message.content.strip() or message.tool_calls or message.role == "tool"):
        raise ContentError(f"the {message.role} message is empty")
    try:
        _json.encode(message)
    except (UnicodeEncodeError, msgspec.EncodeError) as exc:
        raise ContentError(f"the message cannot be stored: {exc}") from exc
    return message


def _pending_calls(messages: Sequence[Message]) -> set[str]:
    """The calls of the exchange at the end of ``messages`` still waiting for a result."""
    answered: set[str] = set()
    for m in reversed(messages):
        if m.role != "tool":
            return {c.id for c in m.tool_calls} - answered
        answered.add(m.tool_call_id or "")
    return set()


def check_tool_order(before: Sequence[Message], new: Sequence[Message]) -> None:
    """Refuse what neither chat API accepts, before it is stored: a tool result that does not answer a call
    of the exchange right before it, and another message while calls still wait for their results."""
    pending = _pending_calls(before)
    for m in new:
        if m.role == "system":
            continue  # pinned apart from the dialogue; it does not break an exchange
        if m.role == "tool":
            if m.tool_call_id not in pending:
                raise ContentError(
                    f"the tool result for {m.tool_call_id!r} answers no waiting call: a result must follow the "
                    "assistant message that made the call, once, with only other results in between"
                )
            pending.discard(m.tool_call_id)
            continue
        if pending:
            raise ContentError(
                f"calls {sorted(pending)} still wait for their results; add a tool message for each (an error "
                "result is fine) before the next message"
            )
        pending = {c.id for c in m.tool_calls}
        if len(pending) != len(m.tool_calls):
            raise ContentError("two tool calls of one message share an id")


def split_turns(messages: Sequence[Message]) -> list[Turn]:
    """The turns of a run of (non-system) messages, in order; a tool exchange is one turn, closed when
    every call has its result. A result whose call is not in the exchange before it stands alone."""
    turns: list[Turn] = []
    at = 0
    while at < len(messages):
        message = messages[at]
        end = at + 1
        pending = {call.id for call in message.tool_calls}
        while pending and end < len(messages) and messages[end].role == "tool":
            pending.discard(messages[end].tool_call_id or "")
            end += 1
        # Still waiting only while nothing came after it: a result can no longer join it once another
        # message did (the chat APIs want results right after their calls), so it may be folded then.
        turns.append(Turn(at, end, open=bool(pending) and end == len(messages)))
        at = end
    return turns
