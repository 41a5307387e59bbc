"""Lessons for an episode recorded without any: from a chat model when one is given, else from its errors.

The heuristic says what the record itself shows: which tool failed, with which error and arguments, what
changed in the arguments when a later call of the same tool worked, and the feedback on an outcome that was
not a success. The model is asked for a few short, imperative lessons (structured output, bounded in time
and tokens); whatever it does wrong, the episode is still recorded, without lessons, and a warning logged.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

import anyio
import msgspec

from memkit._validation import check_content
from memkit.errors import ValidationError
from memkit.layers.episodic._records import Action, Episode, EpisodicConfig

if TYPE_CHECKING:  # memkit.llm imports httpx: only a layer given a model pays for it
    from memkit.llm import LLM

__all__ = ["heuristic_lessons", "model_lessons"]

log = logging.getLogger("memkit")

_VALUE_CHARS: Final = 60
_ARGUMENTS_SHOWN: Final = 4
_ACTIONS_SHOWN: Final = 30
_LINE_CHARS: Final = 300
_json = msgspec.json.Encoder()


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _value(value: Any) -> str:
    """A string quoted, anything else as JSON; clipped either way."""
    if isinstance(value, str):
        return repr(_clip(value, _VALUE_CHARS))
    return _clip(_json.encode(value).decode(), _VALUE_CHARS)


def _arguments(arguments: Any, keys: list[str] | None = None) -> str:
    """``date='2020-01-01', to='PAR'`` for a dict (only ``keys`` when given), the JSON of anything else."""
    if not isinstance(arguments, dict):
        return "" if arguments in (None, [], "") else _value(arguments)
    shown = [k for k in (keys if keys is not None else list(arguments)) if k in arguments][:_ARGUMENTS_SHOWN]
    return ", ".join(f"{k}={_value(arguments[k])}" for k in shown)


def _changed(before: Any, after: Any) -> list[str]:
    """The argument names whose values differ between two calls of one tool (dicts only)."""
    if not (isinstance(before, dict) and isinstance(after, dict)):
        return []
    return [k for k in dict.fromkeys([*before, *after]) if before.get(k) != after.get(k)]


def _failed_lesson(failed: Action, fixed: Action | None) -> str:
    said = f" with {_clip(failed.error, 120)!r}" if failed.error else ""
    changed = _changed(failed.arguments, fixed.arguments) if fixed is not None else []
    if fixed is not None and changed:
        before, after = _arguments(failed.arguments, changed), _arguments(fixed.arguments, changed)
        return f"{failed.tool} failed{said} when called with {before or 'no arguments'}; it worked with {after}"
    arguments = _arguments(failed.arguments)
    called = f" when called with {arguments}" if arguments else ""
    return f"{failed.tool} failed{said}{called}: check its arguments before calling it again"


def heuristic_lessons(episode: Episode, config: EpisodicConfig) -> list[str]:
    """What the episode's own record teaches: each failed tool call (and its fix, if a later call worked),
    then the feedback on an outcome that was not a success."""
    lessons = []
    actions = episode.actions
    for at, action in enumerate(actions):
        if not action.ok:
            fixed = next((a for a in actions[at + 1 :] if a.tool == action.tool and a.ok), None)
            lessons.append(_failed_lesson(action, fixed))
    if episode.outcome != "success" and episode.feedback:
        lessons.append(f"Feedback on this {episode.outcome}: {episode.feedback}")
    return [_clip(lesson, config.max_text_chars) for lesson in dict.fromkeys(lessons)][: config.max_lessons]


class _Lessons(msgspec.Struct):
    """The model's answer: lessons for next time, possibly none."""

    lessons: list[str]


_INSTRUCTIONS = """\
You review one finished task of an AI agent and write the lessons it teaches for similar tasks later.
Each lesson is one short imperative sentence (at most 30 words) that would change what the agent does next \
time: what to avoid and why, or what worked and should be repeated. Name tools and values exactly as given.
Write at most {n} lessons, the most useful first; none if there is nothing to learn. Do not invent facts."""


def _describe(episode: Episode) -> str:
    """The episode as plain lines for the model, each bounded so a huge tool result cannot fill its context."""
    lines = [f"Task: {_clip(episode.trigger, 2_000)}", f"Outcome: {episode.outcome}"]
    if episode.feedback:
        lines.append(f"Feedback: {_clip(episode.feedback, 1_000)}")
    lines.append("Actions:" if episode.actions else "Actions: none")
    for n, action in enumerate(episode.actions[:_ACTIONS_SHOWN], 1):
        status = "ok" if action.ok else "FAILED"
        detail = action.error if not action.ok and action.error else action.result
        call = f"{action.tool}({_clip(_arguments(action.arguments), _LINE_CHARS)})"
        lines.append(f"{n}. {call} -> {status}" + (f": {_clip(detail, _LINE_CHARS)}" if detail else ""))
    if len(episode.actions) > _ACTIONS_SHOWN:
        lines.append(f"... and {len(episode.actions) - _ACTIONS_SHOWN} more actions")
    return "\n".join(lines)


async def model_lessons(llm: LLM, episode: Episode, config: EpisodicConfig) -> list[str] | None:
    """The model's lessons for ``episode`` (checked, clipped, at most ``max_lessons``); None when the model
    failed, timed out or answered with something unusable (logged, never raised: the episode matters more)."""
    prompt = [
        {"role": "system", "content": _INSTRUCTIONS.format(n=config.max_lessons)},
        {"role": "user", "content": _describe(episode)},
    ]
    try:
        with anyio.fail_after(config.llm_timeout_s):
            answer = await llm.structured(prompt, _Lessons, max_tokens=config.lesson_max_tokens)
        if not isinstance(answer, _Lessons):
            raise TypeError(f"structured() returned a {type(answer).__name__}, not the lessons asked for")
    except Exception as exc:  # cancellation is a BaseException and goes through
        log.warning("memkit: episodic: the model could not derive lessons (%s: %s); the episode is recorded "
                    "without them", type(exc).__name__, _clip(str(exc), 300))  # fmt: skip
        return None
    return _usable(answer.lessons, config)


def _usable(lessons: list[str], config: EpisodicConfig) -> list[str]:
    kept = []
    for lesson in lessons:
        try:
            text = check_content(lesson, 1_000_000, "lesson")
        except ValidationError:  # empty, NUL, lone surrogates: not worth failing the episode for
            continue
        kept.append(_clip(text, config.max_text_chars))
    return list(dict.fromkeys(kept))[: config.max_lessons]
