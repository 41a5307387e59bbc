"""A bad configuration value names the file (or the variable), the key and what is accepted."""

from __future__ import annotations

from pathlib import Path

import pytest

from memkit import Memkit
from memkit.errors import ConfigurationError, InvalidURLError, UnknownSchemeError
from tests.core._config_env import isolated, write

__all__ = ["isolated"]  # the autouse fixture, imported so pytest finds it

FILE_CASES = [
    # unknown keys, a misspelled layer among them
    ("checkpoint = {}", ["memkit.toml: unknown key 'checkpoint'", "accepted keys: url, embedder, llm, long_term",
                         "did you mean 'checkpoints'?"]),
    ("[long_term]\nhalf_life = 3", ["memkit.toml: unknown key 'long_term.half_life'", "half_life_days",
                                    "did you mean 'half_life_days'?"]),
    ("[working]\nmax_keys = 3", ["unknown key 'working.max_keys'", "accepted keys: url"]),
    # wrong types
    ('[long_term]\nhalf_life_days = "x"', ["memkit.toml: long_term.half_life_days: expected `float`, got `str`",
                                           "accepted: a number"]),
    ("[long_term]\ndefault_k = 1.5", ["long_term.default_k: expected `int`, got `float`", "accepted: an integer"]),
    ("[graph]\nfunctional = [1]", ["graph.functional[0]: expected `str`, got `int`", "accepted: an array"]),
    ("graph = 3", ["memkit.toml: graph: expected a table ([graph]), got an integer"]),
    ('[llm]\nmodel = 3\nbase_url = "http://127.0.0.1:9/v1"', ["llm.model: expected `str`, got `int`",
                                                              "accepted: a string"]),
    # values the layers' own checks refuse
    ("[long_term]\nhalf_life_days = -1", ["memkit.toml: long_term.half_life_days", "(0, 1,000,000]"]),
    ('[long_term]\nfusion = "x"', ["long_term.fusion: invalid value 'x'", 'accepted: "blend" or "rrf"']),
    ("[episodic]\nweights = { similarity = -1 }", ["episodic.weights", "similarity must be a finite number >= 0",
                                                   "accepted: a table with keys similarity, lexical"]),
    ("[graph]\nmax_depth = 100", ["memkit.toml: graph.max_depth", "1..10"]),
    ("[checkpoints]\nkeep_last = 0", ["memkit.toml: checkpoints.keep_last", "integer >= 1"]),
    ('[short_term]\ntokenizer = "x"', ["short_term.tokenizer", "'auto', 'estimate', 'tiktoken'"]),
    ('[episodic]\nttl = "x"', ["episodic.ttl", 'ISO 8601 duration such as "P30D"']),
    # keys a file cannot hold, or choices it names wrongly
    ('[short_term]\non_error = "log"', ["short_term.on_error: takes a callable", "Memkit(short_term=...)"]),
    ('[short_term]\nsummarizer = "gpt"', ["short_term.summarizer: unknown summarizer 'gpt'", '"extractive" or "llm"']),
    ('[short_term]\nsummarizer = "llm"', ["short_term.summarizer", "needs a model", "[llm]"]),
    ('embedder = "x"', ["memkit.toml: embedder: unknown embedder 'x'", '"hashing"', '"openai:MODEL"']),
    ("embedder = 3", ["memkit.toml: embedder: expected a string or a table, got an integer"]),
    ('[embedder]\nprovider = "hashing"\nmodel = "m"', ["unknown key 'embedder.model' for provider 'hashing'",
                                                       "accepted keys: provider, dim"]),
    ('[embedder]\nprovider = "hashing"\ndim = 3', ["memkit.toml: embedder", "dim must be an integer"]),
    ('[llm]\nprovider = "x"', ["memkit.toml: llm.provider: unknown provider 'x'", "openai, anthropic, none"]),
    ('[llm]\nprovider = "openai"\ndefault_max_tokens = 5', ["unknown key 'llm.default_max_tokens' for provider "
                                                            "'openai'", "structured"]),
    ('[llm]\nbase_url = "http://127.0.0.1:9/v1"', ["memkit.toml: llm", "no model", "MEMKIT_LLM_MODEL"]),
    ('[llm]\nmodel = "m"\napi_key_env = "NOT_SET_ANYWHERE"', ["llm.api_key_env: $NOT_SET_ANYWHERE is not set",
                                                              "environment variable"]),
    ('[llm]\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\nbudget = { max_calls = -1 }',
     ["llm.budget", "max_calls must be a non-negative int"]),
    ('[checkpoints]\nencryption_key_env = "NOT_SET_ANYWHERE"', ["checkpoints.encryption_key_env",
                                                                "$NOT_SET_ANYWHERE is not set", "base64"]),
    # not TOML at all
    ("url = ", ["memkit.toml: not valid TOML"]),
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), FILE_CASES, ids=[case[0][:40] for case in FILE_CASES])
def test_bad_file_values_name_file_key_and_accepted(text: str, expected: list[str]) -> None:
    write(text + "\n")
    with pytest.raises(ConfigurationError) as caught:
        Memkit()  # no embedder= argument: it would win over the file's, which is then never built
    for part in expected:
        assert part in str(caught.value)


@pytest.mark.parametrize(
    ("text", "error", "expected"),
    [
        ('url = "nourl"', InvalidURLError, ["memkit.toml: url: not a storage URL", "'sqlite:///memories.db'"]),
        ("url = 5", ConfigurationError, ["memkit.toml: url: expected a string, got an integer", "sqlite:///"]),
        ('[checkpoints]\nurl = "foo://x"', UnknownSchemeError, ["memkit.toml: checkpoints.url: no backend for "
                                                                "scheme 'foo'", "memory", "redis", "sqlite"]),
        ('[checkpoints]\nurl = "sqlite:///x.db\\n"', InvalidURLError, ["checkpoints.url", "control character"]),
    ],
)  # fmt: skip
def test_bad_urls(text: str, error: type[Exception], expected: list[str]) -> None:
    write(text + "\n")
    with pytest.raises(error) as caught:
        Memkit(embedder="hashing")
    for part in expected:
        assert part in str(caught.value)


def test_pyproject_keys_are_named_as_written_there() -> None:
    write('[tool.memkit.long_term]\nhalf_life_days = "x"\n', "pyproject.toml")
    with pytest.raises(ConfigurationError, match=r"pyproject.toml: tool.memkit.long_term.half_life_days: expected"):
        Memkit(embedder="hashing")
    write("[tool]\nmemkit = 3\n", "pyproject.toml")
    with pytest.raises(ConfigurationError, match=r"tool.memkit must be a table"):
        Memkit(embedder="hashing")


@pytest.mark.parametrize(
    ("name", "value", "error", "expected"),
    [
        ("MEMKIT_EMBEDDER", "x", ConfigurationError, ["MEMKIT_EMBEDDER: unknown embedder 'x'", '"hashing"']),
        ("MEMKIT_EMBEDDER", "local:model", ConfigurationError, ["MEMKIT_EMBEDDER: unknown embedder", "openai:MODEL"]),
        ("MEMKIT_URL", "foo://x", UnknownSchemeError, ["MEMKIT_URL: no backend for scheme 'foo'", "sqlite"]),
        ("MEMKIT_CHECKPOINTS_URL", "nourl", InvalidURLError, ["MEMKIT_CHECKPOINTS_URL: not a storage URL"]),
        ("MEMKIT_LLM_PROVIDER", "x", ConfigurationError, ["MEMKIT_LLM_PROVIDER: unknown provider 'x'",
                                                          "openai, anthropic, none"]),
        ("MEMKIT_CONFIG", "missing.toml", ConfigurationError, ["'missing.toml' (from $MEMKIT_CONFIG) does not exist"]),
    ],
)  # fmt: skip
def test_bad_environment_values_name_the_variable(
    name: str, value: str, error: type[Exception], expected: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(error) as caught:
        Memkit(embedder=None if name == "MEMKIT_EMBEDDER" else "hashing")
    for part in expected:
        assert part in str(caught.value)


def test_bad_config_arguments(isolated: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"'nope.toml' \(from Memkit\(config=...\)\) does not exist"):
        Memkit(config="nope.toml")
    with pytest.raises(ConfigurationError, match="config must be a path to a TOML file, False or None"):
        Memkit(config=3)  # type: ignore[arg-type]
    write('[project]\nname = "x"\n', "pyproject.toml")
    with pytest.raises(
        ConfigurationError, match=r"pyproject.toml \(from Memkit\(config=...\)\) has no \[tool.memkit\]"
    ):
        Memkit(config=isolated / "pyproject.toml")
    write("[llm]\napi_key_env = 'A'\napi_key = 'b'\n")
    with pytest.raises(ConfigurationError, match=r"llm\.api_key: give api_key_env or api_key, not both"):
        Memkit(embedder="hashing")


def test_arguments_keep_their_own_checks() -> None:
    """A configuration does not swallow the client's messages about its own arguments."""
    write('url = "memory://"\n[checkpoints]\nurl = "memory://"\n')
    with pytest.raises(ConfigurationError, match="layer_urls must be a mapping"):
        Memkit(layer_urls=["memory://"])  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="layer_urls names unknown layers 'checkpoint'"):
        Memkit(layer_urls={"checkpoint": "memory://"})
    with pytest.raises(InvalidURLError):
        Memkit("")
