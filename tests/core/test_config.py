"""Configuration from memkit.toml, [tool.memkit] and MEMKIT_* variables: precedence, lookup, per-layer URLs.

Precedence is arguments > environment > file > defaults, key by key; every pair is tested below. Each test runs
in a working directory of its own with no MEMKIT_* variables (``isolated``).
"""

from __future__ import annotations

import base64
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from memkit import Memkit
from memkit._client import DEFAULT_URL, LAYERS
from memkit._config import ENV_VARS, load_config
from memkit._config_values import LAYER_NAMES
from memkit._url import StorageURL
from memkit.embedders import CachedEmbedder, HashingEmbedder, LocalEmbedder, OpenAICompatibleEmbedder
from memkit.layers.longterm import LongTermConfig
from memkit.layers.shortterm import ExtractiveSummarizer, LLMSummarizer
from memkit.llm import AnthropicChat, OpenAIChat, resolve_llm
from memkit.testing.llm_double import LLMDouble, text_reply
from tests.core._config_env import CONFIG_VARS, isolated, resolved, write

__all__ = ["isolated"]  # the autouse fixture, imported so pytest finds it

ARG, ENV, FILE = "memory://?dtype=float16", "memory://?dtype=int8", "memory://?dtype=float32"


@pytest.fixture
def double() -> Iterator[LLMDouble]:
    with LLMDouble() as served:
        yield served


def test_constants_agree_with_the_client() -> None:
    assert LAYER_NAMES == LAYERS
    assert DEFAULT_URL == "sqlite:///memkit.db"
    assert {f"MEMKIT_{name.upper()}_URL" for name in LAYERS} <= set(ENV_VARS)


def test_no_config_at_all_is_todays_default() -> None:
    loaded = load_config()
    assert (loaded.file, loaded.url, loaded.layer_urls, loaded.embedder, loaded.llm) == (
        None, StorageURL(DEFAULT_URL), {}, None, None,
    )  # fmt: skip
    config = resolved()
    assert (config.embedder, config.llm, config.layer_urls, config.long_term, config.owned) == ("auto", None, None,
                                                                                                None, ())  # fmt: skip
    assert Memkit(embedder="hashing").url == StorageURL(DEFAULT_URL)


# -- precedence: each pair -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argument", "env", "file", "expected"),
    [
        (ARG, ENV, FILE, ARG),  # argument > environment (and file)
        (ARG, None, FILE, ARG),  # argument > file
        (ARG, ENV, None, ARG),  # argument > environment
        (None, ENV, FILE, ENV),  # environment > file
        (None, None, FILE, FILE),  # file > default
        (None, ENV, None, ENV),  # environment > default
        (None, None, None, DEFAULT_URL),
    ],
)
def test_url_precedence(
    argument: str | None, env: str | None, file: str | None, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if env:
        monkeypatch.setenv("MEMKIT_URL", env)
    if file:
        write(f'url = "{file}"\n')
    assert Memkit(argument, embedder="hashing").url == StorageURL(expected)


@pytest.mark.parametrize(
    ("argument", "env", "file", "expected"),
    [
        (ARG, ENV, FILE, ARG),
        (ARG, None, FILE, ARG),
        (None, ENV, FILE, ENV),
        (None, None, FILE, FILE),
        (None, None, None, None),  # none of its own: the layer uses the main URL
    ],
)
def test_layer_url_precedence(
    argument: str | None, env: str | None, file: str | None, expected: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if env:
        monkeypatch.setenv("MEMKIT_CHECKPOINTS_URL", env)
    write('url = "memory://"\n' + (f'[checkpoints]\nurl = "{file}"\n' if file else ""))
    config = resolved(layer_urls={"checkpoints": argument} if argument else None)
    got = (config.layer_urls or {}).get("checkpoints")
    assert (StorageURL(got) if got else None) == (StorageURL(expected) if expected else None)


def test_each_key_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """An argument or variable for the main URL leaves a layer's URL from the file in place, and None in
    layer_urls= means "not given", so the configuration still applies."""
    write(f'url = "{FILE}"\n[tool_cache]\nurl = "{ENV}"\n')
    monkeypatch.setenv("MEMKIT_URL", "memory://")
    config = resolved(url=ARG, layer_urls={"tool_cache": None, "working": ARG})
    assert config.url == ARG
    assert config.layer_urls == {"tool_cache": StorageURL(ENV), "working": ARG}


@pytest.mark.parametrize(
    ("argument", "env", "file", "expected"),
    [
        ("hashing", "local", 'embedder = "local"', "hashing"),  # argument > environment > file
        ("hashing", None, 'embedder = "local"', "hashing"),  # argument > file
        (None, "hashing", 'embedder = "local"', "hashing"),  # environment > file
        (None, "hashing", '[embedder]\nprovider = "local"\nmodel = "x"', "hashing"),  # a table for another one
        (None, None, 'embedder = "hashing"', "hashing"),  # file > default
        (None, "local", "", "local"),  # environment > default
        (None, None, "", "auto"),
    ],
)
def test_embedder_precedence(
    argument: str | None, env: str | None, file: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if env:
        monkeypatch.setenv("MEMKIT_EMBEDDER", env)
    write(file + "\n")
    assert resolved(embedder=argument).embedder == expected


def test_embedder_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    write('[embedder]\nprovider = "hashing"\ndim = 64\n')
    monkeypatch.setenv("MEMKIT_EMBEDDER", "hashing")  # the same embedder: the table's settings still apply
    hashing = resolved().embedder
    assert isinstance(hashing, HashingEmbedder) and hashing.dim == 64
    write('[embedder]\nprovider = "local"\nmodel = "all-MiniLM-L6-v2"\nbatch_size = 8\n')
    monkeypatch.delenv("MEMKIT_EMBEDDER")
    local = resolved().embedder
    assert isinstance(local, CachedEmbedder) and local.model_id == LocalEmbedder("all-MiniLM-L6-v2").model_id


@pytest.mark.anyio
async def test_openai_embedder_from_file_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    write("""
        [embedder]
        provider = "openai"
        model = "file-model"
        base_url = "http://127.0.0.1:9/v1"
        api_key_env = "MY_EMBED_KEY"
        dim = 8
    """)
    monkeypatch.setenv("MY_EMBED_KEY", "sk-embed")
    monkeypatch.setenv("MEMKIT_EMBEDDER", "openai:env-model")  # the model from the variable, the rest from the file
    config = resolved()
    embedder = config.embedder
    assert isinstance(embedder, OpenAICompatibleEmbedder) and config.owned == (embedder,)
    assert embedder.model_id == "openai:http://127.0.0.1:9/v1:env-model" and embedder.dim == 8
    monkeypatch.setenv("MEMKIT_EMBED_BASE_URL", "http://127.0.0.2:9/v1")  # the embedder's own variables beat the file
    again = resolved().embedder
    assert isinstance(again, OpenAICompatibleEmbedder) and again.model_id.startswith("openai:http://127.0.0.2:9/v1")
    for client in (embedder, again):
        await client.aclose()


def _llm_file(double: LLMDouble, model: str = "file-model") -> None:
    write(f'[llm]\nprovider = "openai"\nmodel = "{model}"\nbase_url = "{double.openai_url}"\ntimeout_s = 5\n')


@pytest.mark.anyio
async def test_llm_precedence(double: LLMDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    _llm_file(double)
    given = OpenAIChat("argument-model", base_url=double.openai_url)
    assert resolved(llm=given).llm is given  # argument > file (and nothing is built)
    monkeypatch.setenv("MEMKIT_LLM_MODEL", "env-model")
    assert resolved(llm=given).llm is given  # argument > environment
    from_env = resolved().llm  # environment > file, key by key: the file's base URL stays
    assert isinstance(from_env, OpenAIChat) and from_env.model_id == f"openai:{double.openai_url}:env-model"
    monkeypatch.delenv("MEMKIT_LLM_MODEL")
    from_file = resolved().llm  # file > default (None: offline)
    assert isinstance(from_file, OpenAIChat) and from_file.model_id.endswith(":file-model")
    for client in (given, from_env, from_file):
        await client.aclose()
    write("")
    assert resolved().llm is None


@pytest.mark.anyio
async def test_llm_environment_for_another_provider_replaces_the_table(
    double: LLMDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    _llm_file(double)
    monkeypatch.setenv("MEMKIT_LLM_PROVIDER", "anthropic")
    monkeypatch.setenv("MEMKIT_LLM_MODEL", "claude-env")
    monkeypatch.setenv("MEMKIT_LLM_BASE_URL", double.anthropic_url)
    client = resolved().llm
    assert isinstance(client, AnthropicChat) and client.model_id.endswith("claude-env")
    await client.aclose()
    monkeypatch.setenv("MEMKIT_LLM_PROVIDER", "none")  # off on purpose, whatever the file says
    assert resolved().llm is None
    assert resolve_llm() is None


@pytest.mark.anyio
async def test_llm_from_the_file_sends_the_key_named_by_api_key_env(
    double: LLMDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(f"""
        [llm]
        model = "llama3.2:3b"
        base_url = "{double.openai_url}"
        api_key_env = "MY_LLM_KEY"
        budget = {{ max_calls = 3 }}
        [short_term]
        summarizer = "llm"
    """)
    monkeypatch.setenv("MY_LLM_KEY", "sk-from-env")
    double.script("openai", text_reply("Hi!"))
    async with Memkit("memory://", embedder="hashing") as mem:
        assert isinstance(mem.llm, OpenAIChat)
        assert await mem.llm.complete([{"role": "user", "content": "hello"}]) == "Hi!"
        summarizer = mem.short_term.summarizer
        assert isinstance(summarizer, LLMSummarizer) and summarizer.llm is mem.llm
        http = mem.llm._http._client
    [request] = double.requests("openai")
    assert request.headers["authorization"] == "Bearer sk-from-env"
    assert request.body["model"] == "llama3.2:3b"
    assert http.is_closed  # made from the configuration, so closed with the client


def test_layer_settings_precedence() -> None:
    write("[long_term]\nhalf_life_days = 7\nmin_score = 0.2\n")
    assert resolved().long_term == LongTermConfig(half_life_days=7, min_score=0.2)  # file > default
    given = LongTermConfig(half_life_days=3)
    assert resolved(long_term=given).long_term is given  # argument > file, whole: a Struct has every field set
    write("[long_term]\n")
    assert resolved().long_term is None  # an empty table: the layer's defaults


def test_layer_settings_are_the_layers_own_structs(monkeypatch: pytest.MonkeyPatch) -> None:
    key = base64.b64encode(bytes(range(32))).decode()
    monkeypatch.setenv("MY_CHECKPOINT_KEY", key)
    write("""
        [episodic]
        ttl = 86400
        weights = { similarity = 0.6 }
        [graph]
        functional = ["lives_in", "works_at"]
        [tool_cache]
        ttls = { weather = 600 }
        [checkpoints]
        keep_last = 3
        serializer = "json"
        encryption_key_env = "MY_CHECKPOINT_KEY"
        [short_term]
        max_tokens = 2000
        tokenizer = "estimate"
        summarizer = "extractive"
    """)
    config = resolved()
    assert config.episodic is not None and config.episodic.ttl == timedelta(days=1)
    # A partial nested table keeps the layer's own defaults (episodic weighs importance 0.15, not 0.1).
    assert (config.episodic.weights.similarity, config.episodic.weights.importance) == (0.6, 0.15)
    assert config.graph is not None and config.graph.functional == frozenset({"lives_in", "works_at"})
    assert config.tool_cache is not None and config.tool_cache.ttls == {"weather": 600.0}
    assert config.checkpoints is not None and config.checkpoints.encryption_key == bytes(range(32))
    assert (config.checkpoints.keep_last, config.checkpoints.serializer) == (3, "json")
    assert config.short_term is not None and isinstance(config.short_term.summarizer, ExtractiveSummarizer)
    write('[episodic]\nttl = "P30D"\n')
    assert resolved().episodic.ttl == timedelta(days=30)  # type: ignore[union-attr]


# -- where the file is -----------------------------------------------------------------------------------------
def test_tool_memkit_in_pyproject() -> None:
    write('[project]\nname = "agent"\n[tool.memkit]\nurl = "memory://"\n[tool.memkit.checkpoints]\nkeep_last = 2\n',
          "pyproject.toml")  # fmt: skip
    config = resolved()
    assert (config.file, config.url) == (Path("pyproject.toml"), StorageURL("memory://"))
    assert config.checkpoints is not None and config.checkpoints.keep_last == 2


@pytest.mark.parametrize(
    "text",
    [
        '[tool.memkit]\nurl = "memory://"\n',
        'tool.memkit.url = "memory://"\n',
        '[tool]\nmemkit = { url = "memory://" }\n',
        '[tool]\nmemkit.url = "memory://"\n',
        'tool = { memkit = { url = "memory://" } }\n',
        '[tool."memkit"]\nurl = "memory://"\n',
    ],
)
def test_every_spelling_of_tool_memkit_is_found(text: str) -> None:
    write(text + '[project]\nname = "agent"\ndependencies = ["memkit-sdk"]\n', "pyproject.toml")
    assert load_config().url == StorageURL("memory://")


def test_a_pyproject_without_a_memkit_table_is_not_parsed() -> None:
    """Not memkit's business: a project's broken pyproject.toml with no memkit table is left alone."""
    write('[project]\nname = "agent"\ndependencies = ["memkit-sdk"]\nbroken = \n', "pyproject.toml")
    assert load_config().file is None


def test_lookup_order(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write('[project]\nname = "agent"\n', "pyproject.toml")
    assert load_config().file is None  # a pyproject.toml without [tool.memkit] configures nothing
    write('[tool.memkit]\nurl = "memory://?dtype=int8"\n', "pyproject.toml")
    write(f'url = "{FILE}"\n')
    assert load_config().url == StorageURL(FILE)  # memkit.toml before [tool.memkit]
    write(f'url = "{ENV}"\n', "elsewhere/env.toml")
    monkeypatch.setenv("MEMKIT_CONFIG", str(isolated / "elsewhere" / "env.toml"))
    assert load_config().url == StorageURL(ENV)  # $MEMKIT_CONFIG before ./memkit.toml
    write(f'url = "{ARG}"\n', "elsewhere/arg.toml")
    assert load_config("elsewhere/arg.toml").url == StorageURL(ARG)  # config= before $MEMKIT_CONFIG
    assert load_config(Path("pyproject.toml")).url == StorageURL("memory://?dtype=int8")  # a named pyproject
    assert load_config(False).file is None  # config=False: no file at all
    monkeypatch.setenv("MEMKIT_CONFIG", "")
    assert load_config().url == StorageURL(FILE)  # an empty variable is unset


def test_parent_directories_are_not_searched(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(f'url = "{FILE}"\n')
    (isolated / "sub").mkdir()
    monkeypatch.chdir(isolated / "sub")
    assert load_config().file is None


def test_environment_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMKIT_URL", FILE)
    monkeypatch.setenv("MEMKIT_CHECKPOINTS_URL", ENV)
    monkeypatch.setenv("MEMKIT_EMBEDDER", "hashing")
    config = resolved()
    assert (config.file, config.url, config.embedder) == (None, StorageURL(FILE), "hashing")
    assert config.layer_urls == {"checkpoints": StorageURL(ENV)}


# -- per-layer URLs through the client ----------------------------------------------------------------------
@pytest.mark.anyio
async def test_checkpoints_in_memory_long_term_on_sqlite(isolated: Path) -> None:
    write(f"""
        url = "sqlite:///{isolated / "long.db"}"
        embedder = "hashing"
        [checkpoints]
        url = "memory://"
        [working]
        url = "memory://"
    """)
    async with Memkit() as mem:
        assert mem.long_term.backend.url.scheme == "sqlite"
        assert mem.checkpoints.backend.url == mem.working.backend.url == StorageURL("memory://")
        await mem.long_term.store("I am allergic to peanuts.", user_id="ada", kind="fact")
        await mem.checkpoints.save("t1", {"step": 1})
    async with Memkit() as mem:  # a new client: the file kept the memory, the checkpoint lived in memory
        assert [h.memory.content for h in await mem.long_term.recall("peanuts", user_id="ada")]
        assert await mem.checkpoints.load("t1", default=None) is None
    assert (isolated / "long.db").exists()


@pytest.mark.anyio
async def test_checkpoints_and_cache_on_redis_long_term_on_sqlite(
    isolated: Path, redis_plain_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deployment this exists for: key-value layers on a plain Redis, memories elsewhere, no code change."""
    write(f'url = "sqlite:///{isolated / "long.db"}"\nembedder = "hashing"\n')
    monkeypatch.setenv("MEMKIT_CHECKPOINTS_URL", redis_plain_url)
    monkeypatch.setenv("MEMKIT_TOOL_CACHE_URL", redis_plain_url)
    async with Memkit() as mem:
        assert mem.checkpoints.backend is mem.tool_cache.backend  # one connection pool per URL
        assert mem.checkpoints.backend.url.scheme == "redis" and mem.long_term.backend.url.scheme == "sqlite"
        checkpoint = await mem.checkpoints.save("config-test", {"step": 2})
        assert await mem.checkpoints.load("config-test", checkpoint) == {"step": 2}
        await mem.long_term.store("I prefer window seats.", user_id="ada", kind="preference")


# -- secrets --------------------------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_a_secret_in_the_file_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    write('url = "redis://:hunter2@127.0.0.1:9/0"\n[llm]\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n'
          'api_key = "sk-inline"\n')  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="memkit"):
        for _ in range(2):
            config = resolved()
            assert isinstance(config.llm, OpenAIChat)
            await config.llm.aclose()
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2, warned
    assert "memkit.toml: url holds a secret" in warned[0] and "$MEMKIT_URL" in warned[0]
    assert "memkit.toml: llm.api_key holds a secret" in warned[1] and "api_key_env" in warned[1]
    assert not any("hunter2" in m or "sk-inline" in m for m in warned)


# -- written the way a user would ----------------------------------------------------------------------------
def test_memkit_toml_and_memkit_with_no_arguments_in_a_new_process(isolated: Path) -> None:
    write("""
        url = "sqlite:///agent.db"
        embedder = "hashing"

        [long_term]
        half_life_days = 14
        min_score = 0.05

        [checkpoints]
        url = "memory://"
        keep_last = 5
    """)
    script = textwrap.dedent("""
        import anyio
        from memkit import Memkit

        async def main():
            async with Memkit() as mem:
                await mem.long_term.store("I am allergic to peanuts.", user_id="ada", kind="fact")
                hits = await mem.long_term.recall("peanuts", user_id="ada")
                print(mem.url, mem.checkpoints.backend.url, mem.long_term.config.half_life_days,
                      mem.checkpoints.config.keep_last, hits[0].memory.content)

        anyio.run(main)
    """)
    env = {k: v for k, v in os.environ.items() if k not in CONFIG_VARS}
    done = subprocess.run([sys.executable, "-c", script], cwd=isolated, env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "sqlite:///agent.db memory:// 14.0 5 I am allergic to peanuts."
    assert (isolated / "agent.db").exists()


def test_the_readme_example_file_is_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's memkit.toml example decodes as shown (its servers are not contacted: nothing is opened)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.partition("\n## Configuration\n")[2].partition("\n## ")[0]
    example = section.partition("```toml\n")[2].partition("```")[0]
    if not example:
        pytest.skip("the README has no Configuration section with a memkit.toml example yet")
    write(example)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # what its api_key_env names
    Memkit()
