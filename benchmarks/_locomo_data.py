"""Reading the LoCoMo data file: conversations, dated sessions, questions and their evidence."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["CATEGORIES", "Conversation", "Question", "Session", "load", "resolve_path"]

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
ENV_VAR = "MEMKIT_LOCOMO_PATH"


@dataclass(frozen=True)
class TurnData:
    dia_id: str
    speaker: str
    text: str


@dataclass(frozen=True)
class Session:
    at: datetime
    turns: list[TurnData]


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: list[str]
    """Evidence dia_ids that exist in the conversation (malformed or missing ones dropped)."""


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    sessions: list[Session]
    questions: list[Question]

    @property
    def n_turns(self) -> int:
        return sum(len(s.turns) for s in self.sessions)


def resolve_path(given: str | None) -> Path:
    path = given or os.environ.get(ENV_VAR)
    if not path:
        raise SystemExit(f"pass --data PATH or set {ENV_VAR} to the LoCoMo JSON file")
    if not Path(path).is_file():
        raise SystemExit(f"LoCoMo data file not found: {path}")
    return Path(path)


def _parse_date(text: str) -> datetime:
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def _turn_text(turn: dict[str, Any]) -> str:
    text = str(turn["text"])
    caption = turn.get("blip_caption")
    return f"{text} [shares an image: {caption}]" if caption else text


def _conversation(sample: dict[str, Any]) -> Conversation:
    raw = sample["conversation"]
    sessions = []
    number = 1
    while f"session_{number}" in raw:
        turns = [TurnData(t["dia_id"], t["speaker"], _turn_text(t)) for t in raw[f"session_{number}"]]
        sessions.append(Session(_parse_date(raw[f"session_{number}_date_time"]), turns))
        number += 1
    known = {t.dia_id for s in sessions for t in s.turns}
    questions = []
    for qa in sample["qa"]:
        ids = [part for item in qa.get("evidence", []) for part in re.split(r"[;\s]+", str(item)) if part]
        questions.append(Question(str(qa["question"]), int(qa["category"]), [i for i in ids if i in known]))
    return Conversation(str(sample["sample_id"]), sessions, questions)


def load(path: Path) -> list[Conversation]:
    return [_conversation(sample) for sample in json.loads(path.read_text())]
