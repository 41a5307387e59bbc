"""Past episodes as prompt guidance: failures as "Avoid: ...", successes as "What worked: ...".

One line per episode, best match first, each whole or not at all: a cut lesson can say the opposite of
the lesson. Lines that say the same thing (one lesson learned twice) are given once. The text never
exceeds ``max_tokens`` as the given tokenizer counts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from memkit.layers.episodic._records import Episode, EpisodeHit
from memkit.tokens import Tokenizer

__all__ = ["HEADER", "episode_line", "render_lessons"]

HEADER: Final = "Lessons from similar past tasks:"
_TRIGGER_CHARS: Final = 160
_LESSON_CHARS: Final = 300
_ERROR_CHARS: Final = 120
_TOOLS_SHOWN: Final = 8


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _lessons(episode: Episode) -> str:
    return " ".join(_sentence(_clip(lesson, _LESSON_CHARS)) for lesson in episode.lessons)


def _sentence(text: str) -> str:
    return text if text[-1:] in ".!?…" else text + "."


def _what_failed(episode: Episode, task: str, lessons: str) -> str:
    """The failing action and its error, or else what went wrong in the task, with the feedback unless there
    are lessons (the heuristic's lessons hold the feedback already)."""
    failed = next((a for a in episode.actions if not a.ok), None)
    if failed is not None:
        said = f" with {_clip(failed.error, _ERROR_CHARS)!r}" if failed.error else ""
        return f"{failed.tool} failing{said} (task: {task!r})"
    word = "failed" if episode.outcome == "failure" else "only partly worked"
    feedback = f" (feedback: {_clip(episode.feedback, _ERROR_CHARS)})" if episode.feedback and not lessons else ""
    return f"what {word} in {task!r}{feedback}"


def episode_line(episode: Episode) -> str:
    task = _clip(episode.trigger, _TRIGGER_CHARS)
    lessons = _lessons(episode)
    if episode.outcome == "success":
        tools = list(dict.fromkeys(a.tool for a in episode.actions if a.ok))
        steps = " -> ".join(tools[:_TOOLS_SHOWN]) + (" -> ..." if len(tools) > _TOOLS_SHOWN else "")
        head = f"What worked: for {task!r}" + (f", {steps}" if steps else "")
        return f"- {_sentence(head)}" + (f" Lesson: {lessons}" if lessons else "")
    failed = next((a for a in episode.actions if not a.ok), None)
    if lessons and failed is not None and failed.tool in lessons:  # the lesson already names what failed
        return f"- Avoid: {lessons} (task: {task!r})"
    head = f"Avoid: {_what_failed(episode, task, lessons)}"
    return f"- {_sentence(head)}" + (f" Lesson: {lessons}" if lessons else "")


def render_lessons(hits: Sequence[EpisodeHit], max_tokens: int, tokenizer: Tokenizer) -> str:
    """The guidance block for ``hits`` within ``max_tokens``; "" when nothing (or not even one line) fits."""
    lines: list[str] = []
    used = tokenizer.count(HEADER)
    for line in dict.fromkeys(episode_line(hit.episode) for hit in hits):
        cost = tokenizer.count("\n" + line)
        if used + cost <= max_tokens:
            lines.append(line)
            used += cost
    # Counted piece by piece above; a tokenizer need not be additive, so the whole is checked too.
    while lines and tokenizer.count("\n".join([HEADER, *lines])) > max_tokens:
        lines.pop()
    return "\n".join([HEADER, *lines]) if lines else ""
