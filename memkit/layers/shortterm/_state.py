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
from memkit.layers.shortterm._render import message_tokens
from memkit.tokens import Tokenizer

__all__ = [
    "SESSION_NAMESPACE",
    "FoldPlan",
    "SessionSnapshot",
    "SessionState",
    "decode_state",
    "encode_state",
    "plan_fold",
    "session_key",
]

SESSION_NAMESPACE = "memkit.sessions"
_VERSION = 1


class _Wire(msgspec.Struct, array_like=True):
    """The stored form: each message already encoded, so a write re-encodes none of them."""

    version: int
    pinned: list[msgspec.Raw]
    summary: str
    summary_tokens: int
    messages: list[msgspec.Raw]
    folded: int
    next_seq: int
    writer: str
    epoch: str
    tokenizer: str


class SessionState(msgspec.Struct, kw_only=True):
    """A session in memory: its messages, and beside them each one's stored encoding (``*_raw``)."""

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
    pinned_raw: list[msgspec.Raw] = msgspec.field(default_factory=list)
    messages_raw: list[msgspec.Raw] = msgspec.field(default_factory=list)
    tokens: int = 0
    """What sending everything would cost (the compaction trigger compares it with the budget)."""
    epoch: str = ""
    """New each time the session starts afresh (first add, after ``clear``, ``restore``, expiry): a fold read
    from an earlier life of the session must not land on the new one, whose positions start again at 0."""
    tokenizer: str = ""
    """The tokenizer the stored counts are in; another one recounts them when reading."""

    def appended(self, new: Sequence[Message], *, renumber: bool = True) -> SessionState:
        """A copy with ``new`` added (numbered from ``next_seq`` unless told not to; system messages pinned)."""
        pinned, rest = list(self.pinned), list(self.messages)
        pinned_raw, rest_raw = list(self.pinned_raw), list(self.messages_raw)
        seq = self.next_seq
        for message in new:
            numbered = msgspec.structs.replace(message, seq=seq) if renumber else message
            raw = msgspec.Raw(_encoder.encode(numbered))
            if message.role == "system":
                pinned.append(numbered)
                pinned_raw.append(raw)
            else:
                rest.append(numbered)
                rest_raw.append(raw)
            seq += 1
        added = sum(m.tokens for m in new)
        return msgspec.structs.replace(self, pinned=pinned, messages=rest, pinned_raw=pinned_raw,
                                       messages_raw=rest_raw, next_seq=seq, tokens=self.tokens + added)  # fmt: skip

    def folded_into(self, count: int, summary: str, summary_tokens: int) -> SessionState:
        """A copy whose first ``count`` messages are replaced by ``summary``."""
        gone = sum(m.tokens for m in self.messages[:count])
        return msgspec.structs.replace(
            self, summary=summary, summary_tokens=summary_tokens, messages=self.messages[count:],
            messages_raw=self.messages_raw[count:], folded=self.folded + count,
            tokens=self.tokens - gone - self.summary_tokens + summary_tokens,
        )  # fmt: skip


class SessionSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A whole session as a value: ``msgspec.json.encode(snapshot)`` for a checkpoint, ``restore`` it later."""

    pinned: list[Message] = msgspec.field(default_factory=list)
    messages: list[Message] = msgspec.field(default_factory=list)
    summary: str = ""
    folded: int = 0


class FoldPlan(msgspec.Struct, frozen=True):
    epoch: str
    count: int
    """Fold ``messages[:count]``."""
    seqs: tuple[int, ...]
    previous_summary: str


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Wire)
_decode_message = msgspec.msgpack.Decoder(Message).decode


def encode_state(state: SessionState) -> bytes:
    return _encoder.encode(_Wire(_VERSION, state.pinned_raw, state.summary, state.summary_tokens,
                                 state.messages_raw, state.folded, state.next_seq, state.writer, state.epoch,
                                 state.tokenizer))  # fmt: skip


def decode_state(raw: bytes, where: str, tokenizer: Tokenizer) -> SessionState:
    """The stored session; its token counts redone when they were made by another tokenizer."""
    try:
        wire = _decoder.decode(raw)
        pinned = [_decode_message(m) for m in wire.pinned]
        messages = [_decode_message(m) for m in wire.messages]
    except msgspec.DecodeError as exc:
        raise CorruptDataError(
            f"the short-term session {where} holds data memkit cannot read ({exc}); nothing was changed; "
            "clear() it to start the session again"
        ) from exc
    if wire.version > _VERSION:
        raise CorruptDataError(
            f"the short-term session {where} was written by a newer memkit (format {wire.version}); upgrade memkit"
        )
    if wire.tokenizer != tokenizer.name:
        return _recounted(wire, pinned, messages, tokenizer)
    tokens = sum(m.tokens for m in pinned) + wire.summary_tokens + sum(m.tokens for m in messages)
    return SessionState(
        pinned=pinned, summary=wire.summary, summary_tokens=wire.summary_tokens, messages=messages,
        folded=wire.folded, next_seq=wire.next_seq, writer=wire.writer, pinned_raw=wire.pinned,
        messages_raw=wire.messages, tokens=tokens, epoch=wire.epoch, tokenizer=wire.tokenizer,
    )  # fmt: skip


def _recounted(wire: _Wire, pinned: list[Message], messages: list[Message], tokenizer: Tokenizer) -> SessionState:
    """Counts made by another tokenizer (another process's, or one that could not load) are not trusted."""
    summary_tokens = tokenizer.count(wire.summary)
    fresh = SessionState(summary=wire.summary, summary_tokens=summary_tokens, folded=wire.folded,
                         tokens=summary_tokens, epoch=wire.epoch, tokenizer=tokenizer.name)  # fmt: skip
    counted = [msgspec.structs.replace(m, tokens=message_tokens(msgspec.structs.replace(m, tokens=0), tokenizer))
               for m in [*pinned, *messages]]  # fmt: skip
    # The stored positions are kept (a fold in flight checks them).
    state = fresh.appended(counted, renumber=False)
    return msgspec.structs.replace(state, next_seq=wire.next_seq, writer=wire.writer)


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
    return FoldPlan(epoch=state.epoch, count=count, seqs=tuple(m.seq for m in folding), previous_summary=state.summary)
