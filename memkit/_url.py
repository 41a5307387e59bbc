"""Storage URLs: parsed once, password never shown."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, TypeVar
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from memkit.errors import InvalidURLError

__all__ = ["SECRET_OPTIONS", "StorageURL"]

T = TypeVar("T", int, float, str, bool)

SECRET_OPTIONS: Final = frozenset(
    {"password", "sslpassword", "api_key", "apikey", "token", "access_token", "secret", "auth", "key"}
)
"""Query options whose values are masked wherever the URL is shown."""
_TRUE, _FALSE = frozenset({"1", "true", "yes", "on"}), frozenset({"0", "false", "no", "off"})
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class StorageURL:
    """A parsed storage URL such as ``sqlite:///memories.db`` or ``redis://:pw@host:6379/0``.

    ``repr`` and ``str`` mask the password, so a URL can be logged safely.
    """

    __slots__ = ("_raw", "database", "host", "options", "password", "path", "port", "scheme", "username")

    def __init__(self, url: str | StorageURL) -> None:
        if isinstance(url, StorageURL):
            url = url.raw
        if not isinstance(url, str):  # its type only: str() of a value nested deep raised RecursionError
            raise InvalidURLError(
                f"not a storage URL: a {type(url).__name__}, not a string; expected e.g. 'sqlite:///memories.db'"
            )
        if "://" not in url:
            raise InvalidURLError(
                f"not a storage URL: {_mask_unparsed(url)!r}; expected e.g. 'sqlite:///memories.db' or 'memory://'"
            )
        _check_chars(url, url)
        try:
            parts = urlsplit(url)
            port = parts.port
            pairs = parse_qsl(parts.query, keep_blank_values=True)
        except ValueError as exc:
            raise InvalidURLError(f"cannot parse storage URL {_mask_unparsed(url)!r}: {exc}") from exc
        if not parts.scheme:
            raise InvalidURLError(f"storage URL {_mask_unparsed(url)!r} has no scheme")
        self._raw: str = url
        self.scheme: str = parts.scheme.lower()
        self.username: str | None = unquote(parts.username) if parts.username else None
        self.password: str | None = unquote(parts.password) if parts.password else None
        self.host: str | None = parts.hostname
        self.port: int | None = port
        self.path: str = unquote(parts.path)
        self.database: str | None = self.path.lstrip("/") or None
        self.options: Mapping[str, str] = _options(pairs, url)
        for decoded in (self.path, self.username or "", self.password or ""):
            _check_chars(decoded, url)

    @property
    def raw(self) -> str:
        """The URL as given, password included: pass it to drivers, never log it."""
        return self._raw

    @property
    def file_path(self) -> str:
        """For file URLs: ``sqlite:///rel.db`` -> ``rel.db``, ``sqlite:////abs.db`` -> ``/abs.db``."""
        return self.path[1:] if self.path.startswith("/") else self.path

    def option(self, name: str, default: T, *, choices: Sequence[str] | None = None, minimum: float | None = None) -> T:
        """The option ``name`` parsed as the type of ``default`` (absent: ``default``); a value that does not
        parse, is not among ``choices`` or is below ``minimum`` raises ``InvalidURLError`` naming both."""
        raw = self.options.get(name)
        if raw is None:
            return default
        kind = type(default)
        try:
            if kind is bool:
                if raw.lower() not in _TRUE | _FALSE:
                    raise ValueError(raw)
                value: T = raw.lower() in _TRUE
            elif kind is int or kind is float:
                # Python's int()/float() also take "1_0", " 1", "nan", "inf" and "1e999": no option means those.
                if not (_INT if kind is int else _FLOAT).fullmatch(raw) or not math.isfinite(float(raw)):
                    raise ValueError(raw)
                value = kind(raw)
            else:
                value = kind(raw.lower() if choices else raw)
        except ValueError:
            expected = {int: "an integer", float: "a number", bool: "true or false"}.get(kind, "a string")
            raise InvalidURLError(f"{name}={raw!r} in {self}: expected {expected}") from None
        if choices is not None and value not in choices:
            raise InvalidURLError(f"{name}={raw!r} in {self}: use one of {', '.join(choices)}")
        if minimum is not None and isinstance(value, int | float) and value < minimum:
            raise InvalidURLError(f"{name}={raw!r} in {self}: must be >= {minimum}")
        return value

    def check_options(self, known: Iterable[str]) -> None:
        """Refuse options this backend does not know (a misspelled ``synchronus=full`` must not be ignored)."""
        allowed = set(known)
        unknown = sorted(set(self.options) - allowed)
        if unknown:
            raise InvalidURLError(
                f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} in {self}; "
                f"{self.scheme}:// accepts {', '.join(sorted(allowed)) or 'no options'}"
            )

    def __str__(self) -> str:
        text = self._raw
        if self.password is not None:
            parts = urlsplit(text)
            user = parts.username or ""
            netloc = f"{user}:***@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
            text = parts._replace(netloc=netloc).geturl()
        if any(name.lower() in SECRET_OPTIONS for name in self.options):
            base, _, query = text.partition("?")
            masked = [(k, "***" if k.lower() in SECRET_OPTIONS else v) for k, v in parse_qsl(query)]
            text = f"{base}?{urlencode(masked, safe='*/:')}"
        return text

    def __repr__(self) -> str:
        return f"StorageURL({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StorageURL) and other._raw == self._raw

    def __hash__(self) -> int:
        return hash(self._raw)


def _check_chars(text: str, url: str) -> None:
    """No control characters (urlsplit silently drops tabs and newlines; a NUL reaches the driver) and no lone
    surrogates (they cannot be encoded for a driver), in the URL or in what its %-escapes decode to."""
    if _CONTROL.search(text):
        raise InvalidURLError(f"storage URL {_mask_unparsed(url)!r} contains a control character")
    try:
        text.encode()
    except UnicodeEncodeError:
        raise InvalidURLError(f"storage URL {_mask_unparsed(url)!r} is not valid Unicode") from None


def _options(pairs: list[tuple[str, str]], url: str) -> dict[str, str]:
    """The query options; one given twice is refused (``dict()`` kept the last one silently)."""
    options: dict[str, str] = {}
    for name, value in pairs:
        _check_chars(name + value, url)
        if name in options:
            raise InvalidURLError(f"option {name!r} is given twice in {_mask_unparsed(url)!r}")
        options[name] = value
    return options


def _mask_unparsed(text: str) -> str:
    """Best-effort masking for strings that failed to parse."""
    if "?" in text:
        text = text.split("?", 1)[0] + "?..."
    if "@" in text and "://" in text:
        scheme, rest = text.split("://", 1)
        return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
    return text
