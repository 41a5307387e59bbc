"""Call and token budgets for a chat client, and the usage it reports.

A *call* is an HTTP request the server answered (any status, a 429 or a 500 included: the server did
work, and some providers bill or rate-limit those too). Requests that never got an answer (connection
refused, dropped, timed out) are not calls. A retry or a repair attempt is a call of its own.

The call limit is exact under concurrency: a request reserves its call before it is sent, on the event loop
with no await between the check and the reservation. Tokens are known only when an answer arrives, so the
token limit refuses requests once the total reaches it; requests already in flight may carry it past.
"""

from __future__ import annotations

import msgspec

from memkit._repr import short_repr
from memkit.errors import LLMBudgetError, ValidationError

__all__ = ["LLMBudget", "LLMUsage"]


class LLMBudget(msgspec.Struct, frozen=True):
    """Limits for one client: ``max_calls`` requests answered, ``max_tokens`` input + output tokens. None: no limit."""

    max_calls: int | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_calls", "max_tokens"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValidationError(f"LLMBudget.{name} must be a non-negative int or None, got {short_repr(value)}")


class LLMUsage(msgspec.Struct, frozen=True):
    """What a client has used so far: answered requests and the tokens the server reported."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class Meter:
    """Counts a client's usage and refuses a request before it is sent once the budget is spent."""

    def __init__(self, budget: LLMBudget | None) -> None:
        self.budget = budget or LLMBudget()
        self._calls = 0
        self._in_flight = 0
        self._input = 0
        self._output = 0

    @property
    def usage(self) -> LLMUsage:
        return LLMUsage(calls=self._calls, input_tokens=self._input, output_tokens=self._output)

    def reserve(self) -> None:
        """Claims one call for a request about to be sent; raises ``LLMBudgetError`` if none is left."""
        limit = self.budget.max_calls
        if limit is not None and self._calls + self._in_flight >= limit:
            raise LLMBudgetError(f"LLM call budget spent: {self._calls} of {limit} calls used (LLMBudget.max_calls)")
        tokens = self._input + self._output
        if self.budget.max_tokens is not None and tokens >= self.budget.max_tokens:
            raise LLMBudgetError(
                f"LLM token budget spent: {tokens} of {self.budget.max_tokens} tokens used (LLMBudget.max_tokens)"
            )
        self._in_flight += 1

    def answered(self) -> None:
        """The reserved request got an HTTP answer: it counts as a call."""
        self._in_flight -= 1
        self._calls += 1

    def unanswered(self) -> None:
        """The reserved request got no answer (connection error, timeout): its call is given back."""
        self._in_flight -= 1

    def add_tokens(self, input_tokens: int, output_tokens: int) -> None:
        self._input += max(input_tokens, 0)
        self._output += max(output_tokens, 0)
