"""The short-term layer: sessions of conversation kept under a token budget."""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Callable
from typing import Any

import msgspec

from memkit._repr import short_repr
from memkit._validation import MAX_ID_CHARS, check_owner, check_text
from memkit.backend import Backend
from memkit.errors import ConfigurationError, ScopeError, SummarizerError, ValidationError
from memkit.layers.shortterm._extractive import ExtractiveSummarizer
from memkit.layers.shortterm._session import ShortTermSession
from memkit.layers.shortterm._state import session_key
from memkit.layers.shortterm._summarizers import Summarizer
from memkit.tokens import Tokenizer, TokenizerChoice, load_tokenizer, resolve_tokenizer

__all__ = ["ShortTermConfig", "ShortTermMemory"]

log = logging.getLogger("memkit")

_MIN_BUDGET = 256
"""Below this, the markers and the summary header would not leave room for a message."""


class ShortTermConfig(msgspec.Struct, frozen=True, kw_only=True):
    max_tokens: int = 8_000
    """The budget ``to_messages()`` always fits in (counted by ``tokenizer``)."""
    keep_last: int = 6
    """The newest turns always kept verbatim (a turn: one message, or a tool call with all its results)."""
    compact_at: float = 0.8
    """A fold starts in the background when the whole session passes this share of ``max_tokens``..."""
    fold_to: float = 0.5
    """...and folds the oldest turns until what is left (with a full summary) is under this share."""
    summary_tokens: int | None = None
    """The rolling summary's bound (default: a quarter of ``max_tokens``)."""
    summarizer: Any = None
    """A ``Summarizer``; default ``ExtractiveSummarizer()`` (no model). ``LLMSummarizer(llm)`` uses a model."""
    tokenizer: Any = "auto"
    """``"auto"`` (tiktoken when installed, else the estimate), ``"estimate"``, ``"tiktoken"``, or a ``Tokenizer``."""
    max_message_chars: int = 1_000_000
    summary_timeout_s: float = 120.0
    ttl_s: float | None = None
    """Forget a session this long after its last write (None: keep it)."""
    on_error: Callable[[SummarizerError], None] | None = None
    """Called when a background fold fails (it is also logged); the history stays as it was."""

    def __post_init__(self) -> None:
        _check_config(self)

    @property
    def summary_limit(self) -> int:
        return self.summary_tokens if self.summary_tokens is not None else self.max_tokens // 4


def _check_config(config: ShortTermConfig) -> None:
    def whole(value: object, what: str, low: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigurationError(f"ShortTermConfig.{what} must be an integer >= {low}, got {short_repr(value)}")

    whole(config.max_tokens, "max_tokens", _MIN_BUDGET)
    whole(config.keep_last, "keep_last", 1)
    whole(config.max_message_chars, "max_message_chars", 1)
    if config.summary_tokens is not None:
        whole(config.summary_tokens, "summary_tokens", 16)
        if config.summary_tokens >= config.max_tokens:
            raise ConfigurationError("ShortTermConfig.summary_tokens must be smaller than max_tokens")
    for name in ("compact_at", "fold_to"):
        share = getattr(config, name)
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
            raise ConfigurationError(
                f"ShortTermConfig.{name} must be a share of max_tokens in (0, 1], got {short_repr(share)}"
            )
    if config.fold_to > config.compact_at:
        raise ConfigurationError(
            "ShortTermConfig.fold_to must not exceed compact_at (a fold would start again at once)"
        )
    for name in ("summarizer", "tokenizer"):
        if isinstance(getattr(config, name), type):
            raise ConfigurationError(
                f"ShortTermConfig.{name} takes an instance, e.g. {getattr(config, name).__name__}()"
            )
    if config.summarizer is not None and not isinstance(config.summarizer, Summarizer):
        raise ConfigurationError(
            "ShortTermConfig.summarizer must have 'async summarize(previous, messages, *, max_tokens, tokenizer)'"
        )
    positive: tuple[tuple[str, object, bool], ...] = (
        ("summary_timeout_s", config.summary_timeout_s, True),
        ("ttl_s", config.ttl_s, False),
    )
    for name, value, may_be_inf in positive:
        if value is None and name == "ttl_s":
            continue
        good = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
        if not good or not isinstance(value, (int, float)) or (math.isinf(value) and not may_be_inf):
            raise ConfigurationError(
                f"ShortTermConfig.{name} must be a positive number of seconds, got {short_repr(value)}"
            )
    if config.on_error is not None and not callable(config.on_error):
        raise ConfigurationError("ShortTermConfig.on_error must be callable")
    resolve_tokenizer(config.tokenizer)  # a bad choice fails here, not at open


class ShortTermMemory:
    """``mem.short_term.session(session_id, user_id=..., agent_id=...)`` gives a ``ShortTermSession``."""

    name = "short_term"
    needs = frozenset({"kv"})

    def __init__(self, backend: Backend, config: ShortTermConfig | None = None) -> None:
        if config is not None and not isinstance(config, ShortTermConfig):
            raise ValidationError(f"short_term must be a ShortTermConfig or None, got {type(config).__name__}")
        self.backend = backend
        self.config = config or ShortTermConfig()
        self.summarizer: Summarizer = self.config.summarizer or ExtractiveSummarizer()
        self._choice: TokenizerChoice = self.config.tokenizer
        self.tokenizer: Tokenizer = resolve_tokenizer(self._choice)
        self._sessions: weakref.WeakValueDictionary[str, ShortTermSession] = weakref.WeakValueDictionary()
        self.running: set[ShortTermSession] = set()
        """Sessions folding in the background (held here so they are not collected mid-fold)."""

    async def setup(self) -> None:
        self.tokenizer = await load_tokenizer(self.tokenizer, fallback=self._choice == "auto")

    async def aclose(self) -> None:
        for session in list(self.running):
            await session._stop()

    def session(self, session_id: str, *, user_id: str | None = None, agent_id: str | None = None) -> ShortTermSession:
        """The session ``session_id`` of this user (and agent): the same arguments give the same session."""
        session_id = check_text(session_id, "session_id", MAX_ID_CHARS, error=ScopeError)
        user_id, agent_id = check_owner(user_id, agent_id)
        key = session_key(user_id, agent_id, session_id)
        found = self._sessions.get(key)
        if found is None:
            found = ShortTermSession(self, key, _label(session_id, user_id, agent_id))
            self._sessions[key] = found
        return found

    def report(self, label: str, exc: Exception) -> None:
        error = exc if isinstance(exc, SummarizerError) else SummarizerError(f"{type(exc).__name__}: {exc}")
        log.warning("memkit: folding short-term session %s failed, its history is kept: %s", label, error)
        if self.config.on_error is not None:
            try:
                self.config.on_error(error)
            except Exception:
                log.exception("memkit: ShortTermConfig.on_error raised")


def _label(session_id: str, user_id: str | None, agent_id: str | None) -> str:
    parts = [f"{session_id!r}"] + [f"{k}={v!r}" for k, v in (("user_id", user_id), ("agent_id", agent_id)) if v]
    return " ".join(parts)
