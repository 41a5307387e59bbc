"""Storage URLs: parsed once, password never shown."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import parse_qsl, unquote, urlsplit

from memkit.errors import InvalidURLError

__all__ = ["StorageURL"]


class StorageURL:
    """A parsed storage URL such as ``sqlite:///memories.db`` or ``redis://:pw@host:6379/0``.

    ``repr`` and ``str`` mask the password, so a URL can be logged safely.
    """

    __slots__ = ("_raw", "database", "host", "options", "password", "path", "port", "scheme", "username")

    def __init__(self, url: str | StorageURL) -> None:
        if isinstance(url, StorageURL):
            url = url.raw
        if not isinstance(url, str) or "://" not in url:
            raise InvalidURLError(
                f"not a storage URL: {_mask_unparsed(url)!r}; expected e.g. 'sqlite:///memories.db' or 'memory://'"
            )
        try:
            parts = urlsplit(url)
            port = parts.port
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
        self.options: Mapping[str, str] = dict(parse_qsl(parts.query))

    @property
    def raw(self) -> str:
        """The URL as given, password included: pass it to drivers, never log it."""
        return self._raw

    @property
    def file_path(self) -> str:
        """For file URLs: ``sqlite:///rel.db`` -> ``rel.db``, ``sqlite:////abs.db`` -> ``/abs.db``."""
        return self.path[1:] if self.path.startswith("/") else self.path

    def __str__(self) -> str:
        if self.password is None:
            return self._raw
        parts = urlsplit(self._raw)
        user = parts.username or ""
        netloc = f"{user}:***@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
        return parts._replace(netloc=netloc).geturl()

    def __repr__(self) -> str:
        return f"StorageURL({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StorageURL) and other._raw == self._raw

    def __hash__(self) -> int:
        return hash(self._raw)


def _mask_unparsed(url: object) -> str:
    """Best-effort masking for strings that failed to parse."""
    text = str(url)
    if "@" in text and "://" in text:
        scheme, rest = text.split("://", 1)
        return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
    return text
