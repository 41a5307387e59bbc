from __future__ import annotations

from collections.abc import Iterator

import pytest

from memkit.testing.llm_double import LLMDouble

_ENV = (
    "MEMKIT_LLM_PROVIDER",
    "MEMKIT_LLM_BASE_URL",
    "MEMKIT_LLM_MODEL",
    "MEMKIT_LLM_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_KEY",
)


@pytest.fixture(autouse=True)
def _no_llm_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The clients read the environment: a developer's own keys must not leak into (or break) these tests."""
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def double() -> Iterator[LLMDouble]:
    with LLMDouble() as served:
        yield served
