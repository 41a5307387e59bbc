"""Text helpers shared by every backend: the lexical tokenizer and dedupe normalisation.

One tokenizer for all embedded backends keeps lexical scores identical
whether a memory lives in ``memory://`` or ``sqlite://``.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from functools import lru_cache
from typing import Any, Final

__all__ = ["STOP_WORDS", "normalize_for_dedupe", "query_terms", "tokenize"]

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_ASCII_WORD_CHARS: Final = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_ASCII_WORDS_LOWER: Final = bytes(byte if byte in _ASCII_WORD_CHARS else 0x20 for byte in range(256)).lower()
r"""ASCII letters lower-cased, digits kept, every other byte a space: on ASCII text ``[^\W_]`` is exactly
``[A-Za-z0-9]``, so translating and splitting finds the regex's words, 4-6x faster (tokenizing was a fifth
of writing a short text)."""


def _lower_words(text: str) -> list[str]:
    """``_WORD.findall(text.lower())``; on ASCII text without the regex (there ``casefold`` and NFKC change
    nothing ``lower`` does not)."""
    if text.isascii():
        return text.encode("ascii").translate(_ASCII_WORDS_LOWER).decode("ascii").split()
    return _WORD.findall(text.lower())


STOP_WORDS: Final = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have having
    he her here hers herself him himself his how i if in into is it its itself just me more most my myself no
    nor not now of off on once only or other our ours ourselves out over own same she should so some such
    than that the their theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your yours yourself
    yourselves s t don ll m re ve d""".split()  # noqa: SIM905 - a word list reads better as text
)


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    import Stemmer  # PyStemmer: Snowball stemmers in C

    return Stemmer.Stemmer("english")


_STEMS: dict[str, str] = {}
"""Each word's stem, as stemmed before: a dictionary lookup is a tenth of a call into the stemmer (whose own
cache is behind that call), and tokenizing was a fifth of writing a short text."""
_MAX_STEMS: Final = 200_000
"""Words remembered before the cache starts over (a few MB; prose uses far fewer distinct words)."""


def tokenize(text: str) -> list[str]:
    """Lower-cased, stop-word-free, Snowball-stemmed word tokens."""
    stem_of = _STEMS.get
    return [stem_of(w) or _stem(w) for w in _lower_words(text) if w not in STOP_WORDS]


def _stem(word: str) -> str:
    """A stem the cache lacked (a name, a number: usually one word of a text)."""
    if word.isascii() and word.isdigit():  # its own stem; not cached: ids and numbers are mostly unique,
        return word  # and cached they were 16 MB of the stems at 100k numbered notes
    if len(_STEMS) >= _MAX_STEMS:  # a thread reading it meanwhile misses, and stems for itself
        _STEMS.clear()
    stem: str = _stemmer().stemWord(word)
    _STEMS[word] = stem
    return stem


def query_terms(text: str) -> list[tuple[int, list[str]]]:
    """A query's tokens grouped by how often the query says them, most often first, each group sorted.

    A word said twice weighs twice (BM25's query-term frequency, as the embedded index scores it); query
    feedback repeats the question so its words outweigh the words it adds. A server backend whose full-text
    search ignores repeats weighs each group by its count instead.
    """
    counts = Counter(tokenize(text))
    groups: dict[int, list[str]] = {}
    for term, count in counts.items():
        groups.setdefault(count, []).append(term)
    return [(count, sorted(groups[count])) for count in sorted(groups, reverse=True)]


def normalize_for_dedupe(text: str) -> str:
    """Text equal under this is an exact duplicate: case, accents' forms, punctuation and spacing ignored."""
    if text.isascii():  # NFKC keeps ASCII as it is, and casefold is lower there
        return " ".join(_lower_words(text))
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_WORD.findall(folded))
