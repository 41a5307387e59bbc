"""Shared helpers of the conformance suite: records, vectors, queries."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from memkit.backend import Backend, Query, Record, Scope, Weights

__all__ = [
    "COLLECTION", "DIM", "SIMILARITY_ONLY", "assert_vector_kept", "fields_of", "make_record", "query", "require",
    "unit",
]  # fmt: skip

DIM = 8
COLLECTION = "conformance"
SIMILARITY_ONLY = Weights(similarity=1.0, lexical=0.0, recency=0.0, importance=0.0)


def assert_vector_kept(got: Record, record: Record) -> None:
    """``got`` (read back) has ``record``'s vector, or none: exactly, or as a quantized store rounds it (int8: within
    half a step of a 127th of the row's largest magnitude; float16 is closer)."""
    if got.vector is not None:
        want = np.asarray(record.vector, np.float32)
        np.testing.assert_allclose(got.vector, want, rtol=0, atol=float(np.abs(want).max()) / 254 * 1.001 + 1e-6)


def unit(seed: int, dim: int = DIM) -> Any:
    vector = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return vector / np.linalg.norm(vector)


def make_record(
    record_id: str,
    user: str | None = "alice",
    *,
    text: str | None = None,
    seed: int | None = None,
    importance: float = 0.5,
    expires_at: float | None = None,
    fields: dict[str, Any] | None = None,
    agent: str | None = None,
    session: str | None = None,
) -> Record:
    return Record(
        id=record_id,
        scope=Scope(user_id=user, agent_id=agent, session_id=session),
        body=f"body:{record_id}".encode(),
        text=text,
        vector=None if seed is None else unit(seed),
        importance=importance,
        timestamp=time.time(),
        expires_at=expires_at,
        fields=fields or {},
    )


def query(scope: Scope, **kwargs: Any) -> Query:
    kwargs.setdefault("now", time.time())
    return Query(scope=scope, **kwargs)


def require(backend: Backend, capability: str) -> None:
    if not getattr(backend.capabilities, capability):
        pytest.skip(f"{type(backend).__name__} does not declare {capability}")


def fields_of(record: Record) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__struct_fields__}
