"""A session's state: one blob in the backend's key-value face, written by compare-and-set.

One blob, not a record per message: folding swaps a summary in for a run of messages, and only a single
compare-and-set makes that atomic on every backend (the contract has no multi-record transaction). An
``add`` and a fold therefore never lose each other: whichever writes second sees the other's write and
applies itself again on top of it. Messages are numbered (``seq``), so a fold applied on top of another
writer's state checks the messages it summarised are still the first ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from memkit.errors import CorruptDataError
from memkit.layers._keys import key_of
from memkit.layers.shortterm._messages import Message, split_turns

__all__ = ["SESSION_NAMESPACE", "FoldPlan", "SessionState", "decode_state", "encode_state", "plan_fold", "session_key"]

SESSION_NAMESPACE = "memkit.sessions"
_VERSION = 1


class SessionState(msgspec.Struct, kw_only=True):
    version: int = _VERSION
    pinned: list[Message] = msgspec.field(default_factory=list)
    """System messages, never folded, always sent first."""
    summary: str = ""
    summary_tokens: int = 0
    messages: list[Message] = msgspec.field(default_factory=list)
    """What is not folded yet, in order."""
    folded: int = 0
    """How many messages the summary holds."""
    next_seq: int = 0
    writer: str = ""
    """Unique per write: two writers that computed the same state never both win its compare-and-set."""

    @property
    def tokens(self) -> int:
        """What sending everything would cost (the compaction trigger compares it with the budget)."""
        return sum(m.tokens for m in self.pinned) + self.summary_tokens + sum(m.tokens for m in self.messages)


class FoldPlan(msgspec.Struct, frozen=True):
    count: int
    """Fold ``messages[:count]``."""
    seqs: tuple[int, ...]
    previous_summary: str


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(SessionState)


def encode_state(state: SessionState) -> bytes:
    return _encoder.encode(state)


def decode_state(raw: bytes, where: str) -> SessionState:
    try:
        state = _decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise CorruptDataError(
            f"the short-term session {where} holds data memkit cannot read ({exc}); nothing was changed; "
            "clear() it to start the session again"
        ) from exc
    if state.version > _VERSION:
        raise CorruptDataError(
            f"the short-term session {where} was written by a newer memkit (format {state.version}); upgrade memkit"
        )
    return state


def session_key(user_id: str | None, agent_id: str | None, session_id: str) -> str:
    return key_of(user_id, agent_id, session_id)


def plan_fold(state: SessionState, *, keep_last: int, target_tokens: int) -> FoldPlan | None:
    """The oldest whole turns to fold so that what is left (with a full summary) is at most
    ``target_tokens``; never the last ``keep_last`` turns, never an open tool exchange."""
    turns = split_turns(state.messages)
    foldable = [t for t in turns[: max(len(turns) - keep_last, 0)] if not t.open]
    if not foldable:
        return None
    left = state.tokens
    count = 0
    for turn in foldable:
        if count and left <= target_tokens:
            break
        left -= sum(m.tokens for m in state.messages[turn.start : turn.end])
        count = turn.end
    folding: Sequence[Message] = state.messages[:count]
    return FoldPlan(count=count, seqs=tuple(m.seq for m in folding), previous_summary=state.summary)
