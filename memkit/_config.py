"""Configuration: ``memkit.toml`` (or ``[tool.memkit]`` in ``pyproject.toml``) and ``MEMKIT_*`` variables.

Precedence, key by key: ``Memkit()``'s arguments > the environment > the file > the built-in defaults. A layer
config object given as an argument replaces that layer's table: a Struct has every field set, so there is
nothing left to merge (the table's ``url`` still applies unless ``layer_urls`` names the layer).

Which file: ``Memkit(config=PATH)``, else ``$MEMKIT_CONFIG``, else ``./memkit.toml``, else ``[tool.memkit]`` in
``./pyproject.toml``; ``config=False`` reads none. Parent directories are not searched: the file decides where
memories are written, and one found by walking up from wherever a process starts (a notebook in a subfolder,
a tool run inside another project) would send them to a store nobody chose for that process. The working
directory is also where the default ``sqlite:///memkit.db`` lives; ``$MEMKIT_CONFIG`` covers the rest.

The file is read when ``Memkit()`` is built, synchronously, like the rest of the constructor (which also builds
the backends and resolves the embedder): a client is made at start-up, not per memory call, so this is not in
the event loop's hot path. It stays cheap for code that does make one per request: ~0.1 ms for a memkit.toml,
and a pyproject.toml is parsed only when it may hold a memkit table.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import msgspec

from memkit._config_values import (
    LAYER_NAMES,
    Where,
    layer_config,
    storage_url,
    table_keys,
    warn_secret,
)
from memkit._repr import short_repr
from memkit._url import SECRET_OPTIONS, StorageURL
from memkit.embedders import CachedEmbedder, Embedder, HashingEmbedder, LocalEmbedder
from memkit.errors import ConfigurationError, ValidationError
from memkit.layers.checkpoints import CheckpointConfig
from memkit.layers.episodic import EpisodicConfig
from memkit.layers.graph import GraphConfig
from memkit.layers.longterm import LongTermConfig
from memkit.layers.shortterm import ShortTermConfig
from memkit.layers.toolcache import ToolCacheConfig
from memkit.llm._budget import LLMBudget
from memkit.llm._protocol import LLM

__all__ = ["DEFAULT_URL", "ENV_VARS", "FILE_NAME", "ConfigChoice", "MemkitConfig", "load_config", "resolve_config"]

T = TypeVar("T")

DEFAULT_URL = "sqlite:///memkit.db"
FILE_NAME = "memkit.toml"
ConfigChoice = str | os.PathLike[str] | Literal[False] | None
EmbedderChoice = Embedder | Literal["auto", "local", "hashing"]

ENV_VARS: dict[str, str] = {
    "MEMKIT_CONFIG": "the config file to read instead of ./memkit.toml or ./pyproject.toml",
    "MEMKIT_URL": "the storage URL",
    **{f"MEMKIT_{name.upper()}_URL": f"the {name} layer's storage URL" for name in LAYER_NAMES},
    "MEMKIT_EMBEDDER": "auto, local, hashing, openai or openai:MODEL",
    "MEMKIT_LLM_PROVIDER": "openai, anthropic or none",
    "MEMKIT_LLM_MODEL": "the chat model",
    "MEMKIT_LLM_BASE_URL": "the chat server's base URL",
    "MEMKIT_LLM_API_KEY": "the chat server's API key",
}
"""Every variable this module reads (the embedder's MEMKIT_EMBED_* ones are read by OpenAICompatibleEmbedder)."""

_TOP_KEYS = ("url", "embedder", "llm", *LAYER_NAMES)
_MAY_HAVE_TOOL_MEMKIT = re.compile(
    rb"""tool["']?\s*\.\s*["']?memkit\b|^\s*["']?memkit["']?\s*[.=]|[{,]\s*["']?memkit["']?\s*[.=]""", re.M
)
"""Every way to spell a tool.memkit key ([tool.memkit], tool.memkit.url = ..., memkit = {...} under [tool])."""
_EMBEDDERS = ("auto", "local", "hashing", "openai")
_EMBEDDER_KEYS: dict[str, tuple[str, ...]] = {
    "auto": ("provider",),
    "local": ("provider", "model", "device", "batch_size"),
    "hashing": ("provider", "dim"),
    "openai": ("provider", "model", "base_url", "api_key_env", "api_key", "dim", "batch_size", "max_retries",
               "timeout_s"),
}  # fmt: skip
_LLM_PROVIDERS = ("openai", "anthropic", "none")
_LLM_COMMON = ("provider", "model", "base_url", "api_key_env", "api_key", "timeout_s", "max_retries", "budget")
_LLM_KEYS: dict[str, tuple[str, ...]] = {
    "openai": (*_LLM_COMMON, "structured", "max_tokens_param"),
    "anthropic": (*_LLM_COMMON, "default_max_tokens", "anthropic_version"),
    "none": ("provider",),
}


class _EmbedderTable(msgspec.Struct, frozen=True, kw_only=True):
    provider: Literal["auto", "local", "hashing", "openai"] = "auto"
    model: str | None = None
    device: str | None = None
    batch_size: int | None = None
    dim: int | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    api_key: str | None = None
    max_retries: int | None = None
    timeout_s: float | None = None


class _LLMTable(msgspec.Struct, frozen=True, kw_only=True):
    provider: Literal["openai", "anthropic", "none"] | None = None
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    api_key: str | None = None
    timeout_s: float | None = None
    max_retries: int | None = None
    budget: LLMBudget | None = None
    structured: Literal["json_schema", "json_object", "prompt"] | None = None
    max_tokens_param: str | None = None
    default_max_tokens: int | None = None
    anthropic_version: str | None = None


class _Closable(Protocol):
    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class MemkitConfig:
    """What the file and the environment say, before ``Memkit()``'s arguments are applied."""

    file: Path | None
    """The file read (None: no file)."""
    url: StorageURL
    """The main storage URL: ``$MEMKIT_URL``, else the file's ``url``, else ``sqlite:///memkit.db``."""
    layer_urls: dict[str, StorageURL]
    """Layers with a URL of their own: ``$MEMKIT_<LAYER>_URL``, else the file's ``[<layer>] url``."""
    embedder: tuple[_EmbedderTable, Where] | None
    llm: tuple[_LLMTable, Where] | None
    tables: dict[str, dict[str, Any]]
    """Each layer's settings as the file gives them (``url`` taken out), decoded by ``resolve_config``."""
    where: Where


@dataclass(frozen=True)
class Resolved:
    """``Memkit()``'s arguments with the configuration applied; ``owned``: clients made here, closed by it."""

    url: str | StorageURL
    embedder: EmbedderChoice
    llm: LLM | None
    layer_urls: Mapping[str, str | StorageURL] | None
    long_term: LongTermConfig | None
    short_term: ShortTermConfig | None
    tool_cache: ToolCacheConfig | None
    checkpoints: CheckpointConfig | None
    episodic: EpisodicConfig | None
    graph: GraphConfig | None
    owned: tuple[_Closable, ...]
    file: Path | None


def load_config(config: ConfigChoice = None) -> MemkitConfig:
    """The file (found as the module docstring says) and the environment, merged; no client is made here."""
    where, data = _read_file(config)
    for key in data:
        if key not in _TOP_KEYS:
            raise where.unknown(key, _TOP_KEYS)
    tables = {name: table_keys(data.get(name), name, where) for name in LAYER_NAMES}
    layer_urls: dict[str, StorageURL] = {}
    for name in LAYER_NAMES:
        var = f"MEMKIT_{name.upper()}_URL"
        if os.environ.get(var):
            layer_urls[name] = storage_url(os.environ[var], Where.ENV, var)
        elif "url" in tables[name]:
            layer_urls[name] = _file_url(tables[name]["url"], where, f"{name}.url")
        tables[name].pop("url", None)
    if os.environ.get("MEMKIT_URL"):
        url = storage_url(os.environ["MEMKIT_URL"], Where.ENV, "MEMKIT_URL")
    else:
        url = _file_url(data["url"], where, "url") if "url" in data else StorageURL(DEFAULT_URL)
    return MemkitConfig(
        file=where.file, url=url, layer_urls=layer_urls, embedder=_embedder_spec(data.get("embedder"), where),
        llm=_llm_spec(data.get("llm"), where), tables=tables, where=where,
    )  # fmt: skip


def resolve_config(
    config: ConfigChoice,
    *,
    url: str | StorageURL | None,
    embedder: EmbedderChoice | None,
    llm: LLM | None,
    layer_urls: Mapping[str, str | StorageURL] | None,
    long_term: LongTermConfig | None = None,
    short_term: ShortTermConfig | None = None,
    tool_cache: ToolCacheConfig | None = None,
    checkpoints: CheckpointConfig | None = None,
    episodic: EpisodicConfig | None = None,
    graph: GraphConfig | None = None,
) -> Resolved:
    """``Memkit()``'s arguments where given, the configuration where not. An argument of the wrong type is
    passed on unchanged: the client refuses it with its own message."""
    loaded = load_config(config)
    owned: list[_Closable] = []
    model = llm if llm is not None else _build_llm(loaded.llm, owned)
    built = {name: layer_config(name, table, model, loaded.where) for name, table in loaded.tables.items() if table}
    return Resolved(
        url=url if url is not None else loaded.url,
        embedder=embedder if embedder is not None else _build_embedder(loaded.embedder, owned),
        llm=model,
        layer_urls=_merge_urls(loaded.layer_urls, layer_urls),
        long_term=_pick(long_term, built.get("long_term"), LongTermConfig),
        short_term=_pick(short_term, built.get("short_term"), ShortTermConfig),
        tool_cache=_pick(tool_cache, built.get("tool_cache"), ToolCacheConfig),
        checkpoints=_pick(checkpoints, built.get("checkpoints"), CheckpointConfig),
        episodic=_pick(episodic, built.get("episodic"), EpisodicConfig),
        graph=_pick(graph, built.get("graph"), GraphConfig),
        owned=tuple(owned),
        file=loaded.file,
    )


# -- the file ---------------------------------------------------------------------------------------------------
def _read_file(config: ConfigChoice) -> tuple[Where, dict[str, Any]]:
    if config is False:
        return Where.ENV, {}
    if config is not None:
        if not isinstance(config, str | os.PathLike) or isinstance(config, bool):
            raise ConfigurationError(f"config must be a path to a TOML file, False or None, got {short_repr(config)}")
        return _named(Path(config), "Memkit(config=...)")
    named = os.environ.get("MEMKIT_CONFIG", "").strip()
    if named:
        return _named(Path(named), "$MEMKIT_CONFIG")
    if Path(FILE_NAME).is_file():
        return Where(Path(FILE_NAME)), _parse(Path(FILE_NAME))
    pyproject = Path("pyproject.toml")
    if pyproject.is_file():
        raw = _read(pyproject)
        # tomllib (pure Python) takes ~2 ms for a project's pyproject.toml, paid by every Memkit(); most have no
        # memkit table, and this finds any spelling of one in microseconds (a false alarm only costs the parse).
        table = _tool_table(pyproject, _parse(pyproject, raw)) if _MAY_HAVE_TOOL_MEMKIT.search(raw) else None
        if table is not None:
            return Where(pyproject, "tool.memkit."), table
    return Where.ENV, {}


def _named(path: Path, origin: str) -> tuple[Where, dict[str, Any]]:
    """A file the caller named: it must exist, and a pyproject.toml must have a [tool.memkit] table."""
    try:
        found = path.is_file()
    except OSError as exc:  # a name too long, a folder not searchable: is_file() raises rather than says False
        raise ConfigurationError(
            f"config file {short_repr(str(path))} (from {origin}) cannot be read: {exc.strerror or exc}"
        ) from exc
    if not found:
        raise ConfigurationError(f"config file {str(path)!r} (from {origin}) does not exist or is not a file")
    data = _parse(path)
    if path.name != "pyproject.toml":
        return Where(path), data
    table = _tool_table(path, data)
    if table is None:
        raise ConfigurationError(f"{path} (from {origin}) has no [tool.memkit] table")
    return Where(path, "tool.memkit."), table


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"{path}: cannot be read: {exc}") from exc


def _parse(path: Path, raw: bytes | None = None) -> dict[str, Any]:
    try:
        return tomllib.loads((_read(path) if raw is None else raw).decode())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{path}: not valid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"{path}: not UTF-8 text: {exc}") from exc


def _tool_table(path: Path, data: dict[str, Any]) -> dict[str, Any] | None:
    tool = data.get("tool")
    table = tool.get("memkit") if isinstance(tool, dict) else None
    if table is not None and not isinstance(table, dict):
        raise ConfigurationError(f"{path}: tool.memkit must be a table ([tool.memkit]), got {type(table).__name__}")
    return table


def _file_url(value: object, where: Where, key: str) -> StorageURL:
    url = storage_url(value, where, key)
    if url.password or any(name.lower() in SECRET_OPTIONS for name in url.options):
        var = "MEMKIT_URL" if key == "url" else f"MEMKIT_{key.removesuffix('.url').upper()}_URL"
        warn_secret(where, key, f"${var} (the environment beats the file)")
    return url


# -- embedder and model ---------------------------------------------------------------------------------------
def _embedder_spec(value: object, where: Where) -> tuple[_EmbedderTable, Where] | None:
    """The file's ``embedder`` (a name or a table), with ``$MEMKIT_EMBEDDER`` over it."""
    spec: tuple[_EmbedderTable, Where] | None = None
    if isinstance(value, str):
        spec = _embedder_name(value, where, "embedder"), where
    elif isinstance(value, dict):
        provider = value.get("provider", "auto")
        if provider not in _EMBEDDERS:
            raise where.error("embedder.provider", f"unknown embedder {short_repr(provider)}", ", ".join(_EMBEDDERS))
        for key in value:
            if key not in _EMBEDDER_KEYS[provider]:
                raise where.unknown(f"embedder.{key}", _EMBEDDER_KEYS[provider], f"for provider {provider!r}")
        spec = where.convert(value, _EmbedderTable, "embedder"), where
    elif value is not None:
        raise where.error("embedder", f"expected a string or a table, got {where.kind(value)}", _embedder_accepted())
    named = os.environ.get("MEMKIT_EMBEDDER", "").strip()
    if not named:
        return spec
    chosen = _embedder_name(named, Where.ENV, "MEMKIT_EMBEDDER")
    if spec is None or spec[0].provider != chosen.provider:
        return chosen, Where.ENV  # the file's settings were for another embedder
    return msgspec.structs.replace(spec[0], model=chosen.model or spec[0].model), spec[1]


def _embedder_name(text: str, where: Where, key: str) -> _EmbedderTable:
    provider, _, model = text.strip().partition(":")
    if provider not in _EMBEDDERS or (model and provider != "openai"):
        raise where.error(key, f"unknown embedder {text!r}", _embedder_accepted())
    return _EmbedderTable(provider=provider, model=model or None)  # type: ignore[arg-type]  # checked above


def _embedder_accepted() -> str:
    return '"auto", "local", "hashing", "openai", "openai:MODEL", or a table with provider = one of those'


def _build_embedder(spec: tuple[_EmbedderTable, Where] | None, owned: list[_Closable]) -> EmbedderChoice:
    if spec is None:
        return "auto"
    table, where = spec
    try:
        if table.provider == "local" and (table.model, table.device, table.batch_size) != (None, None, None):
            options = _given(device=table.device, batch_size=table.batch_size)
            return CachedEmbedder(LocalEmbedder(table.model, **options))
        if table.provider == "hashing" and table.dim is not None:
            return HashingEmbedder(table.dim)
        if table.provider != "openai":
            return table.provider
        from memkit.embedders._openai import OpenAICompatibleEmbedder  # httpx with it: only its users pay

        client = OpenAICompatibleEmbedder(
            os.environ.get("MEMKIT_EMBED_MODEL") or table.model,
            base_url=os.environ.get("MEMKIT_EMBED_BASE_URL") or table.base_url,
            api_key=os.environ.get("MEMKIT_EMBED_API_KEY") or where.secret(table.api_key_env, table.api_key,
                                                                            "embedder"),
            **_given(dim=table.dim, batch_size=table.batch_size, max_retries=table.max_retries,
                     timeout_s=table.timeout_s),
        )  # fmt: skip
    except (ConfigurationError, ValidationError) as exc:
        raise where.error("embedder" if where.file else "MEMKIT_EMBEDDER", str(exc)) from exc
    owned.append(client)
    return client


def _llm_spec(value: object, where: Where) -> tuple[_LLMTable, Where] | None:
    """The file's ``[llm]`` with the ``MEMKIT_LLM_*`` variables over it, key by key; None: no model."""
    if value is not None and not isinstance(value, dict):
        raise where.error("llm", f"expected a table, got {where.kind(value)}", "a table ([llm]) with provider = ...")
    env = {key: os.environ.get(f"MEMKIT_LLM_{key.upper()}", "").strip() for key in ("provider", "model", "base_url")}
    if env["provider"] and env["provider"].lower() not in _LLM_PROVIDERS:
        raise Where.ENV.error("MEMKIT_LLM_PROVIDER", f"unknown provider {env['provider']!r}", ", ".join(_LLM_PROVIDERS))
    table, source = _LLMTable(), Where.ENV
    if value is not None:
        provider = value.get("provider", _infer_provider(value.get("base_url")))
        if provider not in _LLM_PROVIDERS:
            raise where.error("llm.provider", f"unknown provider {short_repr(provider)}", ", ".join(_LLM_PROVIDERS))
        for key in value:
            if key not in _LLM_KEYS[provider]:
                raise where.unknown(f"llm.{key}", _LLM_KEYS[provider], f"for provider {provider!r}")
        table, source = where.convert({**value, "provider": provider}, _LLMTable, "llm"), where
    elif not (any(env.values()) or os.environ.get("MEMKIT_LLM_API_KEY", "").strip()):
        return None  # nothing configures a model: memkit's offline path
    if env["provider"] and table.provider not in (None, env["provider"].lower()):
        table, source = _LLMTable(), Where.ENV  # the file's model and endpoint were for another provider
    base_url = env["base_url"] or table.base_url
    provider = env["provider"].lower() or table.provider or _infer_provider(base_url)
    if provider == "none":
        return None
    merged = msgspec.structs.replace(table, provider=provider, model=env["model"] or table.model, base_url=base_url)
    return merged, source


def _infer_provider(base_url: object) -> str:
    """As ``resolve_llm``: the Anthropic API by its host, any other server speaks OpenAI's protocol."""
    return "anthropic" if isinstance(base_url, str) and "anthropic.com" in base_url else "openai"


def _build_llm(spec: tuple[_LLMTable, Where] | None, owned: list[_Closable]) -> LLM | None:
    if spec is None:
        return None
    table, where = spec
    key = os.environ.get("MEMKIT_LLM_API_KEY", "").strip() or where.secret(table.api_key_env, table.api_key, "llm")
    options = _given(base_url=table.base_url, api_key=key, timeout_s=table.timeout_s, max_retries=table.max_retries,
                     budget=table.budget)  # fmt: skip
    client: LLM
    try:
        if table.provider == "anthropic":
            from memkit.llm._anthropic import AnthropicChat

            extra = _given(default_max_tokens=table.default_max_tokens, anthropic_version=table.anthropic_version)
            client = AnthropicChat(table.model, **options, **extra)
        else:
            from memkit.llm._openai import OpenAIChat

            extra = _given(structured=table.structured, max_tokens_param=table.max_tokens_param)
            client = OpenAIChat(table.model, **options, **extra)
    except (ConfigurationError, ValidationError) as exc:
        raise where.error("llm" if where.file else "MEMKIT_LLM_*", str(exc)) from exc
    owned.append(client)
    return client


# -- small helpers ------------------------------------------------------------------------------------------
def _given(**options: Any) -> dict[str, Any]:
    """The options set: a client's own default (or its environment variable) applies to the rest."""
    return {name: value for name, value in options.items() if value is not None}


def _merge_urls(
    configured: dict[str, StorageURL], given: Mapping[str, str | StorageURL] | None
) -> Mapping[str, str | StorageURL] | None:
    """``layer_urls=`` over the configured ones; a None value there means "not given", not "the main URL"."""
    if given is None:
        return dict(configured) or None
    if not isinstance(given, Mapping):
        return given  # the client refuses it, naming what it wants
    return {**configured, **{name: value for name, value in given.items() if value is not None}}


def _pick(given: T | None, built: msgspec.Struct | None, kind: type[T]) -> T | None:
    if given is not None:
        return given
    return built if isinstance(built, kind) else None
