"""Reading one configuration value: where it came from, what it may be, the message when it is wrong.

Every message names the file (or the variable), the key as written in the file, and what is accepted.
The layers' settings are decoded with msgspec into their own Config Structs, so every check those Structs
make in ``__post_init__`` applies to a file exactly as to code.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import logging
import os
import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import msgspec

from memkit._registry import KNOWN_BACKENDS, known_schemes
from memkit._repr import short_repr
from memkit._url import StorageURL
from memkit.errors import ConfigurationError, InvalidURLError, MemkitError, MissingDependencyError, UnknownSchemeError
from memkit.layers.checkpoints import CheckpointConfig
from memkit.layers.episodic import EpisodicConfig
from memkit.layers.graph import GraphConfig
from memkit.layers.longterm import LongTermConfig
from memkit.layers.shortterm import ExtractiveSummarizer, LLMSummarizer, ShortTermConfig
from memkit.layers.toolcache import ToolCacheConfig
from memkit.llm._protocol import LLM

__all__ = ["LAYER_CONFIGS", "LAYER_NAMES", "Where", "layer_config", "storage_url", "table_keys", "warn_secret"]

T = TypeVar("T")
log = logging.getLogger("memkit")

LAYER_NAMES = ("long_term", "short_term", "working", "episodic", "graph", "tool_cache", "checkpoints")
LAYER_CONFIGS: dict[str, type[msgspec.Struct]] = {
    "long_term": LongTermConfig, "short_term": ShortTermConfig, "episodic": EpisodicConfig, "graph": GraphConfig,
    "tool_cache": ToolCacheConfig, "checkpoints": CheckpointConfig,
}  # fmt: skip
"""The working layer has no settings: its table takes ``url`` only."""
_CODE_ONLY: dict[str, dict[str, str]] = {"short_term": {"on_error": "a callable"}}
"""Fields a file cannot hold: they take Python objects. Named in the message so the user knows where to go."""
_FILE_ONLY = {"checkpoints": ("encryption_key_env",)}
_DESCRIBED = {
    "summarizer": '"extractive" or "llm" (the configured model)',
    "tokenizer": '"auto", "estimate" or "tiktoken"',
    "encryption_key": "the key as base64 text (prefer encryption_key_env)",
}
_URL_ACCEPTED = "a storage URL such as 'sqlite:///memkit.db', 'memory://', 'redis://host:6379/0', 'postgresql://...'"
_AT = re.compile(r"(?P<problem>.*?)(?: - at `\$(?P<path>[^`]*)`)?", re.S)
_warned: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class Where:
    """A value's origin: a file (with the prefix its keys have there) or, with no file, the environment."""

    file: Path | None = None
    prefix: str = ""
    ENV: ClassVar[Where]

    def name(self, key: str) -> str:
        return f"{self.file}: {self.prefix}{key}" if self.file is not None else key

    def error(self, key: str, problem: str, accepted: str | None = None) -> ConfigurationError:
        return ConfigurationError(f"{self.name(key)}: {problem}" + (f"; accepted: {accepted}" if accepted else ""))

    def unknown(self, key: str, accepted: Iterable[str], context: str = "") -> ConfigurationError:
        known = list(accepted)
        leaf = key.rpartition(".")[2]
        close = difflib.get_close_matches(leaf, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        where = f"{self.file}: " if self.file is not None else ""
        return ConfigurationError(
            f"{where}unknown key {self.prefix + key!r}{' ' + context if context else ''}; "
            f"accepted keys: {', '.join(known)}{hint}"
        )

    @staticmethod
    def kind(value: object) -> str:
        """A value's TOML type, as a user reads the file."""
        kinds = ((bool, "a boolean"), (int, "an integer"), (float, "a float"), (str, "a string"),
                 (dict, "a table"), (list, "an array"), ((datetime, date, time), "a date or time"))  # fmt: skip
        return next((name for cls, name in kinds if isinstance(value, cls)), type(value).__name__)

    def convert(self, value: object, kind: type[T], key: str) -> T:
        """``value`` decoded into ``kind`` (a Struct), its errors named by key with the accepted values."""
        try:
            return msgspec.convert(value, kind)
        except msgspec.ValidationError as exc:
            match = _AT.fullmatch(str(exc))
            problem, path = (match["problem"], match["path"] or "") if match else (str(exc), "")
            field = path.lstrip(".").split(".")[0].split("[")[0]
            if not field:  # a check in __post_init__: find the key it is about
                field = _key_named(value, problem)
                path = f".{field}" if field else ""
            accepted = _accepted(kind, field) if match and match["path"] else None
            raise self.error(key + path, _lower_first(problem), accepted) from exc
        except MissingDependencyError as exc:  # keeps its kind: the message names the pip install
            raise MissingDependencyError(f"{self.name(key)}: {exc}") from exc
        except MemkitError as exc:  # a ConfigurationError from a Config's __post_init__
            field = _key_named(value, str(exc))
            raise self.error(f"{key}.{field}" if field else key, str(exc)) from exc

    def secret(self, env_name: str | None, inline: str | None, key: str) -> str | None:
        """A key named by ``api_key_env`` (read from the environment now), or, discouraged, written inline."""
        if env_name is not None and inline is not None:
            raise self.error(f"{key}.api_key", "give api_key_env or api_key, not both", "api_key_env alone")
        if env_name is not None:
            value = os.environ.get(env_name, "").strip()
            if not value:
                raise self.error(f"{key}.api_key_env", f"${env_name} is not set",
                                 "the name of an environment variable that holds the key")  # fmt: skip
            return value
        if inline is not None:
            warn_secret(self, f"{key}.api_key", 'api_key_env = "NAME_OF_A_VARIABLE"')
        return inline


Where.ENV = Where()


def warn_secret(where: Where, key: str, instead: str) -> None:
    """Once per file and key: a secret in a file ends up in version control and backups."""
    if where.file is None or (str(where.file), key) in _warned:
        return
    _warned.add((str(where.file), key))
    log.warning("memkit: %s holds a secret in the file; prefer %s", where.name(key), instead)


def storage_url(value: object, where: Where, key: str) -> StorageURL:
    """A parsed URL whose scheme has a backend; errors name the file and key (or the variable)."""
    if not isinstance(value, str):
        raise where.error(key, f"expected a string, got {where.kind(value)}", _URL_ACCEPTED)
    try:
        url = StorageURL(value)
    except InvalidURLError as exc:
        raise InvalidURLError(f"{where.name(key)}: {exc}") from exc  # its message says what a URL looks like
    if url.scheme not in KNOWN_BACKENDS and url.scheme not in known_schemes():
        raise UnknownSchemeError(
            f"{where.name(key)}: no backend for scheme {url.scheme!r}; accepted schemes: {', '.join(known_schemes())}"
        )
    return url


def table_keys(value: object, layer: str, where: Where) -> dict[str, Any]:
    """A layer's table, each key checked against its Config's fields (msgspec would ignore a misspelled one)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise where.error(layer, f"expected a table ([{where.prefix}{layer}]), got {where.kind(value)}")
    accepted = _layer_keys(layer)
    for key in value:
        if key in _CODE_ONLY.get(layer, {}):
            raise where.error(f"{layer}.{key}", f"takes {_CODE_ONLY[layer][key]}, which a file cannot hold",
                              f"set it in code: Memkit({layer}=...)")  # fmt: skip
        if key not in accepted:
            raise where.unknown(f"{layer}.{key}", accepted)
    return dict(value)


def _layer_keys(layer: str) -> list[str]:
    kind = LAYER_CONFIGS.get(layer)
    fields = [f.name for f in msgspec.structs.fields(kind)] if kind is not None else []
    return ["url", *(f for f in fields if f not in _CODE_ONLY.get(layer, {})), *_FILE_ONLY.get(layer, ())]


def layer_config(layer: str, table: Mapping[str, Any], llm: LLM | None, where: Where) -> msgspec.Struct | None:
    """The layer's Config from its table (``url`` already taken out); None for the working layer."""
    kind = LAYER_CONFIGS.get(layer)
    if kind is None:
        return None
    values = dict(table)
    if layer == "short_term" and "summarizer" in values:
        values["summarizer"] = _summarizer(values["summarizer"], llm, where)
    if layer == "checkpoints":
        values = _encryption_key(values, where)
    for field in msgspec.structs.fields(kind):
        value = values.get(field.name)
        if _is_duration(field.type) and isinstance(value, int | float) and not isinstance(value, bool):
            values[field.name] = timedelta(seconds=value)  # TOML has no durations; seconds read naturally
        if not isinstance(value, dict):
            continue
        default = field.default_factory() if field.default_factory is not msgspec.NODEFAULT else field.default
        if isinstance(default, msgspec.Struct):
            # A partial table ([episodic.weights] similarity = 0.6) keeps this layer's defaults for the rest,
            # not the defaults of the nested Struct's class (episodic weighs importance more than long-term).
            values[field.name] = {**msgspec.structs.asdict(default), **value}
    return where.convert(values, kind, layer)


def _summarizer(choice: object, llm: LLM | None, where: Where) -> object:
    if choice == "extractive":
        return ExtractiveSummarizer()
    if choice == "llm":
        if llm is None:
            accepted = '"extractive", or "llm" with an [llm] table, MEMKIT_LLM_* or Memkit(llm=...)'
            raise where.error("short_term.summarizer", '"llm" needs a model, and none is configured', accepted)
        return LLMSummarizer(llm)
    raise where.error("short_term.summarizer", f"unknown summarizer {short_repr(choice)}", _DESCRIBED["summarizer"])


def _encryption_key(values: dict[str, Any], where: Where) -> dict[str, Any]:
    """``encryption_key_env`` names a variable holding the key as base64; an inline key is warned about."""
    name = values.pop("encryption_key_env", None)
    if name is None:
        if "encryption_key" in values:
            warn_secret(where, "checkpoints.encryption_key", 'encryption_key_env = "NAME_OF_A_VARIABLE"')
        return values
    key = "checkpoints.encryption_key_env"
    if "encryption_key" in values:
        raise where.error(key, "give encryption_key_env or encryption_key, not both", "encryption_key_env alone")
    if not isinstance(name, str):
        raise where.error(key, f"expected a string, got {where.kind(name)}", "the name of an environment variable")
    text = os.environ.get(name, "").strip()
    if not text:
        raise where.error(key, f"${name} is not set", "the name of a variable holding a base64 AES key")
    try:
        values["encryption_key"] = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise where.error(key, f"${name} is not base64", "16, 24 or 32 bytes as base64") from None
    return values


def _is_duration(kind: Any) -> bool:
    return kind is timedelta or timedelta in typing.get_args(kind)


def _accepted(kind: type[Any], field: str) -> str | None:
    """What a Struct's field accepts, in words."""
    if field in _DESCRIBED:
        return _DESCRIBED[field]
    types_of = {f.name: f.type for f in msgspec.structs.fields(kind)}
    return _describe(types_of[field]) if field in types_of else None


def _describe(kind: Any) -> str:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Literal:
        return " or ".join(f'"{a}"' if isinstance(a, str) else repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        named = [_describe(a) for a in args if a is not type(None)]
        return " or ".join(named) + (" (or leave it out)" if type(None) in args else "")
    if origin in (dict, Mapping):
        return f"a table of names to {_describe(args[1])}"
    if origin in (list, tuple, set, frozenset):
        return f"an array ({_describe(args[0])} each)" if args else "an array"
    if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
        return f"a table with keys {', '.join(f.name for f in msgspec.structs.fields(kind))}"
    simple = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
              timedelta: 'a number of seconds or an ISO 8601 duration such as "P30D"'}  # fmt: skip
    return simple.get(kind, getattr(kind, "__name__", str(kind)))


def _key_named(value: object, message: str) -> str:
    """The first key of ``value`` that ``message`` names (a Config's own check names the field it refuses)."""
    keys = value if isinstance(value, dict) else {}
    return next((k for k in keys if re.search(rf"\b{re.escape(k)}\b", message)), "")


def _lower_first(text: str) -> str:
    """msgspec's sentences ("Expected `int`, got `str`") read on after a colon, in TOML's words (no null, no
    enums); a Config's own messages keep their case."""
    if text.split(" ", 1)[0] not in ("Expected", "Invalid", "Object"):
        return text
    text = text.replace(" | null`", "`").replace("Invalid enum value", "invalid value")
    return text[:1].lower() + text[1:]
