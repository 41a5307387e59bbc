"""Time in a query: dates and relative expressions resolved against the moment the question is asked.

"What did I buy last Saturday?" asked on Thursday 9 March 2023 is about Saturday 4 March; "two weeks ago",
"in May", "yesterday", "May 3rd" and "2023-05-03" likewise name a window of time. ``query_windows`` finds them
(English, offline, a fixed set of patterns) and returns each as a (start, end) pair of epoch seconds, widened
by a margin for how loosely people say it ("two weeks ago" is not a day). Recall lifts the turns said inside a
window (``LongTermConfig.time_weight``). A query that names no time gets no windows and its ranking is unchanged.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Final

__all__ = ["query_windows"]

_DAY: Final = timedelta(days=1)
_MONTH_NAMES: Final = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
                       "october", "november", "december")  # fmt: skip
_MONTHS: Final = {name: i + 1 for i, name in enumerate(_MONTH_NAMES)}
_MONTH_ABBR: Final = {name[:3]: number for name, number in _MONTHS.items()} | {"sept": 9}
_WEEKDAYS: Final = {name: i for i, name in enumerate(("monday", "tuesday", "wednesday", "thursday", "friday",
                                                      "saturday", "sunday"))}  # fmt: skip
_NUMBERS: Final = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                   "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "a couple": 2,
                   "couple of": 2, "a few": 3, "few": 3, "several": 4}  # fmt: skip
_UNIT_DAYS: Final = {"day": 1.0, "week": 7.0, "month": 30.44, "year": 365.25}
_MARGIN_DAYS: Final = {"day": 1.0, "week": 3.5, "month": 15.0, "year": 183.0}
"""How far either side of "N units ago" still counts: about half a unit (a day for days)."""

_NUMBER_WORDS = "|".join(sorted((re.escape(w) for w in _NUMBERS), key=len, reverse=True))
_AGO = re.compile(rf"\b(\d{{1,3}}|{_NUMBER_WORDS})\s+(day|week|month|year)s?\s+ago\b", re.IGNORECASE)
_RELATIVE = re.compile(r"\b(last|this|past|previous)\s+(week(?:end)?|month|year)\b", re.IGNORECASE)
_SIMPLE = re.compile(r"\b(today|tonight|yesterday|the day before yesterday|last night)\b", re.IGNORECASE)
_WEEKDAY = re.compile(r"\b(?:(last|this past|past|on|this)\s+)?(Monday|Tuesday|Wednesday|Thursday|Friday|Saturday"
                      r"|Sunday)s?\b", re.IGNORECASE)  # fmt: skip
_MONTH_NAME = r"(January|February|March|April|May|June|July|August|September|October|November|December|Jan|Feb|Mar" \
              r"|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\.?"  # fmt: skip
_ORDINAL = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?:,?\s+(\d{4}))?"
_MONTH_DAY = re.compile(rf"\b{_MONTH_NAME}\s+{_ORDINAL}\b{_YEAR}")
_DAY_MONTH = re.compile(rf"\b{_ORDINAL}\s+(?:of\s+)?{_MONTH_NAME}\b{_YEAR}")
_IN_MONTH = re.compile(rf"\b(?:(in|during|of|since|early|late|mid|mid-|until|by|last|this)\s+)?{_MONTH_NAME}\b"
                       r"(?:\s+(\d{4}))?")  # fmt: skip
_ISO = re.compile(r"\b(\d{4})[-/](\d{1,2})[-/](\d{1,2})\b")


_MAYBE_TIME = re.compile(r"\d|ago|week|month|year|night|day|\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)",
                         re.IGNORECASE)  # fmt: skip
"""Something every pattern needs (a digit, "ago", a unit, a day's or a month's name): one search rules out
most queries, where the eight patterns took 50 µs of a 700 µs recall on memory://."""


def query_windows(query: str, as_of: datetime) -> list[tuple[float, float]]:
    """The windows of time ``query`` names, in epoch seconds, resolved against ``as_of`` (aware or UTC)."""
    return _windows(query, as_of) if _MAYBE_TIME.search(query) else []


def _windows(query: str, as_of: datetime) -> list[tuple[float, float]]:
    now = as_of if as_of.tzinfo else as_of.replace(tzinfo=UTC)
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    found: list[tuple[datetime, datetime]] = []
    taken: list[tuple[int, int]] = []  # spans already read: "May 3rd" is not also "in May"

    def add(match: re.Match[str], window: tuple[datetime, datetime] | None) -> None:
        if window is not None and not any(a < match.end() and match.start() < b for a, b in taken):
            found.append(window)
            taken.append(match.span())

    for match in _ISO.finditer(query):
        add(match, _day(int(match[1]), int(match[2]), int(match[3])))
    for pattern in (_MONTH_DAY, _DAY_MONTH):
        for match in pattern.finditer(query):
            month_first = pattern is _MONTH_DAY
            month, day = (match[1], match[2]) if month_first else (match[2], match[1])
            add(match, _named_day(_month_number(month), int(day), match[3], today))
    for match in _AGO.finditer(query):
        add(match, _ago(match[1].lower(), match[2].lower(), today))
    for match in _RELATIVE.finditer(query):
        add(match, _relative(match[1].lower(), match[2].lower(), today))
    for match in _SIMPLE.finditer(query):
        back = {"today": 0, "tonight": 0, "yesterday": 1, "last night": 1}.get(match[1].lower(), 2)
        add(match, (today - back * _DAY - _DAY, today - back * _DAY + 2 * _DAY))
    for match in _WEEKDAY.finditer(query):
        if match[2][0].isupper():  # "may" and "march" are verbs; weekdays are capitalised when they are days
            add(match, _weekday(_WEEKDAYS[match[2].lower()], today))
    for match in _IN_MONTH.finditer(query):
        if _is_month(match):
            add(match, _month(_month_number(match[2]), match[3], match[1], today))
    return [(start.timestamp(), end.timestamp()) for start, end in found]


def _month_number(name: str) -> int:
    lowered = name.lower().rstrip(".")
    return _MONTHS.get(lowered) or _MONTH_ABBR[lowered[:4] if lowered.startswith("sept") else lowered[:3]]


def _is_month(match: re.Match[str]) -> bool:
    """A month name is a month when capitalised, and "May" (a verb too) only after a preposition or before a
    year; abbreviations only with a year or a preposition ("Mar" alone is a word)."""
    name = match[2]
    if not name[0].isupper():
        return False
    if name.rstrip(".").lower() in ("may", "mar", "jan", "feb", "apr", "jun", "jul", "aug", "sep", "sept", "oct",
                                    "nov", "dec"):  # fmt: skip
        return bool(match[1] or match[3])
    return True


def _day(year: int, month: int, day: int) -> tuple[datetime, datetime] | None:
    try:
        start = datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return None
    return start - _DAY, start + 2 * _DAY


def _named_day(month: int, day: int, year: str | None, today: datetime) -> tuple[datetime, datetime] | None:
    """ "May 3rd": that day of the given year, else the latest one not after today."""
    if year:
        return _day(int(year), month, day)
    for candidate in (today.year, today.year - 1):
        window = _day(candidate, month, day)
        if window is not None and window[0] + _DAY <= today:
            return window
    return None


def _ago(count: str, unit: str, today: datetime) -> tuple[datetime, datetime]:
    n = int(count) if count.isdigit() else _NUMBERS[count]
    centre = today - timedelta(days=n * _UNIT_DAYS[unit])
    margin = timedelta(days=_MARGIN_DAYS[unit] * (1.5 if count in ("a few", "few", "several") else 1.0))
    return centre - margin, centre + _DAY + margin


def _relative(which: str, unit: str, today: datetime) -> tuple[datetime, datetime]:
    """ "last week" is the calendar week before this one; "this month" runs from its first day to today;
    "past"/"previous" read as "last". A day of margin either side."""
    this_start = {
        "week": today - timedelta(days=today.weekday()),
        "weekend": today - timedelta(days=today.weekday()),
        "month": today.replace(day=1),
        "year": today.replace(month=1, day=1),
    }[unit]
    if which == "this":
        return this_start - _DAY, today + 2 * _DAY
    if unit == "weekend":  # the Saturday and Sunday before this week
        return this_start - 2 * _DAY - _DAY, this_start + _DAY
    if unit == "week":
        start = this_start - 7 * _DAY
    elif unit == "month":
        start = (this_start - _DAY).replace(day=1)
    else:
        start = this_start.replace(year=this_start.year - 1)
    return start - _DAY, this_start + _DAY


def _weekday(weekday: int, today: datetime) -> tuple[datetime, datetime]:
    """The latest such day before today ("last Saturday" asked on a Saturday is a week ago)."""
    back = (today.weekday() - weekday) % 7 or 7
    day = today - back * _DAY
    return day - _DAY, day + 2 * _DAY


def _month(month: int, year: str | None, preposition: str | None, today: datetime) -> tuple[datetime, datetime]:
    """ "in May": May of the given year, else the latest May that has begun by today ("last May" the one
    before the current one when today is in May)."""
    if year:
        chosen = int(year)
    else:
        chosen = today.year if month <= today.month else today.year - 1
        if preposition and preposition.lower() == "last" and month == today.month:
            chosen -= 1
    start = datetime(chosen, month, 1, tzinfo=UTC)
    end = datetime(chosen + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    return start - _DAY, end + _DAY
