"""What an agent resumes with after a crash: its conversation, its task state, its own state, its turn."""

from __future__ import annotations

from typing import Any

import msgspec

from memkit._repr import short_repr
from memkit.errors import ValidationError
from memkit.layers.shortterm import SessionSnapshot, ShortTermSession
from memkit.layers.working import TaskState, WorkingItem

__all__ = ["AgentState", "capture", "resume"]


class AgentState(msgspec.Struct, frozen=True, kw_only=True):
    """One checkpoint of an agent. Fields may be added in later versions (with defaults), never renamed:
    a checkpoint saved now keeps loading."""

    session: SessionSnapshot | None = None
    """The short-term conversation (None: not captured)."""
    working: list[WorkingItem] | None = None
    """The working-memory task's entries (None: not captured)."""
    state: Any = None
    """The caller's own value (a Struct, a dataclass, a dict...); it loads as plain msgspec builtins
    (dicts, lists) unless converted, e.g. ``msgspec.convert(agent.state, MyState)``."""
    turn: int = 0


async def capture(
    session: ShortTermSession | None = None, task: TaskState | None = None, state: object = None, turn: int = 0
) -> AgentState:
    """An ``AgentState`` of the layers given (each read once; they are not frozen together)."""
    if session is not None and not isinstance(session, ShortTermSession):
        raise ValidationError(
            f"session must be a ShortTermSession (mem.short_term.session(...)), got {short_repr(session)}"
        )
    if task is not None and not isinstance(task, TaskState):
        raise ValidationError(f"task must be a TaskState (mem.working.task(...)), got {short_repr(task)}")
    if isinstance(turn, bool) or not isinstance(turn, int):
        raise ValidationError(f"turn must be an integer, got {short_repr(turn)}")
    return AgentState(
        session=None if session is None else await session.snapshot(),
        working=None if task is None else await task.snapshot(),
        state=state,
        turn=turn,
    )


async def resume(agent: AgentState, session: ShortTermSession | None = None, task: TaskState | None = None) -> None:
    """Put the captured layers back: ``session`` becomes the captured conversation, ``task`` holds exactly
    the captured entries. A layer given that the checkpoint did not capture is refused (before either layer
    is changed), not silently left as it was."""
    if not isinstance(agent, AgentState):
        raise ValidationError(f"resume takes an AgentState (load it with type=AgentState), got {type(agent).__name__}")
    if session is not None and agent.session is None:
        raise ValidationError("the AgentState holds no short-term session (captured without one); pass session=None")
    if task is not None and agent.working is None:
        raise ValidationError("the AgentState holds no working-memory task (captured without one); pass task=None")
    if session is not None and agent.session is not None:
        await session.restore(agent.session)
    if task is not None and agent.working is not None:
        await task.restore(agent.working)
