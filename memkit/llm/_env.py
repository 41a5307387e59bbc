"""Where a chat client's model, endpoint and key come from: arguments first, then the environment.

``MEMKIT_LLM_MODEL``, ``MEMKIT_LLM_BASE_URL`` and ``MEMKIT_LLM_API_KEY`` configure the provider that
``MEMKIT_LLM_PROVIDER`` names (either provider while it is unset); the providers' own ``OPENAI_BASE_URL`` /
``OPENAI_API_KEY`` and ``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY`` come next. There is no default model:
a wrong guess would cost money or fail late, so a missing one is a ``ConfigurationError`` naming the variable.
"""

from __future__ import annotations

import os
from typing import Literal, NamedTuple

import httpx

from memkit.errors import ConfigurationError

__all__ = ["MEMKIT_VARS", "Provider", "Settings", "key_hint", "settings_for"]

Provider = Literal["openai", "anthropic"]

MEMKIT_VARS = ("MEMKIT_LLM_PROVIDER", "MEMKIT_LLM_BASE_URL", "MEMKIT_LLM_MODEL", "MEMKIT_LLM_API_KEY")

HOSTED: dict[Provider, str] = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
_URL_VARS: dict[Provider, tuple[str, str]] = {
    "openai": ("MEMKIT_LLM_BASE_URL", "OPENAI_BASE_URL"),
    "anthropic": ("MEMKIT_LLM_BASE_URL", "ANTHROPIC_BASE_URL"),
}
_KEY_VARS: dict[Provider, tuple[str, str]] = {
    "openai": ("MEMKIT_LLM_API_KEY", "OPENAI_API_KEY"),
    "anthropic": ("MEMKIT_LLM_API_KEY", "ANTHROPIC_API_KEY"),
}


class Settings(NamedTuple):
    model: str
    base_url: str
    api_key: str | None


def key_hint(provider: Provider) -> str:
    """The variables an API key is read from, for error messages."""
    return " or ".join(_KEY_VARS[provider])


def settings_for(provider: Provider, model: str | None, base_url: str | None, api_key: str | None) -> Settings:
    """The client's settings; raises ``ConfigurationError`` naming the variable when one it needs is missing."""
    model = model or _env("MEMKIT_LLM_MODEL", provider=provider)
    if not model:
        raise ConfigurationError(f"no model for the {provider} chat client: pass model=... or set MEMKIT_LLM_MODEL")
    base = (base_url or _env(*_URL_VARS[provider], provider=provider) or HOSTED[provider]).rstrip("/")
    key = api_key or _env(*_KEY_VARS[provider], provider=provider)
    if not key and _host(base) == _host(HOSTED[provider]):
        raise ConfigurationError(
            f"{base} needs an API key: set {key_hint(provider)}, or pass api_key=... "
            "(a local server such as Ollama or vLLM needs its base URL instead)"
        )
    return Settings(model, base, key or None)


def _env(*names: str, provider: Provider) -> str | None:
    """The first non-empty variable of ``names``; MEMKIT_LLM_* ones only when they configure this provider."""
    chosen = (os.environ.get("MEMKIT_LLM_PROVIDER") or "").strip().lower()
    memkit_applies = chosen in ("", provider)
    for name in names:
        if name.startswith("MEMKIT_") and not memkit_applies:
            continue
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


def _host(url: str) -> str:
    try:
        return httpx.URL(url).host
    except httpx.InvalidURL:
        return ""
