"""Turning ``llm=...`` into a chat client, or into None: memkit's offline path when nothing is configured."""

from __future__ import annotations

import os

from memkit._repr import short_repr
from memkit.errors import ConfigurationError
from memkit.llm._anthropic import AnthropicChat
from memkit.llm._env import MEMKIT_VARS, Provider
from memkit.llm._openai import OpenAIChat
from memkit.llm._protocol import LLM

__all__ = ["resolve_llm"]

_CHOICES = "'auto', 'none', 'openai', 'openai:MODEL', 'anthropic', 'anthropic:MODEL' or an LLM"


def resolve_llm(choice: LLM | str | None = None) -> LLM | None:
    """An LLM from ``choice``, or from the environment for None / ``"auto"``; None when nothing is configured.

    Only the ``MEMKIT_LLM_*`` variables switch a model on: an ``OPENAI_API_KEY`` set for other tools must not
    make memkit spend on it. ``"openai:MODEL"`` / ``"anthropic:MODEL"`` pick the provider (and model); the
    rest comes from the environment. Half a configuration raises ``ConfigurationError`` naming what to set.
    A client made here belongs to the caller, who closes it (``aclose()`` or ``async with``).
    """
    if choice is None or choice == "auto":
        return _from_environment()
    if isinstance(choice, str):
        if choice == "none":
            return None
        name, _, model = choice.partition(":")  # Ollama model names have colons of their own: llama3.2:3b
        return _client(_provider(name, f"llm={choice!r}"), model or None)
    if isinstance(choice, type) or not isinstance(choice, LLM):
        raise ConfigurationError(f"llm must be {_CHOICES}, got {short_repr(choice)}")
    return choice


def _from_environment() -> LLM | None:
    if not any(os.environ.get(name, "").strip() for name in MEMKIT_VARS):
        return None
    named = os.environ.get("MEMKIT_LLM_PROVIDER", "").strip()
    if named.lower() == "none":  # switched off on purpose, as Memkit's configuration reads it
        return None
    if named:
        return _client(_provider(named, f"MEMKIT_LLM_PROVIDER={named!r}"), None)
    base = os.environ.get("MEMKIT_LLM_BASE_URL", "")
    return _client("anthropic" if "anthropic.com" in base else "openai", None)


def _provider(name: str, where: str) -> Provider:
    lowered = name.strip().lower()
    if lowered == "openai":
        return "openai"
    if lowered == "anthropic":
        return "anthropic"
    raise ConfigurationError(f"{where}: unknown provider {name!r}; use {_CHOICES}")


def _client(provider: Provider, model: str | None) -> LLM:
    return OpenAIChat(model) if provider == "openai" else AnthropicChat(model)
