"""What the configuration tests share: a working directory and an environment of their own."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from memkit import _config_values
from memkit._config import ENV_VARS, ConfigChoice, Resolved, resolve_config

CONFIG_VARS = (
    *ENV_VARS,
    *("MEMKIT_EMBED_MODEL", "MEMKIT_EMBED_BASE_URL", "MEMKIT_EMBED_API_KEY"),
    *("OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"),
)


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory (so the repository's own pyproject.toml is never read), no MEMKIT_* or
    provider variables from the developer's shell, and secrets warned about afresh."""
    for name in CONFIG_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(_config_values, "_warned", set())
    return tmp_path


def write(text: str, name: str = "memkit.toml") -> Path:
    path = Path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def resolved(config: ConfigChoice = None, **arguments: Any) -> Resolved:
    """``resolve_config`` as ``Memkit()`` calls it, with only the given arguments set."""
    given: Mapping[str, Any] = {"url": None, "embedder": None, "llm": None, "layer_urls": None, **arguments}
    return resolve_config(config, **given)
