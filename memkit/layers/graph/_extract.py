"""Entities and relations from what someone said: by a model when one is configured, else by patterns.

The offline extractor reads first-person statements and plain third-person ones, in English: names ("my
name is Ada", "my sister Bea", "Bea is my sister"), work ("I work at Acme", "Bea works for Globex"), places
("I moved to Porto", "I'm from Lyon"), study, marriage, likes and dislikes, favourites and allergies.
People, organisations and places must be written with a capital letter (so "I work at night" names no
employer); a negated statement ("I don't work at Acme any more") states no relation. What it cannot read
it leaves out: a missing relation costs less than a wrong one.

The model is asked for entities and relations as structured output, bounded in time and tokens; whatever
goes wrong, the patterns' result is used instead and a warning logged.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Final

import anyio
import msgspec

from memkit.layers.graph._records import Edge, GraphConfig, Node

if TYPE_CHECKING:
    from memkit.llm import LLM

__all__ = ["Extraction", "heuristic_extraction", "model_extraction"]

log = logging.getLogger("memkit")


class Extraction(msgspec.Struct, frozen=True, kw_only=True):
    """What a text states: entities (with the aliases it gives them) and relations between them."""

    nodes: list[Node] = msgspec.field(default_factory=list)
    edges: list[Edge] = msgspec.field(default_factory=list)


_NAME: Final = r"(?P<x>[A-Z][\w'&.-]*(?:\s+(?:[A-Z][\w'&.-]*|of|de|da|du|van|von|der|del|la|le)){0,4})"
_PHRASE: Final = r"(?P<x>[\w'-]+(?:\s+[\w'-]+){0,5}?)(?=\s+(?:but|and|because|when|since|so|though|if|as|which|that|too|a lot|very much|so much)\b|\s*[,;:!?.]|\s*$)"  # noqa: E501
_SUBJECT: Final = r"(?:(?P<me>\bI(?:'m| am|'ve| have)?)|(?P<who>\b[A-Z][a-z][\w'-]*(?:\s+[A-Z][\w'-]+)?))"
_NEGATION: Final = re.compile(r"(?:\bnot\b|\bnever\b|\bno longer\b|n't\b)", re.IGNORECASE)
_NO_LONGER: Final = re.compile(r"\b(?:not any ?more|no longer|any ?more|not now)\b", re.IGNORECASE)
_NOT_NAMES: Final = frozenset({
    "i", "i'm", "it", "this", "that", "there", "then", "they", "we", "he", "she", "you", "my", "our", "his", "her",
    "their", "the", "a", "an", "and", "but", "so", "yes", "no", "ok", "okay", "actually", "also", "maybe", "today",
    "yesterday", "tomorrow", "now", "well", "hi", "hello", "thanks",
})  # fmt: skip
_NOT_THINGS: Final = frozenset({
    "it", "that", "this", "them", "you", "him", "her", "me", "those", "these", "everything", "anything", "something",
})  # fmt: skip

_ROLES: Final = (
    "best friend|sister|brother|mother|mom|mum|father|dad|wife|husband|partner|girlfriend|boyfriend|son|daughter|"
    "friend|boss|manager|colleague|coworker|co-worker|cousin|aunt|uncle|grandmother|grandma|grandfather|grandpa|"
    "roommate|fiancee|fiancée|fiance|fiancé|neighbour|neighbor|dog|cat|puppy|kitten"
)
_ANIMALS: Final = frozenset({"dog", "cat", "puppy", "kitten"})

# (pattern, relation, target type); the subject is the speaker or a capitalised name.
_STATEMENTS: Final[tuple[tuple[re.Pattern[str], str, str], ...]] = tuple(
    (re.compile(pattern), relation, kind)
    for pattern, relation, kind in (
        (_SUBJECT + r" (?:now |currently |still )?(?:work|works|working|started working|have been working|has been "
         r"working)(?: now)? (?:at|for) " + _NAME, "works_at", "organization"),
        (_SUBJECT + r" (?:joined|got a job at|was hired by|got hired at) " + _NAME, "works_at", "organization"),
        (_SUBJECT + r" (?:now |currently |just |recently )?(?:live|lives|living|moved|relocated|settled)"
         r"(?: back)? (?:in|to) " + _NAME, "lives_in", "place"),
        (_SUBJECT + r" (?:is |are )?(?:originally )?from " + _NAME, "from", "place"),
        (_SUBJECT + r" grew up in " + _NAME, "grew_up_in", "place"),
        (_SUBJECT + r" (?:study|studies|studied|am studying|studying) at " + _NAME, "studies_at", "organization"),
        (_SUBJECT + r" graduated from " + _NAME, "studied_at", "organization"),
        (_SUBJECT + r" (?:is |are |got |just got )?married to " + _NAME, "married_to", "person"),
        (_SUBJECT + r" (?:is |are |got |just got )?engaged to " + _NAME, "engaged_to", "person"),
    )
)  # fmt: skip
_DISLIKES: Final = re.compile(
    r"\bI (?:really |absolutely |just )?(?:hate|dislike|detest|can't stand|cannot stand|don't like|do not "
    r"like|don't enjoy) (?:the |a |an |my )?" + _PHRASE
)
_LIKES: Final = re.compile(
    r"\bI (?:really |absolutely |just )?(?:like|love|enjoy|adore|prefer) (?:the |a |an )?" + _PHRASE
)
_FAVOURITE: Final = re.compile(r"\b[Mm]y (?:all-time )?favou?rite (?P<what>\w+(?: \w+)?) is (?:the |a |an )?" + _PHRASE)
_ALLERGY: Final = re.compile(r"\bI(?:'m| am) (?:severely |very )?allergic to " + _PHRASE)
_MY_ROLE: Final = re.compile(r"\b[Mm]y (?P<role>" + _ROLES + r")(?:'s name is |, | is called | is named | "
                             r"called | named | is | )" + _NAME)  # fmt: skip
_ROLE_OF_ME: Final = re.compile(_NAME + r" is my (?P<role>" + _ROLES + r")\b")
_MY_NAME: Final = re.compile(r"\b(?:[Mm]y name is|[Cc]all me|[Pp]eople call me) " + _NAME)
_SENTENCES: Final = re.compile(r"(?<=[.!?;])\s+|\n+")


def heuristic_extraction(text: str, speaker: str) -> Extraction:
    """The relations ``text`` states, the speaker (``I``, ``my``) being the entity named ``speaker``."""
    nodes: list[Node] = []
    edges: list[Edge] = []
    for sentence in _SENTENCES.split(text.replace("\u2019", "'")):  # one apostrophe for the patterns
        _read_sentence(sentence.strip(), speaker, nodes, edges)
    return Extraction(nodes=nodes, edges=_unique(edges))


def _read_sentence(sentence: str, speaker: str, nodes: list[Node], edges: list[Edge]) -> None:
    for match in _MY_NAME.finditer(sentence):
        if (name := _name(match.group("x"))) is not None:
            nodes.append(Node(name=speaker, type="person", aliases=[name]))
    for pattern in (_MY_ROLE, _ROLE_OF_ME):
        for match in pattern.finditer(sentence):
            role = match.group("role").replace("co-worker", "coworker").replace(" ", "_")
            if (name := _name(match.group("x"))) is not None and not _negated(sentence, match.start(), match.end()):
                kind = "animal" if role in _ANIMALS else "person"
                edges.append(Edge(source=speaker, relation=f"has_{role}", target=name, source_type="person",
                                  target_type=kind))  # fmt: skip
    for pattern, relation, kind in _STATEMENTS:
        for match in pattern.finditer(sentence):
            subject = speaker if match.group("me") else _name(match.group("who"))
            target = _name(match.group("x"))
            if subject and target and not _negated(sentence, match.start(), match.end()):
                edges.append(Edge(source=subject, relation=relation, target=target, source_type="person",
                                  target_type=kind))  # fmt: skip
    _read_tastes(sentence, speaker, edges)


def _read_tastes(sentence: str, speaker: str, edges: list[Edge]) -> None:
    disliked = [(m, "dislikes") for m in _DISLIKES.finditer(sentence)]
    spans = [m.span() for m, _ in disliked]
    liked = [(m, "likes") for m in _LIKES.finditer(sentence) if not any(a <= m.start() < b for a, b in spans)]
    for match, relation in [*disliked, *liked]:
        if relation == "likes" and _negated(sentence, match.start(), match.end()):
            continue
        if (thing := _thing(match.group("x"))) is not None:
            edges.append(Edge(source=speaker, relation=relation, target=thing, source_type="person",
                              target_type="thing"))  # fmt: skip
    for match in _FAVOURITE.finditer(sentence):
        if (thing := _thing(match.group("x"))) is not None:
            what = match.group("what").casefold().replace(" ", "_")
            edges.append(Edge(source=speaker, relation=f"favorite_{what}", target=thing, functional=True,
                              source_type="person", target_type="thing"))  # fmt: skip
    for match in _ALLERGY.finditer(sentence):
        if (thing := _thing(match.group("x"))) is not None:
            edges.append(Edge(source=speaker, relation="allergic_to", target=thing, source_type="person",
                              target_type="thing"))  # fmt: skip


def _negated(sentence: str, start: int, end: int) -> bool:
    """A negation in the statement or its clause, or "no longer" after it ("I live in Lyon, not any more")."""
    comma = sentence.find(",", end)
    clause_end = len(sentence) if comma < 0 else comma
    return _NEGATION.search(sentence, start, clause_end) is not None or _NO_LONGER.search(sentence, end) is not None


def _name(raw: str | None) -> str | None:
    if raw is None:
        return None
    words = raw.strip(" .,'-").split()
    while words and words[-1].casefold() in {"of", "de", "da", "du", "van", "von", "der", "del", "la", "le"}:
        words.pop()
    name = " ".join(words)
    return name if name and name.casefold() not in _NOT_NAMES else None


def _thing(raw: str | None) -> str | None:
    if raw is None:
        return None
    thing = raw.strip(" .,'-")
    if not thing or thing.casefold() in _NOT_THINGS or thing.casefold().startswith(("to ", "it ", "that ")):
        return None
    return thing


def _unique(edges: list[Edge]) -> list[Edge]:
    seen: set[tuple[str, str, str]] = set()
    out = []
    for edge in edges:
        key = (edge.source.casefold(), edge.relation, edge.target.casefold())
        if key not in seen:
            seen.add(key)
            out.append(edge)
    return out


# -- the model ----------------------------------------------------------------------------------------------
class _Entity(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    type: str = "entity"
    aliases: list[str] = msgspec.field(default_factory=list)


class _Relation(msgspec.Struct, frozen=True, kw_only=True):
    source: str
    relation: str
    target: str
    functional: bool = False


class _Answer(msgspec.Struct, frozen=True, kw_only=True):
    entities: list[_Entity] = msgspec.field(default_factory=list)
    relations: list[_Relation] = msgspec.field(default_factory=list)


_INSTRUCTIONS: Final = (
    "Extract the entities and the relations between them that the text states. The speaker is called {speaker}: "
    "use that name for I, me and my. Entities: people, organizations, places, things; type is one word "
    "(person, organization, place, thing, animal, event). Relations: short snake_case verbs such as works_at, "
    "lives_in, has_sister, likes, dislikes, married_to. functional is true when a source has one current target "
    "(lives_in, works_at, married_to). Only what is said, nothing guessed; negated statements state nothing. "
    'Answer with JSON: {{"entities": [{{"name", "type", "aliases"}}], "relations": [{{"source", "relation", '
    '"target", "functional"}}]}}.'
)


async def model_extraction(llm: LLM, text: str, speaker: str, config: GraphConfig) -> Extraction | None:
    """The model's reading of ``text``; None (and a warning) when it fails or answers nonsense."""
    prompt = [{"role": "system", "content": _INSTRUCTIONS.format(speaker=speaker)}, {"role": "user", "content": text}]
    try:
        with anyio.fail_after(config.llm_timeout_s):
            answer = await llm.structured(prompt, _Answer, max_tokens=config.extract_max_tokens)
        if not isinstance(answer, _Answer):
            raise TypeError(f"structured() returned a {type(answer).__name__}, not the extraction asked for")
    except Exception as exc:  # cancellation is a BaseException and goes through
        log.warning("memkit: graph: the model could not extract relations (%s: %s); using the offline patterns",
                    type(exc).__name__, str(exc)[:300])  # fmt: skip
        return None
    types = {e.name.casefold(): e.type for e in answer.entities}
    nodes = [Node(name=e.name, type=e.type, aliases=e.aliases) for e in answer.entities]
    edges = [Edge(source=r.source, relation=r.relation, target=r.target, functional=r.functional or None,
                  source_type=types.get(r.source.casefold()), target_type=types.get(r.target.casefold()))
             for r in answer.relations]  # fmt: skip
    return Extraction(nodes=nodes, edges=edges)
