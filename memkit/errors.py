"""The memkit error tree.

Every error memkit raises derives from ``MemkitError``; driver errors are
mapped to the most specific class below and chained (``raise ... from exc``).

    MemkitError
    ├── NotOpenError                   (also a RuntimeError) a client used before open() or after aclose()
    ├── ConfigurationError
    │   ├── InvalidURLError
    │   ├── UnknownSchemeError
    │   └── MissingDependencyError
    ├── ValidationError                (also a ValueError)
    │   ├── InvalidVectorError
    │   │   └── DimensionMismatchError
    │   ├── ContentError
    │   └── ImportanceError
    ├── ScopeError
    ├── NotFoundError                  (also a KeyError)
    ├── CapabilityError
    ├── EmbeddingError
    ├── CorruptDataError
    │   └── SerializationError         a checkpoint cannot be decoded: malformed, truncated, oversized, hostile
    ├── CachedToolError                the tool failed before with the same arguments, and that failure is cached
    ├── BackendError
    │   ├── BackendUnavailableError    the server could not be reached
    │   ├── BackendRefusedError        reached, and it refused (credentials, database, role, DB index)
    │   ├── BackendTimeoutError        (also a TimeoutError)
    │   └── ConflictError              compare-and-set kept losing to concurrent writers
    ├── LLMError                       a chat model call failed
    │   ├── LLMUnavailableError        unreachable, or 429 / 5xx through every retry
    │   ├── LLMRefusedError            reached, and it refused the request (4xx: key, model, request)
    │   ├── LLMTimeoutError            (also a TimeoutError)
    │   ├── StructuredOutputError      the model's JSON stayed invalid after one repair attempt; .raw has it
    │   └── LLMBudgetError             the client's call or token budget is spent
    ├── SummarizerError                a summariser failed; the turns it was folding are kept
    └── WriterBusyError                observe(wait=False) found the background writer's queue full
"""

from __future__ import annotations

__all__ = [
    "BackendError",
    "BackendRefusedError",
    "BackendTimeoutError",
    "BackendUnavailableError",
    "CachedToolError",
    "CapabilityError",
    "ConfigurationError",
    "ConflictError",
    "ContentError",
    "CorruptDataError",
    "DimensionMismatchError",
    "EmbeddingError",
    "ImportanceError",
    "InvalidURLError",
    "InvalidVectorError",
    "LLMBudgetError",
    "LLMError",
    "LLMRefusedError",
    "LLMTimeoutError",
    "LLMUnavailableError",
    "MemkitError",
    "MissingDependencyError",
    "NotFoundError",
    "NotOpenError",
    "ScopeError",
    "SerializationError",
    "StructuredOutputError",
    "SummarizerError",
    "UnknownSchemeError",
    "ValidationError",
    "WriterBusyError",
]


class MemkitError(Exception):
    """Base class of every error memkit raises."""


class NotOpenError(MemkitError, RuntimeError):
    """A client was used before ``open()`` (or ``async with``) or after ``aclose()``."""

    @classmethod
    def closed(cls, owner: str | None, own_words: str) -> NotOpenError:
        """A backend's refusal while closed, naming the client that opens and closes it when there is one
        (a layer kept past ``async with Memkit(...)`` reached its backend, whose own words misled)."""
        if owner is None:
            return cls(own_words)
        return cls(f"{owner} is not open (never opened, or closed since), so its layers cannot be used: use "
                   "them inside 'async with Memkit(...) as mem:', or between 'await mem.open()' and "
                   "'await mem.aclose()'")  # fmt: skip


class ConfigurationError(MemkitError):
    """The configuration (URL, settings, installed extras) cannot work."""


class InvalidURLError(ConfigurationError):
    """A storage URL could not be parsed or misses a required part."""


class UnknownSchemeError(ConfigurationError):
    """No backend is registered for a URL scheme."""


class MissingDependencyError(ConfigurationError, ImportError):
    """An optional dependency is not installed; the message names the pip command."""


class ValidationError(MemkitError, ValueError):
    """Input was rejected before anything was written."""


class InvalidVectorError(ValidationError):
    """A vector has NaN or infinite values, or the wrong shape."""


class DimensionMismatchError(InvalidVectorError):
    """A vector's dimension differs from the collection's."""


class ContentError(ValidationError):
    """Content is empty or longer than the configured limit."""


class ImportanceError(ValidationError):
    """Importance is outside 0..1."""


class ScopeError(MemkitError):
    """A call lacks the user or agent scope it needs, or asked across scopes without opting in."""


class NotFoundError(MemkitError, KeyError):
    """The requested record does not exist in the given scope."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class CapabilityError(MemkitError):
    """The backend cannot do what was asked (e.g. vector search on plain Redis)."""


class EmbeddingError(MemkitError):
    """The embedder failed or returned something unusable."""


class CorruptDataError(MemkitError):
    """Stored data could not be decoded; nothing was changed."""


class SerializationError(CorruptDataError):
    """Stored bytes (a checkpoint) could not be decoded: malformed, truncated, too large, of an unknown format
    or version, or failing their integrity check. Nothing was loaded."""


class CachedToolError(MemkitError):
    """The tool failed earlier with the same arguments and the failure is cached (negative caching):
    ``tool``, ``error_type`` and ``error_message`` say what it raised then."""

    def __init__(self, message: str, *, tool: str, error_type: str, error_message: str) -> None:
        super().__init__(message)
        self.tool = tool
        self.error_type = error_type
        self.error_message = error_message


class BackendError(MemkitError):
    """The storage backend failed."""


class BackendUnavailableError(BackendError):
    """The storage server could not be reached."""


class BackendRefusedError(BackendError):
    """The storage server was reached and refused: wrong credentials, no such database, role or DB index."""


class BackendTimeoutError(BackendError, TimeoutError):
    """The storage server did not answer in time."""


class ConflictError(BackendError):
    """A compare-and-set kept losing to concurrent writers; nothing was changed. Retrying later may work."""


class LLMError(MemkitError):
    """A call to a chat model failed."""


class LLMUnavailableError(LLMError):
    """The model server could not be reached, or kept answering 429 / 5xx through every retry."""


class LLMRefusedError(LLMError):
    """The model server refused the request (a 4xx other than 429: API key, model name, request shape)."""


class LLMTimeoutError(LLMError, TimeoutError):
    """The model server did not answer in time."""


class StructuredOutputError(LLMError):
    """The model's structured output stayed invalid after one repair attempt. ``raw`` is its last text."""

    def __init__(self, message: str, *, raw: str, problem: str) -> None:
        super().__init__(message)
        self.raw = raw
        self.problem = problem


class LLMBudgetError(LLMError):
    """The client's budget of calls or tokens is spent; no request was sent."""


class SummarizerError(MemkitError):
    """A summariser failed or returned nothing usable; the turns it was folding stay in the history."""


class WriterBusyError(MemkitError):
    """``observe(..., wait=False)`` found the background writer's queue full; nothing was queued (retry, or
    call with ``wait=True`` to wait for room)."""
