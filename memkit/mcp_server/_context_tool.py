"""The MCP ``context`` tool: the facade's rendered block (``mem.context()``), ready to put in a prompt.

A separate module from ``_tools.py`` (one tool per layer there); it registers with the same ``@tool`` and
acts for the user the scoping rule gives, so the block never holds another user's memories, state,
lessons or graph. The block needs long-term memory at least: a store without it has no ``context`` tool.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from typing_extensions import TypedDict  # pydantic reads TypedDicts from typing_extensions on 3.11

from memkit._context import ContextConfig
from memkit.mcp_server._registry import App, tool
from memkit.mcp_server._tools import UserId

__all__: list[str] = []

_CONFIG = ContextConfig(timeout_s=10.0)
"""The facade's defaults but a longer wait per part (2 s there). A fresh server's first reads pay one-off
costs (the scoring kernels compiled on first use, ~2-3 s on a loaded machine; the embedding model loading)
and a part timed out is silently missing from the block; an MCP client waits tens of seconds for a tool."""


class ContextOut(TypedDict):
    text: str
    tokens: int
    budget_tokens: int
    sections: dict[str, str]
    memory_ids: list[str]
    errors: dict[str, str]


@tool(title="Context for the next reply", layer="long_term", read_only=True)
async def context(
    app: App,
    *,
    query: Annotated[str, Field(description="The user's latest message or the question at hand.")],
    task_id: Annotated[str | None, Field(description="Include this task's working state (optional).")] = None,
    session_id: Annotated[
        str | None, Field(description="The conversation; its working state is included when task_id is omitted.")
    ] = None,
    budget_tokens: Annotated[int, Field(description="Most tokens the block may take (16..1000000).")] = 1000,
    user_id: UserId = None,
) -> ContextOut:
    """Everything memkit knows that bears on the query, as one block to put in the system prompt: the
    user's most relevant memories, the task's working state, lessons from similar past tasks and what the
    knowledge graph says around the user, within budget_tokens (whole lines only). text is "" when nothing
    is known; sections holds each part's text; errors names parts that failed or timed out (left out)."""
    found = await app.mem.context(user_id=app.scoping.user(user_id), query=query, task_id=task_id,
                                  session_id=session_id, budget_tokens=budget_tokens, config=_CONFIG)  # fmt: skip
    return ContextOut(text=found.text, tokens=found.tokens, budget_tokens=found.budget_tokens,
                      sections=dict(found.sections), memory_ids=[h.memory.id for h in found.memories],
                      errors=dict(found.errors))  # fmt: skip
