"""Reading LongMemEval files (.json or .json.gz): questions, their dated sessions, and the evidence.

The memory is keyed by user turns, as in the paper's turn granularity: a turn's evidence flag is its
``has_answer``, a session's is its id in ``answer_session_ids``. Assistant turns are not stored.
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["ENV_VAR", "Item", "SessionData", "TurnData", "load", "parse_date", "resolve_path"]

ENV_VAR = "MEMKIT_LONGMEMEVAL_PATH"


@dataclass(frozen=True)
class TurnData:
    index: int
    """The message's position in its session (assistant messages counted), as in the data."""
    text: str
    has_answer: bool


@dataclass(frozen=True)
class SessionData:
    session_id: str
    at: datetime
    turns: list[TurnData]
    """User turns only."""


@dataclass(frozen=True)
class Item:
    question_id: str
    question_type: str
    question: str
    at: datetime
    sessions: list[SessionData]
    answer_sessions: list[str]

    @property
    def abstention(self) -> bool:
        return self.question_id.endswith("_abs")

    @property
    def evidence_turns(self) -> set[tuple[str, int]]:
        return {(s.session_id, t.index) for s in self.sessions for t in s.turns if t.has_answer}

    @property
    def n_turns(self) -> int:
        return sum(len(s.turns) for s in self.sessions)


def resolve_path(given: str | None) -> Path:
    path = given or os.environ.get(ENV_VAR)
    if not path:
        raise SystemExit(f"pass --data PATH or set {ENV_VAR} to a LongMemEval JSON (or .json.gz) file")
    if not Path(path).is_file():
        raise SystemExit(f"LongMemEval data file not found: {path}")
    return Path(path)


def parse_date(text: str) -> datetime:
    """ "2023/05/30 (Tue) 23:40" -> that moment, UTC."""
    day, _, rest = text.partition(" (")
    return datetime.strptime(day + rest.rpartition(")")[2], "%Y/%m/%d %H:%M").replace(tzinfo=UTC)


def _item(raw: dict[str, Any]) -> Item:
    sessions = []
    for sid, date, messages in zip(raw["haystack_session_ids"], raw["haystack_dates"], raw["haystack_sessions"],
                                   strict=True):  # fmt: skip
        turns = [TurnData(at, str(m["content"]), bool(m.get("has_answer"))) for at, m in enumerate(messages)
                 if m["role"] == "user" and str(m["content"]).strip()]  # fmt: skip
        sessions.append(SessionData(str(sid), parse_date(date), turns))
    answers = [str(s) for s in raw.get("answer_session_ids", [])]
    return Item(str(raw["question_id"]), str(raw["question_type"]), str(raw["question"]),
                parse_date(raw["question_date"]), sessions, answers)  # fmt: skip


def load(path: Path) -> list[Item]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as file:
        return [_item(raw) for raw in json.loads(file.read())]
