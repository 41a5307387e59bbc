"""Checks of an episode before anything is written: each bad field raises an error naming it.

The rules are the rest of memkit's (``memkit._validation``): text is valid Unicode without NUL and within a
limit, numbers are finite, datetimes are aware, metadata is JSON-like. An episode is checked whole, so a
bad last action means nothing of it is written.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

from memkit._repr import short_repr
from memkit._validation import check_content, check_importance, check_metadata, check_moment, check_text
from memkit.errors import ValidationError
from memkit.layers.episodic._records import OUTCOMES, Action, Episode, EpisodicConfig

__all__ = ["check_episode", "check_outcomes", "check_situation", "check_tags"]

MAX_TAGS = 32
MAX_TAG_CHARS = 128
MAX_TOOL_CHARS = 256
MAX_LESSONS = 50


def check_episode(episode: object, config: EpisodicConfig, now: datetime, what: str = "episode") -> Episode:
    """The episode as it will be stored: lists for sequences, times filled in, arguments as JSON values."""
    if not isinstance(episode, Episode):
        raise ValidationError(f"{what} must be a memkit Episode, got {type(episode).__name__}")
    if episode.id is not None or episode.scope is not None:
        raise ValidationError(
            f"{what} already has an id or a scope (it was recorded as {episode.id!r}); record() assigns them: "
            "record a new Episode, or msgspec.structs.replace(episode, id=None, scope=None) to copy it"
        )
    trigger = check_content(episode.trigger, config.max_trigger_chars, f"{what}.trigger")
    outcome = check_outcomes(episode.outcome, f"{what}.outcome", single=True)[0]
    actions = [_check_action(a, config, f"{what}.actions[{i}]") for i, a in enumerate(_items(episode.actions,
               f"{what}.actions", config.max_actions))]  # fmt: skip
    feedback = _optional_text(episode.feedback, config.max_text_chars, f"{what}.feedback")
    lessons = [check_content(lesson, config.max_text_chars, f"{what}.lessons[{i}]").strip()
               for i, lesson in enumerate(_items(episode.lessons, f"{what}.lessons", MAX_LESSONS))]  # fmt: skip
    ended = now if episode.ended_at is None else check_moment(episode.ended_at, f"{what}.ended_at")
    started = ended if episode.started_at is None else check_moment(episode.started_at, f"{what}.started_at")
    if ended < started:
        raise ValidationError(f"{what} ended ({ended.isoformat()}) before it started ({started.isoformat()})")
    importance = None if episode.importance is None else check_importance(episode.importance)
    return msgspec.structs.replace(
        episode, trigger=trigger, outcome=outcome, actions=actions, feedback=feedback,
        lessons=list(dict.fromkeys(lessons)), started_at=started, ended_at=ended, importance=importance,
        tags=check_tags(episode.tags, f"{what}.tags", empty_ok=True), metadata=check_metadata(episode.metadata),
        lessons_source="caller" if lessons else None,
    )  # fmt: skip


def _items(value: object, what: str, limit: int) -> Sequence[Any]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ValidationError(f"{what} must be a list, got {type(value).__name__}")
    if len(value) > limit:
        raise ValidationError(f"{what} has {len(value)} items; the limit is {limit}")
    return value


def _optional_text(value: object, max_chars: int, what: str) -> str | None:
    return None if value is None else check_content(value, max_chars, what)


def _check_action(action: object, config: EpisodicConfig, what: str) -> Action:
    if not isinstance(action, Action):
        raise ValidationError(f"{what} must be a memkit Action, got {type(action).__name__}")
    tool = check_text(action.tool, f"{what}.tool", MAX_TOOL_CHARS)
    if not isinstance(action.ok, bool):
        raise ValidationError(f"{what}.ok must be True or False, got {short_repr(action.ok)}")
    latency = action.latency_s
    if latency is not None and (
        isinstance(latency, bool) or not isinstance(latency, int | float) or not math.isfinite(latency) or latency < 0
    ):
        raise ValidationError(
            f"{what}.latency_s must be a finite number of seconds >= 0 or None, got {short_repr(latency)}"
        )
    try:
        arguments = msgspec.to_builtins(action.arguments)
    except (TypeError, msgspec.EncodeError) as exc:
        raise ValidationError(f"{what}.arguments cannot be encoded: {exc}") from exc
    check_metadata({"arguments": arguments}, what)  # JSON values only: finite numbers, valid text, 64 KiB
    return Action(
        tool=tool, arguments=arguments, ok=action.ok, latency_s=None if latency is None else float(latency),
        result=_optional_text(action.result, config.max_text_chars, f"{what}.result"),
        error=_optional_text(action.error, config.max_text_chars, f"{what}.error"),
    )  # fmt: skip


def check_outcomes(value: object, what: str = "outcome", *, single: bool = False) -> list[str]:
    """One outcome (or, unless ``single``, a list of them: any of them)."""
    values = [value] if single or isinstance(value, str) else value
    if not isinstance(values, list | tuple | set | frozenset) or not values:
        raise ValidationError(
            f"{what} must be one of {', '.join(OUTCOMES)} (or a list of them), got {short_repr(value)}"
        )
    for item in values:
        if not isinstance(item, str) or item not in OUTCOMES:
            raise ValidationError(f"{what} must be one of {', '.join(OUTCOMES)}, got {short_repr(item)}")
    return sorted(set(values))


def check_tags(value: object, what: str = "tags", *, empty_ok: bool = False) -> list[str]:
    """Tags: short texts, in order, duplicates removed. As a filter (``empty_ok=False``) at least one."""
    if isinstance(value, set | frozenset):
        value = sorted(value, key=str)
    tags = _items(value, what, MAX_TAGS)
    if not tags and not empty_ok:
        raise ValidationError(f"{what} must name at least one tag (None means any)")
    checked = [check_text(tag, f"{what}[{i}]", MAX_TAG_CHARS) for i, tag in enumerate(tags)]
    return list(dict.fromkeys(checked))


def check_situation(value: object, config: EpisodicConfig) -> str:
    """The situation a search is about: text like a trigger."""
    return check_content(value, config.max_trigger_chars, "situation")
