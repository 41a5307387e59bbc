"""The JSON Lines format of ``memkit export`` and ``memkit import``, and the resume files of both.

The first line is a header, ``{"memkit_export": 1, "collection": "long_term", "model_id": ..., "dim": ...}``
(``model_id`` and ``dim`` when the lines carry vectors); each further line is one memory, with its scope
as flat fields::

    {"id": "...", "user_id": "ada", "kind": "fact", "content": "I am allergic to peanuts.", "importance": 0.9,
     "created_at": "2025-01-02T10:00:00Z", "metadata": {}, "vector": "<base64 of little-endian float32>"}

Only ``content`` and a ``user_id`` or ``agent_id`` are required, so a hand-written file imports too (a file
without a header has no vectors the importer trusts: its memories are embedded). ``vector`` may also be a
list of numbers. Unknown fields are refused, so a misspelt one is reported instead of dropped.
"""

from __future__ import annotations

import base64
import json
import math
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from memkit.cli._output import CliError, ExitCode

__all__ = ["FORMAT_VERSION", "Header", "Line", "ResumeFile", "encode_vector", "raw_vector", "unit_rows", "vector_bytes"]

FORMAT_VERSION = 1
_UNIT = 1e-4
"""How far a vector's norm may be from 1 and count as unit (float32 rounding of a normalised vector)."""


class Header(msgspec.Struct, kw_only=True, omit_defaults=True):
    memkit_export: int
    collection: str = "long_term"
    model_id: str | None = None
    dim: int | None = None


class Line(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    content: str
    id: str | None = None
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    kind: str = "fact"
    importance: float = 0.5
    source: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    expires_at: datetime | None = None
    last_accessed_at: datetime | None = None
    access_count: int = 0
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    context: str | None = None
    superseded_by: str | None = None
    """The id of the memory that replaced this one (``supersede``): history, left out of recall."""
    superseded_at: datetime | None = None
    vector: bytes | list[float] | None = None
    """Base64 in the file (msgspec decodes and encodes it: 4 us a line, against 10 us for ``base64``), or a list."""


def vector_bytes(vector: Any) -> bytes:
    """The little-endian float32 bytes a line's ``vector`` holds (written as base64: exact, where a decimal list
    would round, a third of its size, and fast to read)."""
    return np.asarray(vector, dtype="<f4").tobytes()


def encode_vector(vector: Any) -> str:
    """A vector as the base64 text a line holds (for writing lines by hand)."""
    return base64.b64encode(vector_bytes(vector)).decode()


def raw_vector(value: bytes | list[float], dim: int) -> np.ndarray:
    """The line's vector as float32 of the header's length (its values are checked per batch: ``unit_rows``)."""
    if isinstance(value, bytes):
        if len(value) % 4:
            raise ValueError(f"vector is not base64 of float32 values: {len(value)} bytes is not a whole number")
        vector = np.frombuffer(value, dtype="<f4")
    else:
        vector = np.asarray(value, dtype=np.float32)
    if vector.shape != (dim,):
        raise ValueError(f"vector has {vector.size} values; the header's model has dim {dim}")
    return vector


def unit_rows(vectors: list[np.ndarray]) -> tuple[list[np.ndarray], list[str | None]]:
    """Each vector as a unit vector, or the reason it cannot be one; norms computed for the batch at once."""
    if not vectors:
        return [], []
    matrix = np.stack(vectors)
    with np.errstate(over="ignore", invalid="ignore"):
        norms = np.linalg.norm(matrix, axis=1)
    rows: list[np.ndarray] = []
    problems: list[str | None] = []
    for vector, norm in zip(vectors, norms.tolist(), strict=True):
        if not math.isfinite(norm) or norm == 0.0:  # a NaN or infinite value makes the norm so
            rows.append(vector)
            problems.append("vector has NaN, infinite or only zero values")
        else:  # exported vectors are unit already: kept bit for bit
            rows.append(vector if abs(norm - 1.0) <= _UNIT else (vector / norm).astype(np.float32))
            problems.append(None)
    return rows, problems


class ResumeFile:
    """Where an export or import stopped, beside its file: rerunning the same command continues there.

    It names what it belongs to (the other file's size and modification time, the storage URL and the
    options), so it never resumes a different file or store; it is deleted when the command completes."""

    def __init__(self, path: Path, identity: dict[str, Any]) -> None:
        self.path = path
        self.identity = identity

    def load(self) -> dict[str, Any] | None:
        try:
            saved = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return None  # a torn or foreign file: start over
        if not isinstance(saved, dict) or saved.get("identity") != self.identity:
            return None
        return saved

    def save(self, position: dict[str, Any]) -> None:
        # Written beside and renamed over: a crash mid-write leaves the previous position, never half of one.
        partial = self.path.with_name(self.path.name + ".tmp")
        try:
            partial.write_text(json.dumps({"identity": self.identity, **position}))
            os.replace(partial, self.path)
        except OSError as exc:
            raise CliError(f"cannot write the resume file {self.path}: {exc}", "pass --state PATH somewhere "
                           "writable", ExitCode.UNREACHABLE) from exc  # fmt: skip

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def file_identity(path: Path) -> dict[str, Any]:
    stat = path.stat()
    return {"file": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
