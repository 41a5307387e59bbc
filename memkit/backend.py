"""The public backend contract: what a storage adapter implements and consumes."""

from memkit._backend import (
    Backend,
    Capabilities,
    FieldValue,
    FilterValue,
    Hit,
    Page,
    Query,
    Record,
    Scores,
    Vector,
    Weights,
)
from memkit._records import Scope
from memkit._url import StorageURL

__all__ = [
    "Backend",
    "Capabilities",
    "FieldValue",
    "FilterValue",
    "Hit",
    "Page",
    "Query",
    "Record",
    "Scope",
    "Scores",
    "StorageURL",
    "Vector",
    "Weights",
    "scope_matches",
]


def scope_matches(record_scope: Scope, wanted: Scope) -> bool:
    """True when every id set in ``wanted`` equals the record's."""
    return all(
        want is None or want == have
        for want, have in (
            (wanted.user_id, record_scope.user_id),
            (wanted.agent_id, record_scope.agent_id),
            (wanted.session_id, record_scope.session_id),
        )
    )
