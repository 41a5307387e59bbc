"""The one place memkit reads the clock and converts times: aware UTC datetimes outside, epoch floats inside."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from memkit._repr import short_repr
from memkit.errors import ValidationError

__all__ = ["epoch", "from_epoch", "new_id", "now_epoch", "utcnow"]


def utcnow() -> datetime:
    return datetime.now(UTC)


def now_epoch() -> float:
    return utcnow().timestamp()


def new_id() -> str:
    return uuid.uuid4().hex


def epoch(moment: datetime) -> float:
    if moment.tzinfo is None:
        raise ValidationError(f"datetime {short_repr(moment)} has no timezone; use an aware datetime (e.g. UTC)")
    return moment.timestamp()


def from_epoch(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
