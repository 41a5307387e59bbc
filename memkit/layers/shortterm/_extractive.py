"""Summarising without a model: keep the sentences that carry something, drop the rest.

Each sentence of the folded turns is scored by what it carries: a decision ("let's go with", "I'll book"),
a preference ("I prefer", "I hate"), a number, a name, an open question; a tool result is always kept
(condensed). Small talk scores nothing and goes. The new summary is the previous one's lines plus the new
lines, oldest first, and never a line the summary already holds (nor a near-copy of one). When it grows
past ``max_tokens``, the lowest-scoring lines go first, oldest first among equals.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

import anyio.lowlevel
import msgspec

from memkit.layers.shortterm._messages import Message
from memkit.tokens import Tokenizer

__all__ = ["ExtractiveSummarizer"]

_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
_DECISION = re.compile(
    r"\b(decid\w*|decision|agreed|let'?s|going with|go with|chose|chosen|picked|settled on|the plan is|confirm\w*"
    r"|book\w*|switch\w* to|instead|cancel\w*|must|need to|deadline|approved?)\b",
    re.IGNORECASE,
)
_PREFERENCE = re.compile(
    r"\b(prefer\w*|like|likes|love\w*|hate\w*|dislike\w*|favou?rite|want\w*|wish|rather|allergic|can'?t stand"
    r"|always|never|don'?t|avoid\w*|enjoy\w*)\b",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"\d")
_NAME = re.compile(r"(?<=[^.!?]\s)[A-Z][a-z]+")
_NOT_NAMES = frozenset({"I", "I'm", "I'll", "I've", "I'd", "OK", "Ok"})
_WORDS = re.compile(r"[a-z0-9]+")
_TOOL_CHARS = 300
_LINE_CHARS = 400
_NEAR_COPY = 0.8
_DIGITS = re.compile(r"\d+(?:[.,:]\d+)*")
_REPEAT_WEIGHT = 0.2
_SLICE = 16


class _Line(msgspec.Struct, gc=False):
    text: str
    score: float
    order: int


def _score(sentence: str) -> float:
    score = 2.0 * bool(_DECISION.search(sentence)) + 2.0 * bool(_PREFERENCE.search(sentence))
    score += 1.5 * bool(_NUMBER.search(sentence))
    score += 1.5 * any(name not in _NOT_NAMES for name in _NAME.findall(sentence))
    score += 0.5 * sentence.rstrip().endswith("?")  # an open question, worth keeping only with more to it
    return score if score >= 1.0 else 0.0


def _condense(text: str, limit: int) -> str:
    """One line of at most ``limit`` characters; a longer one keeps its start and its end (where a
    sentence's point often is)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    head = (limit - 5) * 2 // 3
    return f"{text[:head]} ... {text[len(text) - (limit - 5 - head) :]}"


def _words(text: str) -> frozenset[str]:
    return frozenset(_WORDS.findall(text.lower()))


def _near_copy(words: frozenset[str], seen: list[frozenset[str]]) -> int | None:
    """The index of a line saying mostly the same (no number the other lacks: "item 9" is not "item 0")."""
    numbers = {w for w in words if w[0].isdigit()}
    for at, other in enumerate(seen):
        if numbers <= other and len(words & other) / max(len(words | other), 1) >= _NEAR_COPY:
            return at
    return None


def _new_lines(messages: Sequence[Message], context: Sequence[Message]) -> list[tuple[str, float]]:
    """Candidate lines of ``messages`` (tool names looked up in ``context``, which holds their calls)."""
    names = {call.id: (call.name, call.arguments) for m in context for call in m.tool_calls}
    lines: list[tuple[str, float]] = []
    for m in messages:
        if m.role == "tool":
            name, arguments = names.get(m.tool_call_id or "", (m.name or "tool", ""))
            verb = "failed" if m.is_error else "->"
            lines.append((f"Tool {name}({_condense(arguments, 80)}) {verb} {_condense(m.content, _TOOL_CHARS)}", 5.0))
            continue
        speaker = m.name or m.role.capitalize()
        for sentence in _SENTENCES.split(m.content):
            score = _score(sentence)
            if score > 0:
                lines.append((f"{speaker}: {_condense(sentence, _LINE_CHARS)}", score))
    return lines


def _line_score(line: str) -> float:
    """A summary line's score again: its sentence's, without the ``Speaker: `` in front."""
    if line.startswith("Tool "):
        return 5.0
    return _score(line.split(": ", 1)[1] if ": " in line else line)


class ExtractiveSummarizer:
    """Offline folding: the sentences that carry decisions, preferences, numbers, names, open questions
    and tool results, within the bound, never repeating the previous summary."""

    async def summarize(
        self, previous: str, messages: Sequence[Message], *, max_tokens: int, tokenizer: Tokenizer
    ) -> str:
        # CPU work on the event loop, in slices with a checkpoint between them, so the agent's loop is never
        # held for long. (A worker thread would not help: it holds the GIL against every add meanwhile.)
        old = [line[2:] for line in previous.splitlines() if line.startswith("- ")]
        lines = [_Line(text, _line_score(text), i) for i, text in enumerate(old)]
        seen = [_words(line.text) for line in lines]
        order = itertools.count(len(lines))
        for start in range(0, len(messages), _SLICE):
            await anyio.lowlevel.checkpoint()
            for text, score in _new_lines(messages[start : start + _SLICE], messages):
                words = _words(text)
                copy = _near_copy(words, seen)
                if copy is not None:  # said again, maybe changed ("aisle" -> "window", "do" -> "do not"):
                    del lines[copy], seen[copy]  # the newer wording replaces the older one
                seen.append(words)
                lines.append(_Line(text, score, next(order)))
        sizes: dict[int, int] = {}
        for start in range(0, len(lines), _SLICE * 4):
            await anyio.lowlevel.checkpoint()
            sizes |= {id(line): tokenizer.count(f"- {line.text}\n") for line in lines[start : start + _SLICE * 4]}
        if not lines:  # nothing worth keeping: the fold still goes through (else it is retried forever)
            return previous.strip() or f"- ({len(messages)} earlier messages held nothing to keep)"
        return _within(lines, sizes, max_tokens)


def _shape(text: str) -> str:
    """The line with its numbers masked: a search run 40 times gives 40 lines of one shape."""
    return _DIGITS.sub("#", text.lower())


def _within(lines: list[_Line], sizes: dict[int, int], max_tokens: int) -> str:
    """The lines in order, the weakest (then oldest) dropped until the summary fits. A line repeating the
    shape of a newer one ("3 results, the first at 45 euros" before "4 results, the first at 61 euros") counts
    a fifth of its score: of a run of look-alike results the newest is the one worth keeping."""
    total = sum(sizes.values())
    if total <= max_tokens:
        return "\n".join(f"- {line.text}" for line in lines)
    newest: dict[str, int] = {}
    for line in lines:
        newest[_shape(line.text)] = line.order
    weight = {id(x): x.score * (1.0 if newest[_shape(x.text)] == x.order else _REPEAT_WEIGHT) for x in lines}
    dropped: set[int] = set()
    for line in sorted(lines, key=lambda x: (weight[id(x)], x.order)):
        if total <= max_tokens:
            break
        dropped.add(id(line))
        total -= sizes[id(line)]
    kept = [f"- {line.text}" for line in lines if id(line) not in dropped]
    if not kept:  # every line alone is over the bound: the strongest one, cut to it
        best = max(lines, key=lambda x: (weight[id(x)], x.order))
        share = len(best.text) * max_tokens * 8 // (10 * max(sizes[id(best)], 1))
        kept = [f"- {best.text[: max(share - 6, 1)]} ..."]
    return "\n".join(kept)
