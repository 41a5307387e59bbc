"""The English patterns the offline fact extractor reads sentences with.

Each pattern names what a sentence does (asks, thanks, states a preference, a plan, an event, ...); the
extractor (``_heuristic``) tries them in order. They are written for first-person chat: "I", "my", "we", and
the implicit subject of "Gonna check out career options". Relations between named people, places and
organisations come from the knowledge graph's patterns (``memkit.layers.graph``), not from here.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "ANCHOR",
    "CLAUSES",
    "CORRECTION",
    "CHANGE",
    "DECISION",
    "DISLIKE",
    "EVENT",
    "FACT",
    "HABIT",
    "HEDGE",
    "IMPLICIT_SUBJECT",
    "INTENSE",
    "LEAD",
    "PLAN",
    "PREFERENCE",
    "QUESTION",
    "REMEMBER",
    "REQUEST",
    "SENTENCES",
    "TIME",
    "VOCATIVE",
    "content_words",
    "is_filler",
]


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_I = r"(?<![\w'-])[Ii]"
_WE = r"(?<![\w'-])[Ww]e"
_ADV_WORDS = (
    r"really|also|just|always|usually|often|never|still|actually|absolutely|definitely|totally|recently|"
    r"finally|currently|now|even|already|kind of|kinda|sort of|truly|honestly|literally|seriously|then|once|"
    r"first|genuinely|officially|mostly|super|so|very|pretty|quite|both|all|each|sometimes|rarely|hardly|barely|"
    r"no longer|not really"
)
_ADV = r"(?:\s+(?:" + _ADV_WORDS + r"))*"
_ING_ADJECTIVES = (
    r"exciting|amazing|interesting|inspiring|relaxing|challenging|rewarding|boring|exhausting|fascinating|"
    r"refreshing|terrifying|surprising|annoying|frustrating|satisfying|touching|encouraging|heartwarming|"
    r"overwhelming|stunning|charming|promising|thrilling|appealing|calming|soothing|amusing|astonishing|"
    r"disappointing|embarrassing|entertaining|depressing|worrying|confusing|alarming|welcoming|uplifting|loving"
)
"""Words ending in -ing that describe rather than do: "so exciting!" is not "I'm exciting"."""
SENTENCES: Final = re.compile(r"(?<=[.!?;])\s+|\s*\n+\s*|\s+-{1,2}\s+|\s+[\u2013\u2014]\s+")
"""Sentence ends, line breaks and dashes between clauses ("... powerful - I'd love to ...")."""

_FILLER_WORDS: Final = _words(
    "ok okay k kk okey alright alrighty right sure yes yeah yep yup ya yea no nope nah thanks thank thx ty "
    "you u much so very lot lots great cool nice awesome perfect good fine fantastic wonderful amazing lovely "
    "excellent brilliant super sweet neat wow oh ah aha ahh hmm hm um uh huh lol lmao haha hahaha hehe omg "
    "got it noted understood makes sense sounds that's thats is it this will do gotcha hi hello hey bye goodbye "
    "see ya later soon take care night morning evening afternoon have day talk cheers np problem welcome "
    "you're youre absolutely totally definitely exactly indeed agreed true same me too glad happy hear to for "
    "and the a an i i'm im again all just well"
)
_WORD: Final = re.compile(r"[A-Za-z']+")
_CONTENT_WORD: Final = re.compile(r"[A-Za-z0-9']+")


def is_filler(text: str) -> bool:
    """Nothing but acknowledgements, thanks, greetings and interjections ("ok", "thanks!", "got it", "haha
    sounds good"), perhaps to someone by name ("Thanks, Mel!"), or no words at all (emoji, punctuation)."""
    words = _WORD.findall(text)
    plain = [w for w in words if w.casefold() in _FILLER_WORDS]
    names = [w for w in words if w[:1].isupper() and w.casefold() not in _FILLER_WORDS]
    return len(plain) + len(names) == len(words) and (len(names) <= 1 and (bool(plain) or not names))


LEAD: Final = re.compile(
    r"^(?:(?:oh|ah|and|also|so|well|btw|by the way|anyway|anyways|honestly|plus|yeah|yes|yep|haha|hahaha|lol|wow|"
    r"hey|hi|hello|ok|okay|sure|great|cool|awesome|nice|thanks|thank you|um|uh|hmm|omg|sounds good|"
    r"oh and|oh yeah|you know what|guess what|fun fact|speaking of [\w' ]{1,40},|on another note|in fact|besides|"
    r"i just remembered|i just remembered that|i forgot to mention|i forgot to mention that|also worth mentioning|"
    r"i should mention|i should mention that|i wanted to (?:say|mention|tell you)(?: that)?)\b[\s,!.:;-]*)+",
    re.IGNORECASE,
)
"""Words that open a sentence without stating anything; stripped before it is read."""
VOCATIVE: Final = re.compile(r"^(?P<name>[A-Z][a-z]{2,15})(?:,|!)\s+(?=[a-zA-Z])")
"""A name the speaker addresses ("Caroline, since we last chatted ..."): stripped when it is the listener's."""
CLAUSES: Final = re.compile(
    r",?\s+(?:and|but|so|plus)\s+(?=(?:I|I'm|I've|I'd|I'll|[Mm]y|[Ww]e)\b)|,?\s+(?:so|and|but)?\s*(?=(?:could|can|"
    r"would|will) you\b|do you (?:have|know)\b|any (?:tips|ideas|suggestions|recommendations)\b)"
)
"""Where one sentence states two things about the speaker ("My name is Ada and I live in Paris")."""
HEDGE: Final = re.compile(
    r"^(?:i think|i guess|i believe|i suppose|i feel like|i reckon|i'd say|maybe|probably|perhaps)\b(?: that)?[\s,]*",
    re.IGNORECASE,
)
QUESTION: Final = re.compile(
    r"\?\s*[\W_]*$|^(?:what|how|why|when|where|which|who|whom|whose|is|are|am|do|does|did|can|could|would|will|"
    r"should|shall|may|have|has|isn't|aren't|don't|doesn't|didn't|won't|wouldn't|couldn't|shouldn't|any)\b(?!.*[.!]$)",
    re.IGNORECASE,
)
REQUEST: Final = re.compile(
    r"^(?:please\b|pls\b|(?:can|could|would|will) you\b|(?:tell|show|give|help|let|find|suggest|recommend|explain|"
    r"list|write|make|create|describe|remind|send|check|book|draft|summari[sz]e|translate) me\b|let's talk\b)"
    r"|\b(?:was |am |'m )?wondering (?:if|whether|what|how|about)\b|\bI need (?:some |your )?(?:help|advice|tips|"
    r"ideas|suggestions|recommendations|information|guidance|input)\b|\blooking for (?:some |any )?(?:advice|tips|"
    r"ideas|suggestions|recommendations|help|information|resources|inspiration|guidance|input)\b|\bany (?:tips|"
    r"ideas|suggestions|recommendations|advice)\b|\bI(?:'d| would) (?:like|love|appreciate) (?:to know|to ask|to "
    r"hear|to learn more|some|you to|your|any|help|it if|to get some)\b|\bI want you to\b|\b(?:can|could|would) "
    r"you\b|\bdo you (?:have|know)\b",
    re.IGNORECASE,
)
"""What asks the assistant for something: the user's need, not a fact about them."""
REMEMBER: Final = re.compile(
    r"^(?:please\s+|pls\s+|and\s+|also\s+)?(?:remember|don't forget|do not forget|note|make a note|take note|"
    r"keep in mind|bear in mind|for the record|fyi|just so you know|for future reference|save this|memori[sz]e)"
    r"\b(?:\s+(?:that|this|of this))?[\s,:;-]*(?P<rest>.*)$",
    re.IGNORECASE,
)
CORRECTION: Final = re.compile(
    r"^(?:actually|correction|sorry|oops|wait|no|nope|my bad|scratch that|to be clear|update|not quite|i misspoke|"
    r"let me correct (?:that|myself)|that's wrong|that was wrong|i was wrong)\b[\s,:;!.-]+(?:(?:i meant|i mean|"
    r"it's|it is)\b[\s,:;-]*)?(?P<rest>.+)$|^(?:i meant|i mean)\b[\s,:;-]*(?P<meant>.+)$",
    re.IGNORECASE,
)
CHANGE: Final = re.compile(
    r"\b(?:no longer|not any ?more|any ?more|instead of|rather than|now that i|changed my mind|switched to|"
    r"these days)\b|,\s*not\s+\w+",
    re.IGNORECASE,
)
"""A statement that something changed ("I no longer eat meat", "I live in Porto, not Paris")."""
ANCHOR: Final = re.compile(r"(?<![\w'-])(?:[Ii]|[Mm][Yy]|[Mm]e|[Mm]ine|[Ww]e|[Oo]ur|[Uu]s)(?![\w-])")
"""The speaker is in the sentence: a fact about someone else needs a relation the graph can read."""
IMPLICIT_SUBJECT: Final = re.compile(
    r"^(?:gonna|going to|planning (?:to|on)|thinking (?:of|about)|hoping to|trying to|just (?=\w+ed\b)|"
    r"finally (?=\w+ed\b)|recently (?=\w+ed\b)|been (?=\w+ing\b)|(?!(?:loving|feeling|being|having|getting|"
    r"doing|seeing|hearing|talking|thinking|looking|wishing|hoping|knowing|something|nothing|anything|everything|"
    r"thing|morning|evening|spring|king|sing|ring|bring|string|wedding|ceiling|building|meeting|feeling|"
    + _ING_ADJECTIVES
    + r")\b)[a-z]+ing\s+\w(?!.*\b(?:is|was|"
    r"are|were|has|makes|sounds|looks|seems|helps|gives|can|will|isn't|wasn't|aren't|can't|won't|must|should)\b))",
    re.IGNORECASE,
)
"""Chat drops the subject: "Gonna continue my edu", "Just finished a painting"."""

DISLIKE: Final = re.compile(
    _I + r"(?:'m| am) not (?:a |really a |much of a |the biggest )?(?:big |huge )?fan of\b|" + _I + _ADV +
    r" (?:hate|dislike|detest|loathe|can't stand|cannot stand|avoid|can't bear)\b|" + _I +
    r" (?:don't|do not|never|really don't) (?:really )?(?:like|enjoy|eat|drink|care for|want)\b|" + _I +
    r"(?:'m| am) not (?:really |very )?(?:into|keen on|interested in)\b|\bnot my (?:thing|cup of tea|favou?rite)\b",
    re.IGNORECASE,
)  # fmt: skip
PREFERENCE: Final = re.compile(
    _I + r"(?:'ve| have)?" + _ADV + r" (?:like|love|enjoy|adore|prefer|fancy|appreciate|cherish|treasure|value|"
    r"liked|loved|enjoyed|admired|admire)\b"
    r"(?! to (?:know|ask|hear)\b)|" + _I + r"(?:'d| would) (?:rather|prefer)\b|" + _I +
    r"(?:'m| am)(?: \w+ly| really| so| super| such)? (?:a |an )?"
    r"(?:big |huge |total |major )?(?:fan of|into|keen on|passionate about|obsessed with|fond of|interested in|"
    r"drawn to|addicted to|crazy about|a fan)\b|\b[Mm]y (?:all-time )?(?:favou?rite|go-to)\b|" + _I +
    r" (?:always|usually|tend to|normally|typically)\b|" + _I +
    r"(?:'m| am) (?:a )?(?:vegetarian|vegan|pescatarian|night owl|morning person|early riser)\b|" +
    r"\b(?:love|loves|enjoy|enjoys) (?:\w+ing|the|my)\b(?=.*\b(?:I|my)\b)",
    re.IGNORECASE,
)  # fmt: skip
DECISION: Final = re.compile(
    r"(?:" + _I + r"|" + _WE + r")(?:'ve| have)?" + _ADV + r" (?:decided|chosen|chose|picked|settled on|made up "
    r"(?:my|our) minds?|opted|committed|agreed|signed up|enrolled|registered|booked|ordered)\b|^(?:decision|decided)"
    r"\b|\blet's go with\b|(?:" + _I + r"|" + _WE + r")(?:'m| am|'re| are|'ll| will) go(?:ing)? with\b",
    re.IGNORECASE,
)  # fmt: skip
PLAN: Final = re.compile(
    r"(?:" + _I + r"|" + _WE + r")(?:'m| am|'re| are)" + _ADV + r" (?:going to|gonna|planning|about to|hoping to|"
    r"aiming to|thinking (?:of|about)|considering|looking forward to|excited to|getting ready to|trying to|"
    r"preparing|meaning to|intending to|working towards|saving (?:up )?for|headed|heading|leaving|flying|moving|"
    r"starting(?! to (?:realize|realise|feel|think|see|understand|get|notice))|taking|keen to|eager to|looking for|"
    r"looking into|searching for|working on)\b|"
    r"(?:" + _I + r"|" + _WE + r")(?:'ll| will| plan to| intend to| want to| hope to| need to|"
    r" have to| aim to| wanna| gotta| would like to|'d like to|'d love to| would love to| can't wait to)\b|"
    r"\b[Mm]y (?:plan|goal|dream|aim|hope|resolution|next step|next project) is\b|^(?:gonna|going to|planning|"
    r"thinking of|thinking about|hoping to|trying to)\b",
    re.IGNORECASE,
)  # fmt: skip
_PAST: Final = (
    r"(?:went|got|made|took|saw|ran|bought|met|found|began|wrote|gave|came|became|won|lost|left|flew|drove|rode|"
    r"ate|drank|sang|built|taught|caught|brought|sold|spent|paid|kept|slept|sent|grew|threw|wore|swam|chose|fell|"
    r"held|hung|led|quit|sat|stood|woke|broke|spoke|tore|fed|fought|won|drew|overcame|underwent|been|done|gone|seen|"
    r"taken|given|eaten|written|ridden|driven|flown|grown|worn|read|begun|gotten|had|did|"
    r"(?!(?:wondered|needed|wanted|hoped|wished|seemed|supposed|used|agreed|realized|realised|noticed|figured|"
    r"guessed|decided|mentioned|asked|appreciated|loved|liked|considered|tried|planned|meant|sounded|"
    r"looked|started|felt)\b)\w+[^\We]ed)"
)
EVENT: Final = re.compile(
    r"(?:" + _I + r"|" + _WE + r")(?:'ve| have|'d| had)?" + _ADV + r" " + _PAST + r"\b|"
    r"(?:" + _I + r"|" + _WE + r")(?:'m| am|'re| are|'ve been| have been| was| were)" + _ADV +
    r" (?!(?:going|doing|feeling|wondering|hoping|thinking|kidding|joking|saying|asking|guessing|looking|talking|"
    r"having|getting|planning|considering|dying|curious|glad|happy|sorry|sure|afraid|" + _ING_ADJECTIVES +
    r")\b)\w{3,}ing\b|"
    r"(?:" + _I + r"|" + _WE + r")" + _ADV + r" (?:started|finished|completed|joined|adopted|graduated|visited|"
    r"attended|celebrated|volunteered|participated|competed|learned|learnt|moved|bought|painted|ran|tried|"
    r"launched|published|received|earned)\b|" + _I + r" was" + _ADV + r" (?:at|in|on) \w",
    re.IGNORECASE,
)  # fmt: skip
"""Something the speaker did or is doing: "I went to ...", "I've completed 4 projects", "I'm training for..."."""
FACT: Final = re.compile(
    _I + r"(?:'m| am) (?:a|an) (?!(?:bit|little|lot|fan|big fan|huge fan|mess|wreck)\b)\w+|" + _I +
    r"(?:'m| am) \d{1,3}\b|" + _I + r" work as\b|" + _I + r"(?:'m| am) (?:married|single|divorced|engaged|"
    r"pregnant|retired|allergic|a student|transgender|gay|lesbian|bisexual|diabetic|lactose intolerant|"
    r"originally|based in|from)\b|(?:" + _I + r"|" + _WE + r") (?:have|'ve got|have got|own|got) (?:a|an|two|"
    r"three|four|five|six|\d+|my own|some|several|many|no)\b|\b[Mm]y [\w']+(?: [\w']+){0,3} (?:is|are|was|were|"
    r"has|have|had|just|turned|got|lives?|works?|\w+[^s\W']s|will|starts?|ends?)\b|\b[Oo]ur \w+(?: \w+)? (?:is|"
    r"are|was|were|has|have)\b|"
    r"\b(?:is|are|was|were) (?:my|our)\b|\b(?:here's|here is|here are|this is|these are|check out|look at) "
    r"(?:\w+ )*?(?:my|our)\b|" + _I + r" (?:can't|cannot|can not) (?:have|eat|drink|tolerate|stand)\b",
    re.IGNORECASE,
)  # fmt: skip
"""Who the speaker is and what they have: "I'm a nurse", "I'm 34", "I have two kids", "My car is a Honda"."""
HABIT: Final = re.compile(
    r"(?:" + _I + r"|" + _WE + r")" + _ADV + r" (?!(?:think|know|guess|mean|hope|wish|feel|see|agree|believe|bet|"
    r"wonder|suppose|understand|remember|forget|say|tell|ask|want|need|get|can|could|would|should|will|shall|"
    r"might|must|may|am|are|was|were|have|had|do|did|don't|didn't|can't|couldn't|won't|wouldn't|shouldn't|haven't|"
    r"hadn't|wasn't|weren't|love|like|hate|prefer|enjoy|appreciate|hear|promise|apologi[sz]e|admit|doubt|imagine|"
    r"reckon|figure|reali[sz]e|recall|suggest|recommend|thank|miss|owe|swear|trust|assume|gotta|gonna|wanna|"
    r"cannot|used|dunno|totally|let|go|come|try|look|hate|cant|dont|wont|also|just|really|too|and|or|myself|"
    r"got|gotta|" + _ADV_WORDS + r")\b)(?P<verb>[a-z]{3,})\b(?<!ed)(?<!ing)(?<!ly)"
)
"""What the speaker does, habitually or now: "I donate to an animal shelter", "we bond over campfires"."""
INTENSE: Final = re.compile(
    r"\b(?:love|adore|hate|detest|really|absolutely|always|never|so much|passionate|obsessed|favou?rite|must|"
    r"important|very|extremely|severe|severely|allergic)\b",
    re.IGNORECASE,
)
_HEDGED: Final = (
    r"\b(?:maybe|might|probably|perhaps|possibly|i think|i guess|not sure|kind of|kinda|sort of|sometimes)\b"
)
HEDGED: Final = re.compile(_HEDGED, re.IGNORECASE)
TIME: Final = re.compile(
    r"\b(?:today|tomorrow|tonight|yesterday|next|last|this (?:week|month|year|weekend)|ago|since|until|on "
    r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)|january|february|march|april|may|june|july|"
    r"august|september|october|november|december|\d{1,2}(?::\d{2})?\s*(?:am|pm)|\d{4}|\d+(?:st|nd|rd|th))\b",
    re.IGNORECASE,
)
_STOP: Final = _words(
    "i me my mine myself we us our ours you your yours he him his she her they them their it its this that these "
    "those there here a an the and or but so if then than as of at by for with about to from in on into onto up "
    "down out over under again further once is am are was were be been being have has had do does did doing will "
    "would shall should can could may might must 'm 've 'd 'll 're 's not no nor too very just also really still "
    "even ever only now then always never often usually sometimes actually absolutely definitely totally recently "
    "finally currently already quite pretty kind sort lot lots bit little much many more most some any all every "
    "each both few such own same other another thing things stuff something anything everything nothing one get "
    "got gotten go going gone went make made take took see saw seen come came think thought know knew say said tell "
    "told try tried want wanted need needed look looked let put keep give gave feel felt seem seemed like love "
    "enjoy prefer hate gonna wanna gotta really yeah yes oh ok okay well like way time day so what which who when "
    "where why how because while since until though although yet also too either neither way right good great nice "
    "cool awesome amazing fun happy glad sure"
)


_TRIGGERS: Final = _words(
    "decided chose chosen picked settled opted committed agreed signed enrolled registered booked ordered planning "
    "plan plans about hoping hope aiming aim thinking considering looking forward excited getting ready trying "
    "preparing meaning intending intend working towards saving headed heading leaving flying moving starting taking "
    "keen eager searching fan big huge total major passionate obsessed fond interested drawn addicted crazy "
    "favorite favourite go-to tend normally typically rather adore fancy appreciate cherish treasure value liked "
    "loved enjoyed admired admire dislike detest loathe stand avoid bear care goal dream resolution next step "
    "project started finished completed joined adopted graduated visited attended celebrated volunteered "
    "participated competed learned learnt moved bought painted ran launched published received earned can't "
    "cannot wait would like love"
)
"""Words of the patterns themselves: inside a pattern's match they say what kind of statement it is, not what
it is about ("I've decided", "I'm a big fan of"); "vegetarian" in "I'm vegetarian" is what it is about."""


def content_words(text: str, *, triggers: bool = True) -> list[str]:
    """The words that carry what a sentence is about (not pronouns, auxiliaries or everyday verbs; with
    ``triggers=False``, not the patterns' own words either)."""
    words = [
        w for w in _CONTENT_WORD.findall(text) if (len(w) > 2 or w.isdigit()) and w.casefold().strip("'") not in _STOP
    ]
    return words if triggers else [w for w in words if w.casefold() not in _TRIGGERS]
