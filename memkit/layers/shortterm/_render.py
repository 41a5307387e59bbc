"""From a session's state to messages ready to send, within the token budget.

The rule when everything does not fit, in order of what is kept:

1. the pinned system messages (at most half the budget when the newest turn needs the rest);
2. the newest turn, whatever its size: contents too large for what is left are cut in the middle with a
   marker saying how much was cut (``[... 1234 tokens cut by memkit to fit the budget ...]``);
3. the rolling summary (cut the same way when it alone does not fit);
4. older turns, newest first, as many as fit whole. Those left out are named in a marker line at the end
   of the summary message (they are still in the history, and the next fold summarises them).

Nothing is dropped without a marker, and the result never exceeds the budget as the session's tokenizer
counts it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from memkit.layers.shortterm._messages import Message, ToolCall, split_turns
from memkit.tokens import MESSAGE_OVERHEAD, Tokenizer

__all__ = [
    "AnthropicMessages",
    "Window",
    "fit_window",
    "message_tokens",
    "rendered_tokens",
    "to_anthropic",
    "to_openai",
]

SUMMARY_HEADER = "Summary of the earlier conversation:\n"
_CONTINUE = "(The conversation so far is summarised in the system prompt.)"
_json = msgspec.json.Decoder()


class AnthropicMessages(list[dict[str, Any]]):
    """Anthropic's ``messages``, with the system prompt beside them:
    ``client.messages.create(system=msgs.system, messages=msgs, ...)``."""

    system: str = ""


class Window(msgspec.Struct, frozen=True, kw_only=True):
    system: list[str]
    """Pinned system contents, then the summary message (if any), each one system message."""
    messages: list[Message]
    omitted: int = 0
    """Older messages left out to fit the budget (named in the summary message)."""
    tokens: int = 0


def message_tokens(message: Message, tokenizer: Tokenizer) -> int:
    """What the message costs in a request: content, tool calls and each one's overhead."""
    if message.tokens:
        return message.tokens
    calls = sum(tokenizer.count(c.name) + tokenizer.count(c.arguments) + MESSAGE_OVERHEAD for c in message.tool_calls)
    return MESSAGE_OVERHEAD + tokenizer.count(message.content) + calls


def rendered_tokens(messages: Sequence[Mapping[str, Any]], tokenizer: Tokenizer) -> int:
    """What OpenAI-shaped messages cost as the budget counts them: the check that ``to_messages()`` fits."""
    total = 0
    for m in messages:
        total += MESSAGE_OVERHEAD + tokenizer.count(m.get("content") or "")
        for call in m.get("tool_calls") or ():
            function = call["function"]
            total += MESSAGE_OVERHEAD + tokenizer.count(function["name"]) + tokenizer.count(function["arguments"])
    return total


def _omitted_note(count: int) -> str:
    return f"\n[{count} earlier messages are not shown here; they will be folded into this summary]"


def truncate_text(text: str, max_tokens: int, tokenizer: Tokenizer, total: int | None = None) -> str:
    """``text`` if it fits, else its head and tail around a marker, within ``max_tokens``. How much to keep
    is found from the text's own density and corrected by a few counts of the cut text (never the whole
    text again: a 1 MB message is rendered in milliseconds)."""
    total = tokenizer.count(text) if total is None else total
    if total <= max_tokens:
        return text
    marker = f"\n[... {total} tokens cut by memkit to fit the budget ...]\n"

    def cut(keep: int) -> str:
        head = keep * 2 // 3
        return text[:head] + marker + text[len(text) - (keep - head) :]

    if tokenizer.count(marker) > max_tokens:
        return ""
    keep = min(len(text), len(text) * max_tokens // max(total, 1))
    for _ in range(8):  # secant steps towards 97-100% of the budget
        size = tokenizer.count(cut(keep))
        if 0.97 * max_tokens <= size <= max_tokens or (size <= max_tokens and keep >= len(text)):
            break
        keep = min(len(text), max(int(keep * max_tokens / max(size, 1) * 0.985), 0))
    while keep > 0 and tokenizer.count(cut(keep)) > max_tokens:  # the steps ended over: step down until it fits
        keep = keep * 9 // 10
    return cut(keep)


def truncate_arguments(text: str, max_tokens: int, tokenizer: Tokenizer, total: int | None = None) -> str:
    """A tool call's JSON arguments within ``max_tokens``, still JSON of the same shape: its strings cut
    (``truncate_text``, each an equal share) and the whole encoded again. Cutting the encoded text spliced the
    marker into a string (invalid JSON, which Anthropic's format then sent as ``{"arguments": ...}``).
    Arguments that are not JSON are cut as text; JSON whose structure alone is too large becomes one marker."""
    total = tokenizer.count(text) if total is None else total
    if total <= max_tokens:
        return text
    try:
        value = _json.decode(text)
    except msgspec.DecodeError:
        return truncate_text(text, max_tokens, tokenizer, total)
    strings = _strings(value)
    frame = tokenizer.count(_encode(_with_strings(value, iter([""] * len(strings)))).decode())
    room = max_tokens - frame - len(strings)  # a token a string for what escaping the marker adds
    cap = _cap([tokenizer.count(s) for s in strings], room) if room > 0 else 0
    while cap > 0:
        cut = _encode(_with_strings(value, iter([truncate_text(s, cap, tokenizer) for s in strings]))).decode()
        if tokenizer.count(cut) <= max_tokens:
            return cut
        cap = cap * 9 // 10
    marker = _encode({"memkit": f"[... {total} tokens of arguments cut by memkit to fit the budget ...]"}).decode()
    return marker if tokenizer.count(marker) <= max_tokens else "{}"


_encode = msgspec.json.Encoder().encode


def _strings(value: Any) -> list[str]:
    """The string values of decoded JSON, depth first (object keys are structure, kept whole)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def _with_strings(value: Any, strings: Any) -> Any:
    """``value`` with its string values replaced, in ``_strings`` order, by the next of ``strings``."""
    if isinstance(value, str):
        return next(strings)
    if isinstance(value, dict):
        return {key: _with_strings(item, strings) for key, item in value.items()}
    if isinstance(value, list):
        return [_with_strings(item, strings) for item in value]
    return value


def _cap(sizes: list[int], room: int) -> int:
    """The largest c with sum(min(size, c)) <= room: what each text may keep when room is shared fairly."""
    low, high = 0, max(sizes, default=0)
    while low < high:
        middle = (low + high + 1) // 2
        if sum(min(size, middle) for size in sizes) <= room:
            low = middle
        else:
            high = middle - 1
    return low


def _fixed(turn: list[Message], tokenizer: Tokenizer) -> int:
    """What a turn costs that cutting texts cannot reduce: each message's and call's overhead and names."""
    return sum(MESSAGE_OVERHEAD + sum(MESSAGE_OVERHEAD + tokenizer.count(c.name) for c in m.tool_calls) for m in turn)


def _fewer_calls(turn: list[Message], limit: int, tokenizer: Tokenizer) -> list[Message]:
    """A tool exchange too wide for ``limit`` even with empty texts: its last calls go, with their results,
    and the assistant message says how many (the pairs that stay are whole)."""
    call, results = turn[0], turn[1:]
    kept = list(call.tool_calls)
    while (
        kept
        and _fixed([msgspec.structs.replace(call, tool_calls=tuple(kept)), *results[: len(kept)]], tokenizer) + 40
        > limit
    ):
        kept.pop()
    ids = {c.id for c in kept}
    note = f"[memkit: {len(call.tool_calls) - len(kept)} more parallel calls and their results are not shown]"
    head = msgspec.structs.replace(call, tool_calls=tuple(kept), content=f"{call.content}\n{note}".strip(), tokens=0)
    return [head, *(r for r in results if r.tool_call_id in ids)]


def _text_sizes(message: Message, tokenizer: Tokenizer) -> list[int]:
    """The tokens of the message's content, then of each call's arguments. A message without calls knows
    its content's count already (counting a 1 MB text again took a fifth of a second per render)."""
    if message.tokens and not message.tool_calls:
        return [message.tokens - MESSAGE_OVERHEAD]
    return [tokenizer.count(message.content), *(tokenizer.count(c.arguments) for c in message.tool_calls)]


def _fit_turn(turn: list[Message], limit: int, tokenizer: Tokenizer) -> list[Message]:
    """The turn within ``limit``: its texts (contents and call arguments) cut, the largest first, so that
    each keeps an equal share of what the overheads leave."""
    if sum(message_tokens(m, tokenizer) for m in turn) <= limit:
        return turn
    if turn[0].tool_calls and _fixed(turn, tokenizer) > limit // 2:
        turn = _fewer_calls(turn, limit // 2, tokenizer)
    texts = [(m.content, [c.arguments for c in m.tool_calls]) for m in turn]
    sizes = [size for m in turn for size in _text_sizes(m, tokenizer)]
    cap = _cap(sizes, max(limit - _fixed(turn, tokenizer), 0))
    fitted, at = [], 0
    for m, (content, arguments) in zip(turn, texts, strict=True):
        new_content = truncate_text(content, cap, tokenizer, sizes[at])
        calls = [msgspec.structs.replace(c, arguments=truncate_arguments(a, cap, tokenizer, sizes[at + 1 + i]))
                 for i, (c, a) in enumerate(zip(m.tool_calls, arguments, strict=True))]  # fmt: skip
        at += 1 + len(arguments)
        fitted.append(msgspec.structs.replace(m, content=new_content, tool_calls=tuple(calls), tokens=0))
    return fitted


def _fit_pinned(pinned: Sequence[str], limit: int, tokenizer: Tokenizer) -> list[str]:
    """The system messages as they are when they fit; else joined into one, cut in the middle with a marker
    (never one dropped without a word)."""
    if sum(tokenizer.count(text) + MESSAGE_OVERHEAD for text in pinned) <= limit:
        return list(pinned)
    joined = truncate_text("\n\n".join(pinned), limit - MESSAGE_OVERHEAD, tokenizer) if limit > MESSAGE_OVERHEAD else ""
    return [joined] if joined else []


def fit_window(
    pinned: Sequence[str], summary: str, messages: Sequence[Message], budget: int, tokenizer: Tokenizer
) -> Window:
    """What of the session to send within ``budget`` tokens (the rule in the module docstring)."""
    turns = [list(messages[t.start : t.end]) for t in split_turns(messages)]
    newest = turns.pop() if turns else []
    # Held back from the start, so that the marker naming left-out turns, and the user message Anthropic
    # needs before an assistant one, always fit.
    reserve = tokenizer.count(_CONTINUE) + 2 * MESSAGE_OVERHEAD
    if turns or summary:
        reserve += tokenizer.count(SUMMARY_HEADER + _omitted_note(10**6))
    room = budget - reserve
    newest_size = sum(message_tokens(m, tokenizer) for m in newest)
    pinned_limit = room - min(newest_size, room // 2)
    system = _fit_pinned(pinned, pinned_limit, tokenizer)
    room -= sum(tokenizer.count(text) + MESSAGE_OVERHEAD for text in system)
    newest = _fit_turn(newest, room, tokenizer) if newest else []
    room -= sum(message_tokens(m, tokenizer) for m in newest)
    return _add_older(system, summary, turns, newest, room=room, tokenizer=tokenizer)


def _add_older(
    system: list[str],
    summary: str,
    turns: list[list[Message]],
    newest: list[Message],
    *,
    room: int,
    tokenizer: Tokenizer,
) -> Window:
    summary_text = truncate_text(SUMMARY_HEADER + summary, room - MESSAGE_OVERHEAD, tokenizer) if summary else ""
    room -= tokenizer.count(summary_text) + MESSAGE_OVERHEAD if summary_text else 0
    kept: list[Message] = []
    omitted = 0
    for turn in reversed(turns):
        size = sum(message_tokens(m, tokenizer) for m in turn)
        if omitted == 0 and size <= room:
            kept[:0] = turn
            room -= size
        else:
            omitted += len(turn)
    if omitted:
        summary_text = (summary_text or SUMMARY_HEADER.rstrip(":\n")) + _omitted_note(omitted)
    if summary_text:
        system.append(summary_text)
    total = sum(tokenizer.count(t) + MESSAGE_OVERHEAD for t in system)
    total += sum(message_tokens(m, tokenizer) for m in kept + newest)
    return Window(system=system, messages=kept + newest, omitted=omitted, tokens=total)


def to_openai(window: Window) -> list[dict[str, Any]]:
    rendered: list[dict[str, Any]] = [{"role": "system", "content": text} for text in window.system]
    for m in window.messages:
        if m.role == "tool":
            rendered.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
            continue
        out: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.name and m.role == "user":
            out["name"] = m.name
        if m.tool_calls:
            out["content"] = m.content or None
            out["tool_calls"] = [_openai_call(c) for c in m.tool_calls]
        rendered.append(out)
    return rendered


def _openai_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def _arguments(text: str) -> Any:
    try:
        value = _json.decode(text)
    except msgspec.DecodeError:
        return {"arguments": text}  # Anthropic wants an object; keep what the model sent
    return value if isinstance(value, dict) else {"value": value}


def _blocks(m: Message) -> list[dict[str, Any]]:
    if m.role == "tool":
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content}
        return [block | {"is_error": True}] if m.is_error else [block]
    blocks: list[dict[str, Any]] = [{"type": "text", "text": m.content}] if m.content else []
    return blocks + [
        {"type": "tool_use", "id": c.id, "name": c.name, "input": _arguments(c.arguments)} for c in m.tool_calls
    ]


def to_anthropic(window: Window) -> AnthropicMessages:
    """Consecutive messages of one side merged (tool results are the user's side, first in their message)."""
    rendered = AnthropicMessages()
    rendered.system = "\n\n".join(window.system)
    for m in window.messages:
        role = "user" if m.role in ("user", "tool") else "assistant"
        blocks = _blocks(m)
        if rendered and rendered[-1]["role"] == role:
            rendered[-1]["content"].extend(blocks)
        else:
            rendered.append({"role": role, "content": blocks})
    if rendered and rendered[0]["role"] == "assistant":
        rendered.insert(0, {"role": "user", "content": [{"type": "text", "text": _CONTINUE}]})
    return rendered
