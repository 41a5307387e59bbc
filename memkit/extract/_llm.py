"""Facts and reconciliation by a chat model: structured output through ``memkit.llm``, bounded and inspectable.

Extraction is one call per turn, or per batch of turns (``extract_many``); reconciliation is one more call for
a batch's facts against the memories recalled for them, and only when some fact has any. The budget,
``max_calls_per_turn``, is 2 (extract, reconcile) or 1 (extract; reconcile by the rules). Every prompt can be
built without calling (``extraction_messages``, ``reconcile_messages``); an extraction carries the prompt it
sent, a decision the model's reason. Whatever goes wrong (timeout, refusal, invalid JSON, a budget spent),
the offline extractor and the rules answer instead, and the event says so: a turn is never lost to a model.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import anyio
import msgspec

from memkit.extract._heuristic import HeuristicFactExtractor, message_text, read_slot
from memkit.extract._reconcile import HeuristicReconciler, ReconcileConfig
from memkit.extract._records import ACTIONS, FACT_KINDS, Decision, Extraction, Fact, FactKind, ObservedTurn
from memkit.layers.longterm import RecallHit

if TYPE_CHECKING:  # memkit.llm's clients import httpx: only a model's user pays for it
    from memkit.llm import LLM

__all__ = ["LLMExtractionConfig", "LLMFactExtractor"]

log = logging.getLogger("memkit")
_MEMORY_KIND: Final = {"preference": "preference", "dislike": "preference", "plan": "plan", "decision": "decision"}


class LLMExtractionConfig(msgspec.Struct, frozen=True, kw_only=True):
    max_calls_per_turn: int = 2
    """Model calls per turn, or per batch of turns: 2 extracts and reconciles, 1 extracts only (the rules
    reconcile). A reconciliation with no similar memory to weigh makes no call."""
    max_facts_per_turn: int = 10
    timeout_s: float = 30.0
    extract_max_tokens: int = 1_000
    reconcile_max_tokens: int = 1_000
    max_message_chars: int = 4_000
    """Each message is clipped to this in the prompt (a pasted document does not fill the model's context)."""
    user_name: str | None = None
    """How facts name the user when a message has no ``name`` (default "the user")."""
    fallback: bool = True
    """Use the offline extractor and rules when the model fails (else the turn yields no fact, with a note)."""

    def __post_init__(self) -> None:
        if self.max_calls_per_turn not in (1, 2):
            raise ValueError("LLMExtractionConfig.max_calls_per_turn must be 1 or 2")


class _ModelFact(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    kind: str = "fact"
    importance: float = 0.5
    message: int = 0


class _ModelFacts(msgspec.Struct, frozen=True, kw_only=True):
    facts: list[_ModelFact] = msgspec.field(default_factory=list)


class _ModelDecision(msgspec.Struct, frozen=True, kw_only=True):
    fact: int
    action: str
    target: str | None = None
    text: str | None = None
    reason: str = ""


class _ModelDecisions(msgspec.Struct, frozen=True, kw_only=True):
    decisions: list[_ModelDecision] = msgspec.field(default_factory=list)


_EXTRACT: Final = """\
You pick out what is worth remembering about the user from a finished conversation turn between a user and \
an AI assistant, for the assistant's long-term memory. The messages are numbered [n].
Keep: the user's preferences and dislikes; facts about the user and the people, pets, places and \
organisations in their life (names, relations, work, home, health, possessions, what they did); their plans \
and decisions; anything they ask to be remembered; corrections of what they said before. Leave out: \
greetings, thanks, filler, questions and requests to the assistant, the assistant's own suggestions unless \
the user accepted them, and anything guessed.
Each fact is one standalone sentence in the third person that names the user as "{user}" (for example \
"{user_cap}'s sister Bea lives in Porto"), understandable without the conversation. kind is one of: \
preference, dislike, fact, plan, decision, remember, correction. importance is 0 to 1 (0.9 for an explicit \
request to remember, health and allergies, names of people close to the user; 0.3 for passing details). \
message is the [n] of the message it comes from. At most {limit} facts; none if nothing is worth keeping.
Answer with JSON: {{"facts": [{{"text": "...", "kind": "...", "importance": 0.5, "message": 0}}]}}"""

_RECONCILE: Final = """\
You keep one user's long-term memory consistent. Each new fact comes with the existing memories most similar \
to it. Decide one action per fact:
ADD: new information that no existing memory holds.
UPDATE: an existing memory says the same thing less completely; text is the merged sentence keeping all that \
is still true; target is that memory.
SUPERSEDE: the fact replaces or contradicts an existing memory (the user moved, changed jobs, changed their \
mind, corrected themselves); target is the memory it replaces (it is kept as history).
NOOP: an existing memory already says it; target is that memory.
Targets are the handles shown: m1, m2, ... for memories, or f0, f1, ... for an earlier fact of this list. \
Give a short reason for each decision.
Answer with JSON: {"decisions": [{"fact": 0, "action": "ADD", "target": null, "text": null, "reason": "..."}]}"""


class LLMFactExtractor:
    """Facts with kind and importance from a chat model, reconciled by it against the user's memories."""

    batched = True
    """``FactWriter`` reconciles a batch's facts in one call (earlier facts of the batch can be targets)."""

    def __init__(
        self,
        llm: LLM,
        config: LLMExtractionConfig | None = None,
        *,
        fallback: HeuristicFactExtractor | None = None,
        rules: ReconcileConfig | None = None,
    ) -> None:
        self.llm = llm
        self.config = config or LLMExtractionConfig()
        self.fallback = fallback or HeuristicFactExtractor()
        self.rules = HeuristicReconciler(rules)

    @property
    def name(self) -> str:
        return f"model:{self.llm.model_id}"

    # -- extraction -----------------------------------------------------------------------------------------------
    def extraction_messages(self, turns: Sequence[ObservedTurn]) -> list[dict[str, Any]]:
        """The prompt ``extract_many(turns)`` sends (messages numbered across the turns)."""
        user = self._user(turns)
        limit = self.config.max_facts_per_turn * len(turns)
        system = _EXTRACT.format(user=user, user_cap=user[:1].upper() + user[1:], limit=limit)
        lines, number = [], 0
        for at, turn in enumerate(turns):
            if len(turns) > 1:
                lines.append(f"Turn {at + 1}" + (f" ({turn.at:%Y-%m-%d})" if turn.at else "") + ":")
            for message in turn.messages:
                lines.append(f"[{number}] {self._render(message)}")
                number += 1
        return [{"role": "system", "content": system}, {"role": "user", "content": "\n".join(lines)}]

    def _user(self, turns: Sequence[ObservedTurn]) -> str:
        """How facts name the user: the configured name, else the first user message's ``name``."""
        named = (str(m["name"]) for t in turns for m in t.messages
                 if m.get("role") == "user" and isinstance(m.get("name"), str))  # fmt: skip
        return self.config.user_name or next(named, "the user")

    def _render(self, message: Any) -> str:
        role = str(message.get("role", "user"))
        who = f"{role} ({message['name']})" if isinstance(message.get("name"), str) else role
        text = message_text(message)
        calls = message.get("tool_calls") or []
        named = [str(c.get("function", {}).get("name", "?")) for c in calls if isinstance(c, dict)]
        if named:
            text = (text + " " if text else "") + f"[calls {', '.join(named)}]"
        limit = self.config.max_message_chars
        return f"{who}: {text if len(text) <= limit else text[: limit - 1] + '…'}"

    async def extract(self, turn: ObservedTurn) -> Extraction:
        [extraction] = await self.extract_many([turn])
        return extraction

    async def extract_many(self, turns: Sequence[ObservedTurn]) -> list[Extraction]:
        """One model call for every turn; each fact goes back to the turn its message belongs to."""
        prompt = self.extraction_messages(turns)
        try:
            with anyio.fail_after(self.config.timeout_s):
                answer = await self.llm.structured(prompt, _ModelFacts, max_tokens=self.config.extract_max_tokens)
            if not isinstance(answer, _ModelFacts):
                raise TypeError(f"structured() returned a {type(answer).__name__}, not the facts asked for")
        except Exception as exc:  # cancellation is a BaseException and goes through
            return await self._fell_back(turns, prompt, exc)
        owners = [(at, index) for at, turn in enumerate(turns) for index in range(len(turn.messages))]
        user = self._user(turns)
        facts: list[list[Fact]] = [[] for _ in turns]
        notes: list[list[str]] = [[] for _ in turns]
        for given in answer.facts:
            fact = self._fact(given, owners, user)
            if isinstance(fact, str):
                notes[-1].append(fact)
                continue
            at, local = fact
            facts[at].append(local)
        return [Extraction(facts=f[: self.config.max_facts_per_turn], extractor=self.name, prompt=prompt, notes=n)
                for f, n in zip(facts, notes, strict=True)]  # fmt: skip

    def _fact(self, given: _ModelFact, owners: list[tuple[int, int]], user: str) -> tuple[int, Fact] | str:
        """The model's fact checked (its turn, and the fact), or a note saying why it was dropped."""
        text = " ".join(str(given.text).split())
        if not text or "\x00" in text:
            return "the model gave an empty fact: dropped"
        if not 0 <= given.message < len(owners):
            return f"the model named message {given.message}, which is not in the turn: {text[:80]!r} dropped"
        kind: FactKind = given.kind.casefold() if given.kind.casefold() in FACT_KINDS else "fact"  # type: ignore[assignment]
        importance = min(1.0, max(0.0, float(given.importance)))
        at, index = owners[given.message]
        subject, slot, value, functional = read_slot(text, user)  # a relation the rules can match on, when readable
        return at, Fact(text=text[:500], kind=kind, importance=round(importance, 2), message_index=index,
                        memory_kind=_MEMORY_KIND.get(kind, "fact"), quote=text[:500], subject=subject, slot=slot,
                        value=value, functional=functional)  # fmt: skip

    async def _fell_back(
        self, turns: Sequence[ObservedTurn], prompt: list[dict[str, Any]], exc: Exception
    ) -> list[Extraction]:
        why = f"the model failed ({type(exc).__name__}: {str(exc)[:200]})"
        log.warning("memkit: facts: %s; %s", why, "using the offline extractor" if self.config.fallback else
                    "the turn yields no fact")  # fmt: skip
        if not self.config.fallback:
            return [Extraction(extractor=self.name, prompt=prompt, notes=[why]) for _ in turns]
        read = [await self.fallback.extract(turn) for turn in turns]
        return [msgspec.structs.replace(e, prompt=prompt, notes=[*e.notes, f"{why}; the offline extractor read it"])
                for e in read]  # fmt: skip

    # -- reconciliation --------------------------------------------------------------------------------------------
    def reconcile_messages(
        self, facts: Sequence[Fact], candidates: Sequence[Sequence[RecallHit]]
    ) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """The reconciliation prompt, and which memory id each handle (m1, m2, ...) stands for."""
        handles: dict[str, str] = {}
        by_id: dict[str, str] = {}
        lines = ["New facts, in the order they were said:"]
        for at, (fact, hits) in enumerate(zip(facts, candidates, strict=True)):
            lines.append(f"[f{at}] ({fact.kind}) {fact.text}")
            for hit in hits:
                handle = by_id.setdefault(hit.memory.id, f"m{len(by_id) + 1}")
                handles[handle] = hit.memory.id
                lines.append(f"    existing [{handle}] ({hit.memory.kind}) {hit.memory.content} "
                             f"(similarity {hit.similarity:.2f})")  # fmt: skip
            if not hits:
                lines.append("    existing: none")
        return [{"role": "system", "content": _RECONCILE}, {"role": "user", "content": "\n".join(lines)}], handles

    async def reconcile(self, facts: Sequence[Fact], candidates: Sequence[Sequence[RecallHit]]) -> list[Decision]:
        """The model's decision for each fact; the rules' where the model gave none, or an unusable one."""
        rules = await self.rules.reconcile(facts, candidates)
        if self.config.max_calls_per_turn < 2 or not any(candidates):
            return rules  # nothing similar stored (every fact is new), or no call left: no call
        prompt, handles = self.reconcile_messages(facts, candidates)
        try:
            with anyio.fail_after(self.config.timeout_s):
                answer = await self.llm.structured(prompt, _ModelDecisions,
                                                   max_tokens=self.config.reconcile_max_tokens)  # fmt: skip
            if not isinstance(answer, _ModelDecisions):
                raise TypeError(f"structured() returned a {type(answer).__name__}, not the decisions asked for")
        except Exception as exc:  # cancellation is a BaseException and goes through
            why = f"the model failed ({type(exc).__name__}: {str(exc)[:200]})"
            log.warning("memkit: facts: reconciliation: %s; the rules decided", why)
            return [msgspec.structs.replace(d, reason=f"{why}; rule: {d.reason}") for d in rules]
        chosen: dict[int, Decision] = {}
        for given in answer.decisions:
            decided = self._decision(given, handles, len(facts))
            if isinstance(decided, Decision):
                chosen.setdefault(decided.fact, decided)
            elif 0 <= given.fact < len(facts):
                rule = rules[given.fact]
                chosen.setdefault(given.fact, msgspec.structs.replace(rule, reason=f"{decided}; rule: {rule.reason}"))
        return [chosen.get(i) or msgspec.structs.replace(rules[i], reason=f"the model gave no decision; rule: "
                                                         f"{rules[i].reason}") for i in range(len(facts))]  # fmt: skip

    def _decision(self, given: _ModelDecision, handles: dict[str, str], n: int) -> Decision | str:
        """The model's decision checked, or why it cannot be used."""
        action = given.action.strip().casefold()
        if not 0 <= given.fact < n:
            return f"the model decided about fact {given.fact}, which does not exist"
        if action not in ACTIONS:
            return f"the model answered {given.action!r}, not ADD, UPDATE, SUPERSEDE or NOOP"
        target = None if given.target is None else given.target.strip().strip("[]")
        if action != "add":
            if target in handles:
                target = handles[target]
            elif (
                target is not None and target.startswith("f") and target[1:].isdigit() and int(target[1:]) < given.fact
            ):
                target = f"fact:{int(target[1:])}"
            else:
                return f"the model chose {action.upper()} of {given.target!r}, which is not a memory shown"
        text = None if not given.text or action != "update" else " ".join(given.text.split())[:500]
        return Decision(fact=given.fact, action=action, target=target if action != "add" else None,  # type: ignore[arg-type]
                        text=text, reason=" ".join(given.reason.split())[:300] or "(no reason given)",
                        decided_by=self.name)  # fmt: skip
