"""``mem.context()``: what every layer knows that bears on the next model call, gathered at once, one block.

The parts are read concurrently: long-term memories for the query, the task's working state, lessons from
similar past episodes, and the graph around the user (and the entities the query names). A part that fails
or runs past ``timeout_s`` contributes nothing and is reported in ``Context.errors``; the others still
answer. The budget is split by a fixed rule (``ContextConfig.shares``): each section gets its share, and
what a section leaves unused goes to the others in order of priority (memories, working state, lessons,
graph). Each section renders whole lines only, so nothing is cut mid-sentence.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

import anyio
import msgspec

from memkit._repr import short_repr
from memkit._validation import check_content, check_int, check_number, check_text
from memkit.embedders import CachedEmbedder
from memkit.errors import ConfigurationError, NotOpenError, ValidationError
from memkit.layers.longterm import RecallHit
from memkit.tokens import Tokenizer

if TYPE_CHECKING:
    from memkit._client import Memkit

__all__ = ["SECTIONS", "Context", "ContextConfig", "build_context"]

log = logging.getLogger("memkit")

SECTIONS: Final = ("memories", "working", "lessons", "graph")
"""In order of priority: a section's unused budget goes to the ones after it, then before it."""
_MAX_ENTITY_CHARS: Final = 10_000
"""The longest graph node name any GraphConfig allows (``max_name_chars`` is at most 10,000)."""
_NAMED: Final = re.compile(r"\b[A-Z][\w'-]+(?:\s+[A-Z][\w'-]+){0,3}")
_NOT_ENTITIES: Final = frozenset({
    "I", "I'm", "What", "Who", "Where", "When", "Why", "How", "Which", "Do", "Does", "Did", "Can", "Could", "Should",
    "Would", "Is", "Are", "The", "A", "An", "My",
})  # fmt: skip


class ContextConfig(msgspec.Struct, frozen=True, kw_only=True):
    max_memories: int = 5
    """Long-term memories in the block at most: more buries the relevant ones (and costs tokens)."""
    relative_min_score: float = 0.5
    """A memory must score at least this fraction of the best one's score to be included."""
    min_score: float | None = None
    """An absolute floor on the hybrid score (None: ``LongTermConfig.min_score``)."""
    shares: dict[str, float] = msgspec.field(
        default_factory=lambda: {"memories": 0.5, "working": 0.2, "lessons": 0.15, "graph": 0.15}
    )
    timeout_s: float = 2.0
    """Longest wait for any one part; past it the part is left out and reported. The first call of a process
    waits up to ``first_call_timeout_s`` instead."""
    first_call_timeout_s: float = 30.0
    """The wait per part until one call has had every part answer: a process's first recall loads the numba
    scoring kernels (about 0.5 s from their cache, seconds when a fresh install compiles them), which the
    2 s budget cut: an MCP server's first block came back empty."""
    graph_entity: str = "user"
    """The graph node the block describes: the speaker node ``graph.ingest`` writes by default."""
    max_query_entities: int = 3
    """Entities named in the query (capitalised words that resolve to graph nodes) described as well."""

    def __post_init__(self) -> None:
        _check_config(self)


def _check_config(config: ContextConfig) -> None:
    """Every field, at construction: a wrong type raised TypeError here, and a wrong value (``max_memories=2.5``,
    ``graph_entity=""``) was taken, then made ``context()`` drop its section without a word."""
    check_int(config.max_memories, "ContextConfig.max_memories", 1, 100)
    check_int(config.max_query_entities, "ContextConfig.max_query_entities", 0, 100)
    check_text(config.graph_entity, "ContextConfig.graph_entity", _MAX_ENTITY_CHARS)
    share = check_number(config.relative_min_score, "ContextConfig.relative_min_score")
    if not 0 <= share <= 1:
        raise ValidationError(f"ContextConfig.relative_min_score must be in 0..1, got {short_repr(share)}")
    if config.min_score is not None:
        check_number(config.min_score, "ContextConfig.min_score")
    for name in ("timeout_s", "first_call_timeout_s"):
        seconds = check_number(getattr(config, name), f"ContextConfig.{name}")
        if not 0 < seconds <= 600:
            raise ValidationError(f"ContextConfig.{name} must be a number of seconds in (0, 600], got {seconds}")
    shares = config.shares
    if not isinstance(shares, dict) or set(shares) != set(SECTIONS):
        raise ValidationError(f"ContextConfig.shares needs a number >= 0 for each of {', '.join(SECTIONS)}")
    if sum(check_number(v, f"ContextConfig.shares[{k!r}]", minimum=0) for k, v in shares.items()) <= 0:
        raise ValidationError("ContextConfig.shares must not all be 0")


class Context(msgspec.Struct, frozen=True, kw_only=True):
    """What ``mem.context()`` gathered: the block (``text``) and its parts, for users who build their own."""

    text: str
    """One system block within the budget; "" when no layer had anything to say."""
    tokens: int
    budget_tokens: int
    memories: list[RecallHit]
    """The memories in the block, best first, with the scores that ranked them."""
    sections: dict[str, str]
    """Each section's rendered text (as in ``text``); a section with nothing is absent."""
    errors: dict[str, str]
    """Sections that failed or timed out, with why; they contribute nothing."""

    def __str__(self) -> str:
        return self.text


_HEADERS: Final = {
    "memories": "What you know about the user:",
    "working": "",  # the task state writes its own header
    "lessons": "",  # lessons_for writes its own header
    "graph": "",  # so does the graph
}


async def build_context(
    mem: Memkit,
    *,
    user_id: str,
    query: str,
    session_id: str | None,
    task_id: str | None,
    budget_tokens: int,
    config: ContextConfig,
    tokenizer: Tokenizer,
) -> Context:
    check_text(user_id, "user_id")
    query = check_content(query, mem.long_term.config.max_content_chars, "query")
    budget = check_int(budget_tokens, "budget_tokens", 16, 1_000_000)
    raw: dict[str, Any] = {}
    errors: dict[str, str] = {}
    fetchers = _fetchers(mem, user_id=user_id, query=query, session_id=session_id, task_id=task_id, budget=budget,
                         config=config)  # fmt: skip

    timeout = config.timeout_s if _warm.done else max(config.timeout_s, config.first_call_timeout_s)

    async def run(name: str, fetch: Callable[[], Awaitable[Any]]) -> None:
        try:
            with anyio.fail_after(timeout):
                raw[name] = await fetch()
        except TimeoutError:
            errors[name] = f"timed out after {timeout} s"
        except (NotOpenError, ConfigurationError) as exc:  # a layer this backend cannot serve: say so
            errors[name] = str(exc)
        except Exception as exc:  # one failing layer must not take the others' answers with it
            log.warning("memkit: context: the %s section failed (%s: %s)", name, type(exc).__name__, exc)
            errors[name] = f"{type(exc).__name__}: {exc}"

    if isinstance(mem.embedder, CachedEmbedder):
        # Memories and lessons both embed the query; at once they would miss the cache together and pay
        # the model twice (one encode at a time: ~2x the latency). Embedded first, both find it cached.
        await run("query", lambda: mem.embedder.embed([query]))
    async with anyio.create_task_group() as group:
        for name, fetch in fetchers.items():
            group.start_soon(run, name, fetch)
    raw.pop("query", None)
    _warm.done = _warm.done or not errors
    return _assemble(raw, errors, budget, config, tokenizer)


class _Warm:
    done = False
    """Whether a call of this process had every part answer (the kernels are loaded, the model too)."""


_warm = _Warm()


def _fetchers(
    mem: Memkit,
    *,
    user_id: str,
    query: str,
    session_id: str | None,
    task_id: str | None,
    budget: int,
    config: ContextConfig,
) -> dict[str, Callable[[], Awaitable[Any]]]:
    async def memories() -> list[RecallHit]:
        hits = await mem.long_term.recall(query, user_id=user_id, k=config.max_memories, min_score=config.min_score)
        best = hits[0].score if hits else 0.0
        return [h for h in hits if h.score >= best * config.relative_min_score]

    async def lessons() -> str:
        return await mem.episodic.lessons_for(query, user_id=user_id, max_tokens=budget)

    async def graph() -> list[str]:
        blocks = [await mem.graph.to_context(config.graph_entity, user_id=user_id, max_tokens=budget)]
        for name in _named_in(query)[: config.max_query_entities]:
            if name.casefold() not in "\n".join(blocks).casefold():  # described already, around the user
                blocks.append(await mem.graph.to_context(name, user_id=user_id, max_tokens=budget))
        return [b for b in blocks if b]

    fetchers: dict[str, Callable[[], Awaitable[Any]]] = {"memories": memories, "lessons": lessons, "graph": graph}
    if task_id is not None or session_id is not None:
        task = mem.working.task(task_id or session_id or "", user_id=user_id)

        async def working() -> str:
            return await task.to_context(max_tokens=budget)

        fetchers["working"] = working
    return fetchers


def _named_in(query: str) -> list[str]:
    """Capitalised runs of words in the query (candidate entities), not sentence-initial question words."""
    return [m.group(0) for m in _NAMED.finditer(query) if m.group(0).split()[0] not in _NOT_ENTITIES]


def _lines(name: str, value: Any) -> list[str]:
    """A section's content as whole lines, most important first."""
    if name == "memories":
        return [f"- {hit.memory.content}" for hit in value]
    if name == "graph":
        return [line for block in value for line in block.splitlines()]
    return [line for line in str(value).splitlines() if line.strip()]


def _assemble(raw: dict[str, Any], errors: dict[str, str], budget: int, config: ContextConfig,
              tokenizer: Tokenizer) -> Context:  # fmt: skip
    lines = {name: _lines(name, raw[name]) for name in SECTIONS if raw.get(name)}
    costs = {name: [tokenizer.count(line) + 1 for line in found] for name, found in lines.items()}
    header_cost = {name: tokenizer.count(_HEADERS[name]) + 1 if _HEADERS[name] else 0 for name in lines}
    allowed = _split(budget, config, {n: header_cost[n] + sum(c) for n, c in costs.items()})
    sections: dict[str, str] = {}
    kept_memories: list[int] = []  # the positions of the memories in the block (a line per memory)
    for name in SECTIONS:
        if name not in lines:
            continue
        room = allowed.get(name, 0) - header_cost[name]
        kept = []
        for at, (line, cost) in enumerate(zip(lines[name], costs[name], strict=True)):
            if cost <= room:  # whole lines only; a shorter one further down may still fit
                kept.append(line)
                room -= cost
                if name == "memories":
                    kept_memories.append(at)
        if kept:
            sections[name] = "\n".join([_HEADERS[name], *kept] if _HEADERS[name] else kept)
    text = "\n\n".join(sections[n] for n in SECTIONS if n in sections)
    while text and tokenizer.count(text) > budget:  # counted piece by piece; a tokenizer need not be additive
        last = next(n for n in reversed(SECTIONS) if n in sections)
        del sections[last]
        text = "\n\n".join(sections[n] for n in SECTIONS if n in sections)
    memories = [raw["memories"][at] for at in kept_memories] if "memories" in sections else []
    return Context(text=text, tokens=tokenizer.count(text) if text else 0, budget_tokens=budget, memories=memories,
                   sections=sections, errors=errors)  # fmt: skip


def _split(budget: int, config: ContextConfig, needs: dict[str, int]) -> dict[str, int]:
    """Each section's tokens: its share of the budget (sections with nothing get none), then what sections
    leave unused handed to the ones that need more, in priority order."""
    total = sum(config.shares[n] for n in needs) or 1.0
    usable = budget - 2 * max(len(needs) - 1, 0)  # the blank lines between sections
    allowed = {n: min(needs[n], int(usable * config.shares[n] / total)) for n in needs}
    spare = usable - sum(allowed.values())
    for name in SECTIONS:
        if name in needs and spare > 0:
            more = min(spare, needs[name] - allowed[name])
            allowed[name] += more
            spare -= more
    return allowed
