"""First person to third person: "I moved to Porto" -> "The user moved to Porto", "my sister" -> "Ada's sister".

A memory is read later, out of its conversation, often inside another model's prompt, where "I" would be
the assistant: every person in it is named (the speaker, or "the user"; "you" is the listener, by default
"the assistant"). Verbs after I and you are put in the third person ("I love" -> "loves", "I have" -> "has",
"I don't" -> "doesn't"), with rules for English spelling and lists of irregular and past forms: no model,
no dictionary; a verb it does not know is given an -s, which is what regular verbs need.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["third_person"]

_ADVERBS: Final = (
    "really|also|just|always|usually|often|never|still|sometimes|actually|absolutely|definitely|totally|recently|"
    "finally|currently|now|even|only|already|mostly|generally|rarely|seriously|truly|honestly|kinda|literally|"
    "personally|especially|typically|normally|occasionally|mainly|certainly|probably|barely|hardly|nearly|almost|"
    "ever|once|first|then|too|genuinely|deeply|particularly|slowly|no longer|not really"
)
_PERSON: Final = re.compile(
    r"(?<![\w'-])(?P<who>[Ii]|[Yy]ou|[Ww]e)(?P<contr>'m|'ve|'d|'ll|'re)?(?![\w-])"
    r"(?P<adv>(?:\s+(?:" + _ADVERBS + r"))*)"
    r"(?:(?P<gap>\s+)(?P<verb>[A-Za-z][A-Za-z']*))?"
)
_OBJECTS: Final = re.compile(
    r"(?<![\w'-])(?P<word>my|mine|me|myself|our|ours|us|ourselves|your|yours|yourself|yourselves)(?![\w'-])",
    re.IGNORECASE,
)


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_UNCHANGED: Final = _words(
    "can could will would shall should may might must ought gotta gonna wanna used was were did didn't "
    "can't cannot couldn't won't wouldn't shouldn't wasn't weren't mustn't had hadn't 'd and or but nor who that "
    "as too myself alone both all together"
)  # fmt: skip
_IRREGULAR: Final = {
    "am": "is", "are": "is", "have": "has", "do": "does", "go": "goes", "be": "is", "don't": "doesn't",
    "haven't": "hasn't", "aren't": "isn't", "ain't": "isn't", "'m": "is", "were": "was",
}  # fmt: skip
_PAST: Final = _words(
    "went got made took saw ran bought met found began wrote read had did gave came became won lost left flew drove "
    "rode ate drank sang built taught caught brought thought felt heard sold spent paid kept slept told said sent "
    "knew grew threw wore swam chose fell forgot held hung led lent meant put quit set shut sat stood stole "
    "understood woke broke spoke tore hid bit dug fed fought froze shook shot slid spun spread stuck swore swung "
    "wept wound beat bent blew burnt cast cut dealt drew dreamt fled forgave ground hit hurt knelt laid leapt learnt "
    "let lit overcame rang rose sank shone shrank sought split underwent upset been done gone seen taken given eaten "
    "written ridden driven flown known grown thrown worn chosen fallen forgotten hidden broken spoken stolen begun "
    "drunk swum sung gotten become"
)  # fmt: skip
_PARTICIPLES: Final = frozenset(w for w in _PAST if w.endswith(("en", "wn", "ne", "un"))) | {"been", "got", "had"}


def _third_person_verb(verb: str) -> str:
    low = verb.casefold()
    if low in _IRREGULAR:
        return _IRREGULAR[low]
    if low in _UNCHANGED or low in _PAST or low.endswith(("ed", "ing", "n't")) or "'" in low:
        return verb
    if low.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if len(low) > 1 and low.endswith("y") and low[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


_CLAUSE_START: Final = re.compile(
    r"(?:^|[,;:.!?(\-]|\b(?:and|but|or|so|that|if|when|because|as|since|what|how|where|why|which|who|before|after|"
    r"until|while|unless|though|although|whether|once))\s*$",
    re.IGNORECASE,
)
"""What "you" follows when it is a subject ("..., you told me"), not an object ("I told you")."""


def third_person(sentence: str, subject: str = "the user", listener: str = "the assistant") -> str:
    """``sentence`` with the speaker named ``subject`` and the listener ``listener``, first letter capital."""

    def person(match: re.Match[str]) -> str:
        who, contr, adv, gap, verb = (match.group(n) for n in ("who", "contr", "adv", "gap", "verb"))
        low = who.casefold()
        name = subject if low == "i" else listener if low == "you" else f"{subject} and others"
        plural = low == "we"
        rest = f"{adv}{gap or ''}{verb or ''}"
        if contr in {"'m", "'re"}:
            return f"{name} {'are' if plural else 'is'}{rest}"
        if contr == "'ve":
            return f"{name} {'have' if plural else 'has'}{rest}"
        if contr == "'ll":
            return f"{name} will{rest}"
        if contr == "'d":
            had = verb is not None and verb.casefold() in _PARTICIPLES
            return f"{name} {'had' if had else 'would'}{rest}"
        if verb is None or plural or (low == "you" and not _CLAUSE_START.search(match.string, 0, match.start())):
            return f"{name}{rest}"
        return f"{name}{adv}{gap}{_third_person_verb(verb)}"

    def possessive(match: re.Match[str]) -> str:
        word = match.group("word").casefold()
        if word in ("my", "mine"):
            return f"{subject}'s"
        if word == "me":
            return subject
        if word in ("myself", "ourselves", "yourselves"):
            return "themselves"
        if word in ("our", "ours"):
            return f"{subject}'s"
        if word == "us":
            return f"{subject} and others"
        if word == "yourself":
            return listener
        return f"{listener}'s"

    text = _PERSON.sub(person, sentence.replace("\u2019", "'"))
    text = _OBJECTS.sub(possessive, text)
    return text[:1].upper() + text[1:] if text else text
