"""Settings from arguments and the environment, resolve_llm, and what importing memkit.llm costs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from memkit.errors import ConfigurationError
from memkit.llm import LLM, AnthropicChat, OpenAIChat, resolve_llm
from memkit.testing.llm_double import LLMDouble
from tests.llm._clients import USER

pytestmark = pytest.mark.anyio


def test_nothing_configured_is_the_offline_path(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_llm() is None and resolve_llm("auto") is None
    monkeypatch.setenv("OPENAI_API_KEY", "sk-for-another-tool")  # a key alone must not switch a model on
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-for-another-tool")
    assert resolve_llm() is None
    monkeypatch.setenv("MEMKIT_LLM_MODEL", "gpt-test")
    assert isinstance(resolve_llm(), OpenAIChat)
    assert resolve_llm("none") is None  # explicitly offline, whatever the environment says


async def test_openai_from_the_environment(monkeypatch: pytest.MonkeyPatch, double: LLMDouble) -> None:
    monkeypatch.setenv("MEMKIT_LLM_MODEL", "llama3.2:3b")
    monkeypatch.setenv("OPENAI_BASE_URL", double.openai_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    double.script("openai", "from env")
    llm = resolve_llm()
    assert isinstance(llm, OpenAIChat) and llm.model_id == f"openai:{double.openai_url}:llama3.2:3b"
    async with llm:
        assert await llm.complete(USER) == "from env"
    (request,) = double.requests("openai")
    assert request.body["model"] == "llama3.2:3b" and request.headers["authorization"] == "Bearer sk-env"


async def test_memkit_variables_come_before_the_providers(monkeypatch: pytest.MonkeyPatch, double: LLMDouble) -> None:
    monkeypatch.setenv("MEMKIT_LLM_PROVIDER", "anthropic")
    monkeypatch.setenv("MEMKIT_LLM_MODEL", "claude-env")
    monkeypatch.setenv("MEMKIT_LLM_BASE_URL", double.anthropic_url)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")  # overridden by MEMKIT_LLM_BASE_URL
    monkeypatch.setenv("MEMKIT_LLM_API_KEY", "sk-memkit")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-other")
    double.script("anthropic", "claude here")
    llm = resolve_llm()
    assert isinstance(llm, AnthropicChat)
    async with llm:
        assert await llm.complete(USER) == "claude here"
    assert double.requests("anthropic")[0].headers["x-api-key"] == "sk-memkit"


def test_provider_and_model_from_a_string(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1")  # Ollama: no key needed
    llm = resolve_llm("openai:qwen2.5:7b")
    assert isinstance(llm, OpenAIChat) and llm.model_id.endswith(":qwen2.5:7b")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    monkeypatch.setenv("MEMKIT_LLM_MODEL", "claude-from-env")
    assert resolve_llm("anthropic").model_id == "anthropic:https://api.anthropic.com:claude-from-env"  # type: ignore[union-attr]


def test_an_anthropic_base_url_picks_anthropic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMKIT_LLM_BASE_URL", "https://api.anthropic.com")
    monkeypatch.setenv("MEMKIT_LLM_MODEL", "claude-x")
    monkeypatch.setenv("MEMKIT_LLM_API_KEY", "sk-ant")
    assert isinstance(resolve_llm(), AnthropicChat)


def test_half_a_configuration_names_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMKIT_LLM_PROVIDER", "openai")
    with pytest.raises(ConfigurationError, match="set MEMKIT_LLM_MODEL"):
        resolve_llm()
    monkeypatch.setenv("MEMKIT_LLM_MODEL", "gpt-test")
    with pytest.raises(
        ConfigurationError, match=r"api.openai.com/v1 needs an API key: set MEMKIT_LLM_API_KEY or OPENAI"
    ):
        resolve_llm()
    monkeypatch.setenv("MEMKIT_LLM_PROVIDER", "anthropic")
    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
        resolve_llm()
    monkeypatch.setenv("MEMKIT_LLM_PROVIDER", "gemini")
    with pytest.raises(ConfigurationError, match="MEMKIT_LLM_PROVIDER='gemini'"):
        resolve_llm()


def test_memkit_variables_configure_only_the_provider_they_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMKIT_LLM_PROVIDER", "openai")
    monkeypatch.setenv("MEMKIT_LLM_MODEL", "gpt-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    with pytest.raises(ConfigurationError, match="anthropic chat client"):
        AnthropicChat()


def test_choices_that_are_not_llms_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="'auto', 'none'"):
        resolve_llm("gemini:pro")
    with pytest.raises(ConfigurationError, match="llm must be"):
        resolve_llm(OpenAIChat)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="llm must be"):
        resolve_llm(42)  # type: ignore[arg-type]


def test_an_llm_is_used_as_given() -> None:
    class Scripted:
        model_id = "scripted"

        async def complete(self, messages: object, *, max_tokens: object = None, temperature: object = None) -> str:
            return "scripted"

        async def structured(self, messages: object, schema: object, *, max_tokens: object = None) -> object:
            raise NotImplementedError

    mine = Scripted()
    assert isinstance(mine, LLM) and resolve_llm(mine) is mine


def test_the_key_never_shows_in_a_repr() -> None:
    for llm in (OpenAIChat("m", api_key="sk-secret-1"), AnthropicChat("c", api_key="sk-secret-2")):
        assert "secret" not in repr(llm) and "model=" in repr(llm)


def test_importing_memkit_llm_stays_light() -> None:
    heavy = ("numpy", "numba", "memkit.embedders", "memkit.layers")
    code = f"import sys, memkit.llm; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
